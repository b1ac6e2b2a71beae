package sim

import (
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/ledger"
)

// TestAutoscaleSpike: an 8x spike on the three devices 500 req/s asks for is absorbed once the
// devices the policy asked for have booted (not before: the cold start
// holds), and the fleet comes back down after it; the batcher's books
// (Batcher.Check after every delivery) and the checker stay clean through
// the boots and drains.
func TestAutoscaleSpike(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Devices = 2
	cfg.Duration = 90 * time.Second
	cfg.Sources = []TrafficConfig{DefaultTrafficConfig(), DefaultTrafficConfig(), DefaultTrafficConfig()}
	for k, r := range []float64{500, 4000, 500} {
		s := &cfg.Sources[k]
		s.Rate, s.Tenants = r, []string{"t"}
		s.Start, s.Stop = time.Duration(k)*30*time.Second, time.Duration(k+1)*30*time.Second
	}
	pol := actors.DefaultAutoscalerConfig()
	pol.DevicesMin, pol.DevicesMax = 2, 8
	pol.ColdStart, pol.DownWindow, pol.Cooldown = 10*time.Second, 10*time.Second, 3*time.Second
	cfg.Autoscale = &AutoscaleConfig{Policy: pol}
	cfg.Windows = []time.Duration{0, 30 * time.Second, 40 * time.Second, 45 * time.Second, 60 * time.Second, 90 * time.Second}
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Check(); err != nil {
		t.Fatalf("violations: %v", err)
	}
	sc := rep.Scaling
	if sc == nil || len(sc.Decisions) == 0 {
		t.Fatal("no scaling report or no decisions")
	}
	var up ScaleDecisionOf
	for _, d := range sc.Decisions {
		if d.T >= 30 {
			up = d
			break
		}
	}
	if up.T < 30 || up.T > 32 || up.Devices <= 3 {
		t.Fatalf("first decision %+v; want a scale-up as the spike lands at 30 s", up)
	}
	// Ready devices (the batcher's healthy count): none of the new ones
	// before the cold start is over; at the end, only those still up.
	var readyMax, readyBefore, downAt int
	for _, p := range sc.Series {
		if p.T >= 30 && p.T < up.T+pol.ColdStart.Seconds()-0.5 {
			readyBefore = max(readyBefore, p.Ready)
		}
		readyMax = max(readyMax, p.Ready)
		if p.T > 60 && p.Devices < readyMax && downAt == 0 {
			downAt = int(p.T)
		}
	}
	if readyBefore > 3 || readyMax <= 3 {
		t.Fatalf("ready devices: %d before the cold start ended, %d at most; want at most 3 (the pre-spike fleet), then more", readyBefore, readyMax)
	}
	win := func(from float64) NameStatsWindow { return windowAt(t, rep, from) }
	if w := win(30); w.Rejected == 0 {
		t.Fatalf("30-40 s, during the cold start: nothing shed; the new devices served before they booted?")
	}
	if w := win(45); w.Rejected != 0 || w.SLOAttainment < 0.99 {
		t.Fatalf("45-60 s, after the boot: %d rejected, attainment %v; want the spike absorbed", w.Rejected, w.SLOAttainment)
	}
	if last := sc.Series[len(sc.Series)-1]; downAt == 0 || last.Devices > 3 || last.Ready > 3 {
		t.Fatalf("after the spike the fleet did not come back down: last point %+v", sc.Series[len(sc.Series)-1])
	}
	if sc.DeviceHours <= sc.StaticDeviceHours || sc.DeviceHoursRatio > float64(pol.DevicesMax)/float64(cfg.Devices) {
		t.Fatalf("device-hours %v against %v static: the spike's devices were not paid for, or too many were", sc.DeviceHours, sc.StaticDeviceHours)
	}
}

// NameStatsWindow is one window's figures for tenant t.
type NameStatsWindow = NameStats

// ScaleDecisionOf is one decision of Report.Scaling.
type ScaleDecisionOf = ledger.ScaleDecision

func windowAt(t *testing.T, rep Report, from float64) NameStats {
	t.Helper()
	for _, w := range rep.Windows {
		if w.FromS == from {
			return w.Tenants["t"]
		}
	}
	t.Fatalf("no window from %v s", from)
	return NameStats{}
}
