package autoscale

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// eventually polls cond every millisecond until it holds or the deadline
// passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func start(t *testing.T, policy actors.AutoscalerConfig, devices int, sig func() actors.Signals) *Recommender {
	t.Helper()
	r, err := New(Config{Policy: policy, Every: time.Millisecond, Devices: devices,
		Signals: func(context.Context) (actors.Signals, error) { return sig(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := r.Close(cctx); err != nil {
			t.Error(err)
		}
	})
	return r
}

// TestRecommendationFollowsPolicy: the recommendation is the policy's
// decision on the signals it is fed: up to the batcher's DevicesNeeded at
// once, then, once the signals are low (no down window, no cooldown), down
// one device at a time to the bounds' least.
func TestRecommendationFollowsPolicy(t *testing.T) {
	policy := actors.DefaultAutoscalerConfig()
	policy.DevicesMin, policy.DevicesMax = 1, 8
	policy.DownWindow, policy.Cooldown = 0, 0
	var needed atomic.Int64
	needed.Store(6)
	r := start(t, policy, 2, func() actors.Signals {
		return actors.Signals{DevicesNeeded: int(needed.Load()), DevicesHealthy: 2}
	})
	if got := r.DevicesCurrent(); got != 2 {
		t.Errorf("current %d, want 2", got)
	}
	eventually(t, "recommendation 6", func() bool { return r.DevicesRecommended() == 6 })
	if up, down := r.Decisions(); up != 1 || down != 0 {
		t.Errorf("decisions up %d down %d, want 1 and 0", up, down)
	}
	if d := r.Latest(); len(d) != 1 || d[0].Devices != 6 || d[0].Reason == "" {
		t.Errorf("latest %+v", d)
	}
	// More than the bound asks for the bound.
	needed.Store(100)
	eventually(t, "recommendation 8 (devices_max)", func() bool { return r.DevicesRecommended() == 8 })
	needed.Store(0)
	eventually(t, "recommendation 1 (devices_min)", func() bool { return r.DevicesRecommended() == 1 })
	up, down := r.Decisions()
	if up != 2 || down != 7 {
		t.Errorf("decisions up %d down %d, want 2 and 7 (one device at a time)", up, down)
	}
	if got := len(r.Latest()); got != 9 {
		t.Errorf("%d decisions kept, want 9", got)
	}
}

// TestPressureAddsOne: a predicted wait past wait_up with the batcher's
// own recommendation at the fleet asks for one device more (the policy's
// pressure rule, not the batcher's formula).
func TestPressureAddsOne(t *testing.T) {
	policy := actors.DefaultAutoscalerConfig()
	policy.DevicesMin, policy.DevicesMax = 1, 8
	policy.ColdStart, policy.Cooldown = time.Hour, time.Hour
	r := start(t, policy, 3, func() actors.Signals {
		return actors.Signals{DevicesNeeded: 3, DevicesHealthy: 3, WaitPredicted: time.Second}
	})
	eventually(t, "recommendation 4", func() bool { return r.DevicesRecommended() == 4 })
	// Booting for an hour: pressure adds no more.
	n := r.Readings()
	eventually(t, "100 more readings", func() bool { return r.Readings() >= n+100 })
	if got := r.DevicesRecommended(); got != 4 {
		t.Errorf("recommendation %d after 100 readings with the device booting, want 4", got)
	}
}

func TestNewRefuses(t *testing.T) {
	sig := func(context.Context) (actors.Signals, error) { return actors.Signals{}, nil }
	good := actors.DefaultAutoscalerConfig()
	for name, cfg := range map[string]Config{
		"policy":  {Policy: actors.AutoscalerConfig{}, Every: time.Second, Devices: 1, Signals: sig},
		"every":   {Policy: good, Devices: 1, Signals: sig},
		"devices": {Policy: good, Every: time.Second, Signals: sig},
		"signals": {Policy: good, Every: time.Second, Devices: 1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
