package actors

import (
	"slices"
	"time"
)

// overrunWindowLen is how many batches an OverrunWindow remembers: at four
// devices of 100 ms, the last 10 s.
const overrunWindowLen = 400

// overrunQuantile is the share of remembered overruns the learned one
// covers: the slowest 1% of batches are left to the configured Margin.
const overrunQuantile = 0.99

// OverrunWindow learns how much longer than predicted batches take, as the
// batcher sees them: from its dispatch to the device's BatchDone. On a
// real machine that is longer than the cost model says: message hand-offs,
// timer and scheduling delays, a busy CPU. The simulator's batches take
// exactly their predicted time, and its messages NetDelay, so there it
// learns 2×NetDelay at most. The zero value is ready to use and has learned
// nothing.
type OverrunWindow struct {
	ring   [overrunWindowLen]time.Duration
	n      int // observations in ring, up to its length
	next   int // where the next one goes
	learnt time.Duration
	// sorted holds ring[:n] in order, kept so by each Observe (a
	// binary search and a move of at most overrunWindowLen values, not a
	// sort: the batcher observes every batch).
	sorted []time.Duration
}

// Observe records one batch that took elapsed against a prediction of
// predicted. An overrun is at least 0 (a batch that ran short teaches
// nothing) and at most max.
func (w *OverrunWindow) Observe(elapsed, predicted, max time.Duration) {
	over := min(elapsed-predicted, max)
	if over < 0 {
		over = 0
	}
	if w.n == len(w.ring) {
		old := w.ring[w.next]
		i, _ := slices.BinarySearch(w.sorted, old)
		w.sorted = slices.Delete(w.sorted, i, i+1)
	} else {
		w.n++
	}
	w.ring[w.next] = over
	w.next = (w.next + 1) % len(w.ring)
	i, _ := slices.BinarySearch(w.sorted, over)
	w.sorted = slices.Insert(w.sorted, i, over)
	// The smallest remembered overrun at or above the quantile: with few
	// observations, the largest.
	w.learnt = w.sorted[min(int(overrunQuantile*float64(w.n)), w.n-1)]
}

// Learnt is the overrun that overrunQuantile of the remembered batches
// stayed within; 0 before any batch.
func (w *OverrunWindow) Learnt() time.Duration { return w.learnt }
