package actors

import (
	"testing"
	"time"
)

var provisionerAddr = Address{ID: 77}

func testScalerConfig() AutoscalerConfig {
	return AutoscalerConfig{
		DevicesMin: 2,
		DevicesMax: 6,
		ColdStart:  20 * time.Second,
		WaitUp:     50 * time.Millisecond,
		SlackUp:    10 * time.Millisecond,
		WaitDown:   0,
		DownWindow: 30 * time.Second,
		Cooldown:   5 * time.Second,
	}
}

// scaler drives an Autoscaler with readings at given times and collects
// its decisions.
type scaler struct {
	t   *testing.T
	a   *Autoscaler
	ctx *fakeCtx
}

func newScaler(t *testing.T, cfg AutoscalerConfig, initial int) *scaler {
	t.Helper()
	a, err := NewAutoscaler(cfg, provisionerAddr, initial)
	if err != nil {
		t.Fatal(err)
	}
	return &scaler{t: t, a: a, ctx: newFakeCtx(Address{ID: 9})}
}

// at delivers s at time now and returns the decisions it made.
func (s *scaler) at(now time.Duration, sig Signals) []ScaleTo {
	s.ctx.now = now
	s.a.Receive(s.ctx, ScaleSignals{Signals: sig})
	out := s.ctx.take()
	for _, m := range out {
		if m.to != provisionerAddr {
			s.t.Fatalf("decision sent to %v, not the provisioner", m.to)
		}
	}
	return ofType[ScaleTo](out)
}

// quiet is a reading with no queue: healthy devices, nothing needed.
func quiet(healthy, needed int) Signals {
	return Signals{DevicesHealthy: healthy, DevicesNeeded: needed}
}

// TestAutoscalerUpOnPredictedWait: a predicted wait past WaitUp adds a
// device; the same fleet running flat out with no queue behind it (every
// device busy, what a utilisation-based scaler reads) adds none.
func TestAutoscalerUpOnPredictedWait(t *testing.T) {
	s := newScaler(t, testScalerConfig(), 3)
	busy := quiet(3, 3)
	for _, d := range []Address{{ID: 1}, {ID: 2}, {ID: 3}} {
		busy.Devices = append(busy.Devices, DeviceSignal{Device: d, BusyFraction: 1, Healthy: true})
	}
	if got := s.at(time.Second, busy); len(got) != 0 {
		t.Fatalf("busy devices, no queue: decided %+v; want nothing", got)
	}
	wait := busy
	wait.WaitPredicted = 60 * time.Millisecond
	got := s.at(2*time.Second, wait)
	if len(got) != 1 || got[0].Devices != 4 {
		t.Fatalf("predicted wait 60ms: decided %+v; want one ScaleTo 4", got)
	}
	// A late queued request with no idle device is pressure too.
	s = newScaler(t, testScalerConfig(), 3)
	late := quiet(3, 3)
	late.WaitPredicted = time.Millisecond
	late.Keys = []KeySignal{{Key: Key{Model: "m"}, Depth: 5, SlackMin: -time.Millisecond}}
	if got := s.at(time.Second, late); len(got) != 1 || got[0].Devices != 4 {
		t.Fatalf("late request: decided %+v; want ScaleTo 4", got)
	}
	// The recommendation, when above the fleet, is followed at once.
	s = newScaler(t, testScalerConfig(), 2)
	if got := s.at(time.Second, quiet(2, 5)); len(got) != 1 || got[0].Devices != 5 {
		t.Fatalf("recommendation 5: decided %+v; want ScaleTo 5", got)
	}
}

// TestAutoscalerColdStart: while the device it asked for boots (its cold
// start and a cooldown after it), pressure alone adds no more; after that,
// with the device still missing and pressure still there, the next one
// comes.
func TestAutoscalerColdStart(t *testing.T) {
	cfg := testScalerConfig()
	s := newScaler(t, cfg, 3)
	hot := quiet(3, 3)
	hot.WaitPredicted = time.Second
	if got := s.at(time.Second, hot); len(got) != 1 || got[0].Devices != 4 {
		t.Fatalf("first pressure: %+v; want ScaleTo 4", got)
	}
	for at := 2 * time.Second; at < time.Second+cfg.ColdStart+cfg.Cooldown; at += time.Second {
		if got := s.at(at, hot); len(got) != 0 {
			t.Fatalf("at %v, during the cold start: decided %+v; want nothing", at, got)
		}
	}
	if got := s.at(time.Second+cfg.ColdStart+cfg.Cooldown, hot); len(got) != 1 || got[0].Devices != 5 {
		t.Fatalf("after the cold start, pressure still: %+v; want ScaleTo 5", got)
	}
}

// TestAutoscalerHysteresis: a fleet above the recommendation shrinks only
// after the signals stayed low DownWindow without a break, one device per
// Cooldown, never below the recommendation.
func TestAutoscalerHysteresis(t *testing.T) {
	cfg := testScalerConfig()
	s := newScaler(t, cfg, 6)
	at := time.Duration(0)
	step := func(sig Signals) []ScaleTo {
		at += time.Second
		return s.at(at, sig)
	}
	// Low for most of the window, then one reading with a queue: the
	// window starts over.
	for range 25 {
		if got := step(quiet(6, 3)); len(got) != 0 {
			t.Fatalf("at %v: decided %+v inside the window", at, got)
		}
	}
	blip := quiet(6, 3)
	blip.WaitPredicted = 10 * time.Millisecond // above WaitDown, below WaitUp
	if got := step(blip); len(got) != 0 {
		t.Fatalf("blip: %+v", got)
	}
	start := at
	var downs []time.Duration
	var sizes []int
	for range 60 {
		for _, d := range step(quiet(6, 3)) {
			downs = append(downs, at-start)
			sizes = append(sizes, d.Devices)
		}
	}
	if len(downs) == 0 || downs[0] != cfg.DownWindow+time.Second {
		t.Fatalf("first removal at %v after the blip; want %v (the window from the first low reading)", downs, cfg.DownWindow+time.Second)
	}
	for i := 1; i < len(downs); i++ {
		if downs[i]-downs[i-1] < cfg.Cooldown {
			t.Fatalf("removals at %v: closer than the cooldown %v", downs, cfg.Cooldown)
		}
	}
	if want := []int{5, 4, 3}; len(sizes) != len(want) || sizes[0] != 5 || sizes[len(sizes)-1] != 3 {
		t.Fatalf("removals went %v; want %v (one at a time, down to the recommendation)", sizes, want)
	}
}

// TestAutoscalerBounds: never above DevicesMax nor below DevicesMin.
func TestAutoscalerBounds(t *testing.T) {
	cfg := testScalerConfig()
	s := newScaler(t, cfg, 5)
	if got := s.at(time.Second, quiet(5, 40)); len(got) != 1 || got[0].Devices != cfg.DevicesMax {
		t.Fatalf("recommendation 40: %+v; want ScaleTo %d", got, cfg.DevicesMax)
	}
	hot := quiet(6, 6)
	hot.WaitPredicted = time.Second
	for at := 2 * time.Second; at < 2*time.Minute; at += time.Second {
		if got := s.at(at, hot); len(got) != 0 {
			t.Fatalf("at %v, at the bound: %+v", at, got)
		}
	}
	s = newScaler(t, cfg, 3)
	var last int
	for at := time.Second; at < 5*time.Minute; at += time.Second {
		for _, d := range s.at(at, quiet(3, 0)) {
			last = d.Devices
		}
	}
	if last != cfg.DevicesMin || s.a.Target() != cfg.DevicesMin {
		t.Fatalf("idle for minutes: ended at %d (target %d); want DevicesMin %d", last, s.a.Target(), cfg.DevicesMin)
	}
}

// TestAutoscalerCooldown: two decisions are at least Cooldown apart, even
// when the recommendation rises in between.
func TestAutoscalerCooldown(t *testing.T) {
	cfg := testScalerConfig()
	s := newScaler(t, cfg, 2)
	if got := s.at(time.Second, quiet(2, 3)); len(got) != 1 {
		t.Fatalf("first: %+v", got)
	}
	if got := s.at(time.Second+cfg.Cooldown-time.Millisecond, quiet(2, 5)); len(got) != 0 {
		t.Fatalf("inside the cooldown: decided %+v", got)
	}
	if got := s.at(time.Second+cfg.Cooldown, quiet(2, 5)); len(got) != 1 || got[0].Devices != 5 {
		t.Fatalf("after the cooldown: %+v; want ScaleTo 5", got)
	}
}

func TestAutoscalerConfigValidate(t *testing.T) {
	if err := DefaultAutoscalerConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*AutoscalerConfig){
		"min 0":          func(c *AutoscalerConfig) { c.DevicesMin = 0 },
		"max below min":  func(c *AutoscalerConfig) { c.DevicesMax = 0 },
		"wait down high": func(c *AutoscalerConfig) { c.WaitDown = c.WaitUp },
		"cold negative":  func(c *AutoscalerConfig) { c.ColdStart = -1 },
	} {
		c := DefaultAutoscalerConfig()
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
