package protoactor

import (
	"testing"

	"github.com/batchd/batchd/engine/enginetest"
)

// TestConformance runs the runtime conformance suite against this adapter.
func TestConformance(t *testing.T) { enginetest.Conformance(t, New) }
