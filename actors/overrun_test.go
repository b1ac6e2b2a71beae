package actors

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestOverrunWindow: what the window learns is, after every observation
// and every Forget, the quantile of the last overrunWindowLen overruns
// (each clamped to [0, max]) not older than the age, as a plain sort of
// them gives it.
func TestOverrunWindow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var w OverrunWindow
		type obs struct{ at, over time.Duration }
		var all []obs
		capMax := time.Duration(rapid.Int64Range(0, 100).Draw(t, "max_ms")) * time.Millisecond
		age := time.Duration(rapid.Int64Range(1, 3000).Draw(t, "age_ms")) * time.Millisecond
		// Half the runs go well past the window's length, so that old
		// overruns are evicted.
		n := rapid.IntRange(1, 60).Draw(t, "n")
		if rapid.Bool().Draw(t, "long") {
			n += 2 * overrunWindowLen
		}
		// Few distinct values, so that equal overruns (and evicting one
		// of several equal values) are common; a level that moves now and
		// then, so that what is evicted differs from what comes in.
		over := rapid.Int64Range(-20, 40)
		level := int64(0)
		now := time.Duration(0)
		for i := range n {
			if i%100 == 0 {
				level = rapid.Int64Range(0, 80).Draw(t, "level_ms")
			}
			// Mostly a batch every few ms; now and then a long idle.
			now += time.Duration(rapid.Int64Range(0, 5).Draw(t, "gap_ms")) * time.Millisecond
			if rapid.IntRange(0, 50).Draw(t, "idle") == 0 {
				now += time.Duration(rapid.Int64Range(0, 5000).Draw(t, "idle_ms")) * time.Millisecond
				w.Forget(now, age)
			} else {
				elapsed := 100*time.Millisecond + time.Duration(level+over.Draw(t, "over_ms"))*time.Millisecond
				w.Observe(now, elapsed, 100*time.Millisecond, capMax)
				all = append(all, obs{now, max(min(elapsed-100*time.Millisecond, capMax), 0)})
			}
			var last []time.Duration
			for _, o := range all[len(all)-min(len(all), overrunWindowLen):] {
				if o.at >= now-age {
					last = append(last, o.over)
				}
			}
			w.Forget(now, age)
			slices.Sort(last)
			want := time.Duration(0)
			if len(last) > 0 {
				want = last[min(int(overrunQuantile*float64(len(last))), len(last)-1)]
			}
			if got := w.Learnt(); got != want {
				t.Fatalf("after %d steps at %v: learnt %v, want %v", i+1, now, got, want)
			}
		}
	})
}

// BenchmarkOverrunObserve is the cost of one batch's observation on a full
// window, which the batcher pays on its own goroutine.
func BenchmarkOverrunObserve(b *testing.B) {
	var w OverrunWindow
	for i := range 2 * overrunWindowLen {
		w.Observe(time.Duration(i)*time.Millisecond, time.Duration(100+i%37)*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond)
	}
	i := 0
	for b.Loop() {
		i++
		w.Observe(time.Duration(i)*time.Millisecond, time.Duration(100+i%37)*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond)
	}
}

// TestBatcherForgetsOverrunWhenIdle: an overrun learnt under load is
// forgotten OverrunAge after its last batch, with no batch run since (the
// issue: 45 ms kept through 20 s of idle, then a light load was turned
// away for seconds).
func TestBatcherForgetsOverrunWhenIdle(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.LearnOverrun = true
	b, c := newTestBatcher(t, cfg, 1)
	submit(b, c, 1)
	c.advance(b, c.now+cfg.Linger(1, 1))
	rb := ofType[RunBatch](c.take())
	if len(rb) != 1 {
		t.Fatalf("want a batch, got %+v", rb)
	}
	c.now += 100*time.Millisecond + 40*time.Millisecond // ran 40 ms over
	b.Receive(c, BatchDone{Device: Address{ID: 100}, BatchID: rb[0].Batch.ID})
	if got := b.Stats().Overrun; got != 40*time.Millisecond {
		t.Fatalf("learnt %v, want 40ms", got)
	}
	c.advance(b, c.now+cfg.OverrunAge-time.Millisecond)
	submit(b, c, 2)
	if got := b.Stats().Overrun; got != 40*time.Millisecond {
		t.Fatalf("forgot within OverrunAge: learnt %v, want 40ms", got)
	}
	c.advance(b, c.now+2*time.Millisecond)
	b.Receive(c, Cancel{ID: 2})
	if got := b.Stats().Overrun; got != 0 {
		t.Fatalf("after OverrunAge idle: learnt %v, want 0", got)
	}
}
