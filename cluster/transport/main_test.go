package transport

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the transports the tests close leave no goroutine
// behind (peers' writers, stream readers, the server).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
