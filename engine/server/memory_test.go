package server

import "testing"

func TestFallDetector(t *testing.T) {
	var f fallDetector
	steps := []struct {
		n    int64
		want bool
	}{
		{10, false},     // light load: nothing grew
		{200, false},    // still below fallPeakMin
		{50, false},     // a fall from a peak below fallPeakMin is not one
		{60_000, false}, // overload
		{20_000, false}, // a third of the peak: not yet a fall
		{5_000, true},   // under a quarter of 60,000: release
		{0, true},       // idle: under a quarter of 5,000, and 5,000 >= fallPeakMin
		{0, false},      // still idle: released already
		{4_000, false},  // back up
		{900, true},     // a fall from 4,000
	}
	for i, s := range steps {
		if got := f.step(s.n); got != s.want {
			t.Fatalf("step %d (%d requests): release %v, want %v", i, s.n, got, s.want)
		}
	}
}
