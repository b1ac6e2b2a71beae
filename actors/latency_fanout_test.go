package actors

import (
	"testing"
	"time"
)

// A fanned-out batch costs one call per wave of FanoutConcurrency calls,
// plus Base: the per-item cost and the table do not apply.
func TestLatencyFanoutPredict(t *testing.T) {
	m := LatencyModel{Base: 5 * time.Millisecond, FanoutConcurrency: 8, FanoutCall: 200 * time.Millisecond}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, 205 * time.Millisecond}, {8, 205 * time.Millisecond}, {9, 405 * time.Millisecond}, {100, 5*time.Millisecond + 13*200*time.Millisecond}} {
		if got := m.Predict(c.n, 0); got != c.want {
			t.Errorf("Predict(%d) = %v, want %v", c.n, got, c.want)
		}
	}
	for _, bad := range []LatencyModel{
		{FanoutConcurrency: 8},
		{FanoutCall: time.Second},
		{FanoutConcurrency: -1, FanoutCall: time.Second},
		{FanoutConcurrency: 8, FanoutCall: time.Second, PerItem: time.Millisecond},
		{FanoutConcurrency: 8, FanoutCall: time.Second, Table: []LatencyPoint{{1, time.Second}}},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v: valid, want an error", bad)
		}
	}
}
