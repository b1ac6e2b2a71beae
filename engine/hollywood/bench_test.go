package hollywood

import (
	"testing"

	"github.com/batchd/batchd/engine/enginetest"
)

// BenchmarkDo is the engine's cost per request on this runtime; the other
// adapter runs the same benchmark in its own binary.
func BenchmarkDo(b *testing.B) { enginetest.BenchmarkDo(b, New) }
