package engine_test

import (
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/enginetest"
)

// TestConformance runs the runtime conformance suite against the runtime
// of this build (protoactor, or hollywood with -tags hollywood).
func TestConformance(t *testing.T) { enginetest.Conformance(t, engine.LinkedRuntime) }

// TestBatcherRestart: a batcher that panics is restarted, finds its
// devices again and answers what was queued in it (see
// enginetest.BatcherRestart).
func TestBatcherRestart(t *testing.T) { enginetest.BatcherRestart(t, engine.LinkedRuntime) }

// BenchmarkDo is the engine's cost per request on the runtime of this
// build; run it with -tags hollywood for the other.
func BenchmarkDo(b *testing.B) { enginetest.BenchmarkDo(b, engine.LinkedRuntime) }
