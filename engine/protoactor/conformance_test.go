package protoactor

import (
	"testing"

	"github.com/batchd/batchd/engine/enginetest"
)

// TestConformance runs the runtime conformance suite against this adapter.
func TestConformance(t *testing.T) { enginetest.Conformance(t, New) }

// TestBatcherRestart: a batcher that panics is restarted, finds its
// devices again and answers what was queued in it (see
// enginetest.BatcherRestart).
func TestBatcherRestart(t *testing.T) { enginetest.BatcherRestart(t, New) }
