package actors

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestOverrunWindow: what the window learns is, after every observation,
// the quantile of the last overrunWindowLen overruns (each clamped to
// [0, max]) as a plain sort of them gives it.
func TestOverrunWindow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var w OverrunWindow
		var all []time.Duration
		capMax := time.Duration(rapid.Int64Range(0, 100).Draw(t, "max_ms")) * time.Millisecond
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
		for i := range n {
			if i%100 == 0 {
				level = rapid.Int64Range(0, 80).Draw(t, "level_ms")
			}
			elapsed := 100*time.Millisecond + time.Duration(level+over.Draw(t, "over_ms"))*time.Millisecond
			w.Observe(elapsed, 100*time.Millisecond, capMax)
			all = append(all, max(min(elapsed-100*time.Millisecond, capMax), 0))
			last := slices.Clone(all[len(all)-min(len(all), overrunWindowLen):])
			slices.Sort(last)
			want := last[min(int(overrunQuantile*float64(len(last))), len(last)-1)]
			if got := w.Learnt(); got != want {
				t.Fatalf("after %d observations: learnt %v, want %v", i+1, got, want)
			}
		}
	})
}

// BenchmarkOverrunObserve is the cost of one batch's observation on a full
// window, which the batcher pays on its own goroutine.
func BenchmarkOverrunObserve(b *testing.B) {
	var w OverrunWindow
	for i := range 2 * overrunWindowLen {
		w.Observe(time.Duration(100+i%37)*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond)
	}
	i := 0
	for b.Loop() {
		i++
		w.Observe(time.Duration(100+i%37)*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond)
	}
}
