package actors

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// interpolateScan is interpolate as a linear scan: the reference the
// bisection must equal exactly (the simulator's predictions depend on it).
func interpolateScan(t []LatencyPoint, n int) time.Duration {
	if n <= t[0].BatchSize {
		return t[0].Latency
	}
	for i := 1; i < len(t); i++ {
		if n <= t[i].BatchSize {
			a, b := t[i-1], t[i]
			frac := float64(n-a.BatchSize) / float64(b.BatchSize-a.BatchSize)
			return a.Latency + time.Duration(frac*float64(b.Latency-a.Latency))
		}
	}
	return t[len(t)-1].Latency
}

// The table is read by bisection exactly as by a scan, at every batch
// size in and around any valid table.
func TestInterpolateIsTheScans(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		points := rapid.IntRange(1, 120).Draw(t, "points")
		table := make([]LatencyPoint, points)
		size := 0
		for i := range table {
			size += rapid.IntRange(1, 5).Draw(t, "step")
			table[i] = LatencyPoint{BatchSize: size, Latency: time.Duration(rapid.Int64Range(1, int64(time.Second)).Draw(t, "latency"))}
		}
		m := LatencyModel{Table: table}
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		for n := 0; n <= size+2; n++ {
			if got, want := m.interpolate(n), interpolateScan(table, n); got != want {
				t.Fatalf("n %d: %v, the scan %v", n, got, want)
			}
		}
	})
}

// BenchmarkPredictTable is a prediction from a measured table of 100
// points (batchd profile's), at batch sizes across it.
func BenchmarkPredictTable(b *testing.B) {
	table := make([]LatencyPoint, 100)
	for i := range table {
		table[i] = LatencyPoint{BatchSize: i + 1, Latency: 200*time.Microsecond + time.Duration(i)*time.Microsecond}
	}
	m := LatencyModel{Table: table, PerPaddedByte: time.Nanosecond}
	var sum time.Duration
	n := 0
	for b.Loop() {
		n = n%100 + 1
		sum += m.Predict(n, 128)
	}
	if sum == 0 {
		b.Fatal("no prediction")
	}
}
