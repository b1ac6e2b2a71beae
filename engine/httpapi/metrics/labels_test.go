package metrics

import (
	"fmt"
	"sync"
	"testing"
)

// TestLabelSetBound: of names asked for from many goroutines at once, the
// first max distinct keep their name and every other is "other", whoever
// asks and however often; a fixed set keeps exactly its names.
func TestLabelSetBound(t *testing.T) {
	const maxNames, names, askers = 5, 40, 8
	s := newLabelSet(nil, maxNames)
	got := make([][]string, askers)
	var wg sync.WaitGroup
	for a := range askers {
		wg.Go(func() {
			for round := range 3 {
				for i := range names {
					got[a] = append(got[a], s.label(fmt.Sprintf("m%d", (i+a+round)%names)))
				}
			}
		})
	}
	wg.Wait()
	kept := map[string]bool{}
	for _, labels := range got {
		for _, l := range labels {
			if l != otherLabel {
				kept[l] = true
			}
		}
	}
	if len(kept) != maxNames {
		t.Fatalf("%d names kept, want %d: %v", len(kept), maxNames, kept)
	}
	// A name kept is kept for everyone, and one refused stays refused.
	for i := range names {
		n := fmt.Sprintf("m%d", i)
		if want := map[bool]string{true: n, false: otherLabel}[kept[n]]; s.label(n) != want {
			t.Errorf("%s: %q, want %q", n, s.label(n), want)
		}
	}

	f := newLabelSet([]string{"a", "b"}, maxNames)
	for n, want := range map[string]string{"a": "a", "b": "b", "c": otherLabel} {
		if got := f.label(n); got != want {
			t.Errorf("fixed set: %s is %q, want %q", n, got, want)
		}
	}
}

// BenchmarkLabel is one request's lookup of a kept name, from every core.
func BenchmarkLabel(b *testing.B) {
	s := newLabelSet(nil, 100)
	s.label("bytenet")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if s.label("bytenet") != "bytenet" {
				b.Fatal("the kept name was refused")
			}
		}
	})
}
