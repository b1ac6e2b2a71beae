package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that serve and load stop every goroutine they start.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
