package actors

import (
	"fmt"
	"time"
)

// AutoscalerConfig configures the Autoscaler, the policy that adds and
// removes devices from the batcher's signals.
type AutoscalerConfig struct {
	// DevicesMin and DevicesMax bound the fleet the policy asks for.
	DevicesMin, DevicesMax int
	// ColdStart is how long a new device takes to announce itself: the
	// policy counts the devices it asked for as coming until then, and
	// adds no device for pressure alone meanwhile (the ones booting will
	// take it).
	ColdStart time.Duration
	// WaitUp: a predicted queue wait (Signals.WaitPredicted) of at least
	// this much is pressure, and asks for one device more.
	WaitUp time.Duration
	// SlackUp: a queued request with less slack than this (KeySignal.
	// SlackMin; negative is late) while no device is idle to take it
	// (a predicted wait above zero) is pressure too. A lingering batch
	// with a device idle is not: its slack is meant to run down.
	SlackUp time.Duration
	// WaitDown: the signals are low when the predicted wait is at most
	// this, there is no pressure, and the batcher's recommendation
	// (Signals.DevicesNeeded) is below the fleet.
	WaitDown time.Duration
	// DownWindow is how long the signals must stay low, without a break,
	// before the policy removes a device: the hysteresis of scale-down.
	DownWindow time.Duration
	// Cooldown is the least time between two decisions, and between two
	// removals while the signals stay low.
	Cooldown time.Duration
}

// DefaultAutoscalerConfig is a policy for fixed 100 ms batches and a 200 ms
// SLO: act when a batch would wait a batch time (more batches queued than
// devices: under light load the batcher keeps its devices busy with small
// batches, so a wait shorter than one batch is the next device coming
// free, not a backlog), or a queued request is late with no device idle;
// remove a device after 30 s of low signals, one per 10 s.
func DefaultAutoscalerConfig() AutoscalerConfig {
	return AutoscalerConfig{
		DevicesMin: 1,
		DevicesMax: 16,
		ColdStart:  30 * time.Second,
		WaitUp:     100 * time.Millisecond,
		SlackUp:    0,
		WaitDown:   50 * time.Millisecond,
		DownWindow: 30 * time.Second,
		Cooldown:   10 * time.Second,
	}
}

// AutoscaleDevicesLimit bounds AutoscalerConfig.DevicesMax.
const AutoscaleDevicesLimit = 4096

// Validate reports the first setting the policy cannot run with.
func (c AutoscalerConfig) Validate() error {
	switch {
	case c.DevicesMin < 1 || c.DevicesMax < c.DevicesMin || c.DevicesMax > AutoscaleDevicesLimit:
		return fmt.Errorf("autoscaler config: DevicesMin %d, DevicesMax %d: need 1 <= DevicesMin <= DevicesMax <= %d", c.DevicesMin, c.DevicesMax, AutoscaleDevicesLimit)
	case c.ColdStart < 0 || c.ColdStart > time.Hour:
		return fmt.Errorf("autoscaler config: ColdStart %v: need 0 to 1h", c.ColdStart)
	case c.WaitUp <= 0 || c.WaitDown < 0 || c.WaitDown >= c.WaitUp:
		return fmt.Errorf("autoscaler config: WaitUp %v, WaitDown %v: need 0 <= WaitDown < WaitUp", c.WaitUp, c.WaitDown)
	case c.DownWindow < 0 || c.DownWindow > 24*time.Hour || c.Cooldown < 0 || c.Cooldown > 24*time.Hour:
		return fmt.Errorf("autoscaler config: DownWindow %v, Cooldown %v: need 0 to 24h", c.DownWindow, c.Cooldown)
	}
	return nil
}

// ScaleSignals hands the Autoscaler a reading of the batcher's signals
// (Batcher.Signals). The runtime sends it, as often as it likes: the
// policy decides on each one.
type ScaleSignals struct{ Signals Signals }

// ScaleTo is the Autoscaler's decision, sent to its provisioner: run
// Devices devices. New ones are usable once they announce themselves
// (DeviceReady, after their cold start); removed ones are drained: they
// finish their batch, then tell the batcher they are out (DeviceDown) and
// announce themselves no more.
type ScaleTo struct {
	Devices int
	// Reason says which signal decided it, for the report.
	Reason string
}

// Autoscaler is the scaling policy. It reads the leading indicators of
// the batcher's signals, not utilisation: the predicted queue wait, the
// least slack of a queued request, and the recommendation the batcher
// computes from arrival rates and batch costs (Signals.DevicesNeeded).
//
//   - Up: when the recommendation exceeds the fleet asked for, to the
//     recommendation; on pressure (a predicted wait of WaitUp, a slack
//     under SlackUp) one device more, unless devices it asked for are
//     still in their cold start (or its first Cooldown). A device busy all the time with no queue
//     behind it asks for nothing.
//   - Down: after the signals stayed low for DownWindow, one device at a
//     time, one per Cooldown, never below the recommendation.
//   - Always within DevicesMin and DevicesMax, and at most one decision per
//     Cooldown.
type Autoscaler struct {
	cfg         AutoscalerConfig
	provisioner Address
	// target is the fleet last asked for.
	target int
	// changed is when target last changed, up when it last rose; changedOK
	// is false before the first decision.
	changed, up time.Duration
	changedOK   bool
	// lowSince is when the signals last turned low; lowOK says they are.
	lowSince time.Duration
	lowOK    bool
}

// NewAutoscaler returns the policy for a fleet that starts with initial
// devices, clamped to the bounds; its decisions go to provisioner.
func NewAutoscaler(cfg AutoscalerConfig, provisioner Address, initial int) (*Autoscaler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Autoscaler{cfg: cfg, provisioner: provisioner, target: min(max(initial, cfg.DevicesMin), cfg.DevicesMax)}, nil
}

// Target is the fleet the policy last asked for.
func (a *Autoscaler) Target() int { return a.target }

// Receive implements Actor.
func (a *Autoscaler) Receive(ctx Context, msg Message) {
	switch m := msg.(type) {
	case Start:
	case ScaleSignals:
		a.decide(ctx, m.Signals)
	case Undeliverable:
	default:
		panic(fmt.Sprintf("batchd: autoscaler got unknown message %T", msg))
	}
}

// pressure says whether the queues outgrow the fleet, and why.
func (a *Autoscaler) pressure(s Signals) (bool, string) {
	if s.WaitPredicted >= a.cfg.WaitUp {
		return true, fmt.Sprintf("predicted wait %v >= %v", s.WaitPredicted, a.cfg.WaitUp)
	}
	for _, k := range s.Keys {
		if k.Depth > 0 && k.SlackMin < a.cfg.SlackUp && s.WaitPredicted > 0 {
			return true, fmt.Sprintf("slack %v < %v on %s", k.SlackMin, a.cfg.SlackUp, k.Key.Model)
		}
	}
	return false, ""
}

func (a *Autoscaler) decide(ctx Context, s Signals) {
	now := ctx.Now()
	hot, why := a.pressure(s)
	// Devices asked for and not announced yet are booting: until their
	// cold start and a cooldown after it (a reading taken as they come up
	// still shows the queue they are about to take) pressure adds none.
	booting := s.DevicesHealthy < a.target && a.changedOK && now < a.up+a.cfg.ColdStart+a.cfg.Cooldown
	want, reason := a.target, ""
	switch {
	case s.DevicesNeeded > a.target:
		want, reason = s.DevicesNeeded, fmt.Sprintf("recommendation %d devices", s.DevicesNeeded)
	case hot && !booting:
		want, reason = a.target+1, why
	}
	low := !hot && s.WaitPredicted <= a.cfg.WaitDown && s.DevicesNeeded < a.target
	switch {
	case !low:
		a.lowOK = false
	case !a.lowOK:
		a.lowOK, a.lowSince = true, now
	}
	if want == a.target && a.lowOK && now-a.lowSince >= a.cfg.DownWindow {
		want = max(a.target-1, s.DevicesNeeded)
		reason = fmt.Sprintf("signals low for %v", now-a.lowSince)
	}
	want = min(max(want, a.cfg.DevicesMin), a.cfg.DevicesMax)
	if want == a.target || (a.changedOK && now-a.changed < a.cfg.Cooldown) {
		return
	}
	if want > a.target {
		a.up = now
	}
	a.target, a.changed, a.changedOK = want, now, true
	ctx.Send(a.provisioner, ScaleTo{Devices: want, Reason: reason})
}
