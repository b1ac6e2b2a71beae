package server

import (
	"testing"

	"github.com/batchd/batchd/engine/config"
)

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

func TestGCFromFile(t *testing.T) {
	file := config.Process{GCPercent: 400, MemoryLimitBytes: 1 << 30}
	cases := []struct {
		name          string
		p             config.Process
		env           map[string]string
		gc, memoryMax bool
	}{
		{"the file's", file, nil, true, true},
		{"GOGC wins", file, map[string]string{"GOGC": "100"}, false, true},
		{"GOMEMLIMIT wins", file, map[string]string{"GOMEMLIMIT": "2GiB"}, true, false},
		{"no limit in the file", config.Process{GCPercent: 400}, nil, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gc, limit := gcFromFile(c.p, func(k string) string { return c.env[k] })
			if gc != c.gc || limit != c.memoryMax {
				t.Errorf("file's GOGC applies %v, its limit %v; want %v, %v", gc, limit, c.gc, c.memoryMax)
			}
		})
	}
}
