package engine

import (
	"context"

	"github.com/batchd/batchd/actors"
)

// FrontsOf returns the addresses of e's fronts, for tests that reach them.
func FrontsOf(e *Engine) []actors.Address { return e.fronts }

// AccumulatorStats asks e's accumulator i (Engine.Accumulators) for its
// stats alone.
func AccumulatorStats(ctx context.Context, e *Engine, i int) (actors.BatcherStats, error) {
	a, err := e.query(ctx, e.accs[i], false)
	return a.Stats, err
}

// SetRegisterHook makes f run in each submit right before (after false)
// and after (true) its waiter entry goes in; set it before any request.
func SetRegisterHook(e *Engine, f func(after bool)) { e.registerHook = f }
