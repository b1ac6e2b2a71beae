package actors

import (
	"slices"
	"time"
)

// overrunWindowLen is how many batches an OverrunWindow remembers at most:
// at four devices of 100 ms, the last 10 s. BatcherConfig.OverrunAge
// forgets them sooner.
const overrunWindowLen = 400

// overrunQuantile is the share of remembered overruns the learned one
// covers: the slowest 1% of batches are left to the configured Margin.
const overrunQuantile = 0.99

// OverrunWindow learns how much longer than predicted batches take, as the
// batcher sees them: from its dispatch to the device's BatchDone. On a
// real machine that is longer than the cost model says: message hand-offs,
// timer and scheduling delays, a busy CPU. The simulator's batches take
// exactly their predicted time, and its messages NetDelay, so there it
// learns 2×NetDelay at most. It remembers the last overrunWindowLen
// batches, and forgets those older than the age Forget is given: what an
// overload taught must not outlive it (after a 10 s overload, a window of
// batches alone kept 45 ms through 20 s of idle and then turned away a
// tenth of a light load). The zero value is ready to use and has learned
// nothing.
type OverrunWindow struct {
	ring [overrunWindowLen]overrunAt
	n    int // observations in ring, up to its length
	next int // where the next one goes; the oldest is n before it
	// sorted holds the overruns in the ring in order, kept so by each
	// Observe and Forget (a binary search and a move of at most
	// overrunWindowLen values, not a sort: the batcher observes every
	// batch).
	sorted []time.Duration
	learnt time.Duration
}

type overrunAt struct {
	at   time.Duration
	over time.Duration
}

// Observe records one batch that ended at now and took elapsed against a
// prediction of predicted. An overrun is at least 0 (a batch that ran
// short teaches nothing) and at most max.
func (w *OverrunWindow) Observe(now, elapsed, predicted, max time.Duration) {
	over := min(elapsed-predicted, max)
	if over < 0 {
		over = 0
	}
	if w.n == len(w.ring) {
		w.dropOldest()
	}
	w.ring[w.next] = overrunAt{at: now, over: over}
	w.next = (w.next + 1) % len(w.ring)
	w.n++
	i, _ := slices.BinarySearch(w.sorted, over)
	w.sorted = slices.Insert(w.sorted, i, over)
	w.relearn()
}

// Forget drops the batches observed before now-age. The batcher calls it
// on every message, so it costs nothing when there is nothing to drop.
func (w *OverrunWindow) Forget(now, age time.Duration) {
	changed := false
	for w.n > 0 && w.ring[(w.next-w.n+len(w.ring))%len(w.ring)].at < now-age {
		w.dropOldest()
		changed = true
	}
	if changed {
		w.relearn()
	}
}

func (w *OverrunWindow) dropOldest() {
	old := w.ring[(w.next-w.n+len(w.ring))%len(w.ring)].over
	i, _ := slices.BinarySearch(w.sorted, old)
	w.sorted = slices.Delete(w.sorted, i, i+1)
	w.n--
}

// relearn takes the smallest remembered overrun at or above the quantile:
// with few observations, the largest; with none, 0.
func (w *OverrunWindow) relearn() {
	if w.n == 0 {
		w.learnt = 0
		return
	}
	w.learnt = w.sorted[min(int(overrunQuantile*float64(w.n)), w.n-1)]
}

// Learnt is the overrun that overrunQuantile of the remembered batches
// stayed within; 0 with none remembered.
func (w *OverrunWindow) Learnt() time.Duration { return w.learnt }
