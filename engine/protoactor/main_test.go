package protoactor

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// runtime a test makes is closed, and Close must leave nothing running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
