package scenarios

import (
	"fmt"
	"slices"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
)

// SimConfig returns the simulator's configuration for the scenario with
// the given master seed (pass s.Seed for the scenario's own). The result
// is the caller's to change (a sweep sets Rate on its sources, a fleet
// change sets Devices) before sim.Run; sim.Config.Validate still checks
// it then.
//
// Each (phase, tenant) pair becomes one sim traffic source with the
// phase's rate times the tenant's share, so tenants keep their own
// random streams and a phase's mix holds per tenant.
func (s *Scenario) SimConfig(seed uint64) (sim.Config, error) {
	cfg := sim.DefaultConfig()
	cfg.Seed = seed
	cfg.Duration = s.Duration
	cfg.DrainMax = s.DrainMax
	cfg.NetDelay = s.NetDelay
	cfg.SignalsEvery = s.SampleEvery
	cfg.TimelineEvery = s.SampleEvery
	cfg.Windows = slices.Clone(s.Windows)
	cfg.Latency = s.latency
	cfg.LatencySpread = s.Devices.LatencySpread

	cfg.Devices = 0
	warm := false
	for _, n := range s.Nodes {
		cfg.Devices += n.Devices
		warm = warm || len(n.Models) > 0
	}
	if warm {
		for _, n := range s.Nodes {
			for range n.Devices {
				cfg.DeviceModels = append(cfg.DeviceModels, slices.Clone(n.Models))
			}
		}
	}

	d := &cfg.Device
	d.WatchdogMultiple = s.Devices.WatchdogMultiple
	d.RestartBackoff, d.RestartBackoffMax = s.Devices.RestartBackoff, s.Devices.RestartBackoffMax
	d.QuarantineAfter, d.QuarantineFor = s.Devices.QuarantineAfter, s.Devices.QuarantineFor

	b := &cfg.Batcher
	p := s.Policy
	b.BatchMax, b.QueueMax, b.QueueTotalMax, b.KeysMax = p.BatchMax, p.QueueMax, p.QueueTotalMax, p.KeysMax
	b.SLO, b.TimeoutMax, b.Margin, b.LingerMax = p.SLO, p.TimeoutMax, p.Margin, p.LingerMax
	b.AttemptMax = p.AttemptMax
	b.LearnOverrun, b.OverrunMax = p.LearnOverrun, p.OverrunMax
	b.KeyPolicy = actors.PolicyFair
	if p.KeyPolicy == "slack" {
		b.KeyPolicy = actors.PolicySlack
	}
	b.PriorityAging, b.BucketMerge = p.PriorityAging, p.BucketMerge
	b.SignalWindow, b.TargetUtilization, b.NoDeviceRetryAfter = p.SignalWindow, p.TargetUtilization, p.NoDeviceRetryAfter
	b.DevicesMax = max(b.DevicesMax, cfg.Devices)
	for _, m := range s.Models {
		mc := actors.ModelConfig{Name: m.Name, BatchMax: m.BatchMax, InputLenMax: m.InputLenMax, SLO: m.SLO, BucketEdges: slices.Clone(m.BucketEdges)}
		for _, v := range m.Versions {
			mc.Versions = append(mc.Versions, actors.VersionConfig{Name: v.Name, Weight: v.Weight})
		}
		b.Models = append(b.Models, mc)
	}
	priority := map[string]int8{}
	for _, t := range s.Tenants {
		b.Tenants = append(b.Tenants, actors.TenantConfig{Name: t.Name, Weight: t.Weight, Rate: t.Rate, Burst: t.Burst, InflightMax: t.InFlightMax})
		priority[t.Name] = priorities[t.Priority]
	}

	for i, ph := range s.Traffic {
		if ph.Start == nil {
			return sim.Config{}, fmt.Errorf("scenario %s: traffic[%d]: not validated (use Load, Builtin or Parse)", s.Name, i)
		}
		total := 0.0
		for _, share := range ph.Tenants {
			total += share
		}
		var mix []sim.ModelMix
		for _, m := range ph.Models {
			mix = append(mix, sim.ModelMix{Model: m.Model, Version: m.Version, Weight: m.Weight})
		}
		for _, name := range sortedKeys(ph.Tenants) {
			src := sim.DefaultTrafficConfig()
			src.Rate = ph.Rate * ph.Tenants[name] / total
			src.Arrival = arrivals[ph.Arrival]
			src.RateCurve = slices.Clone(ph.Curve)
			src.BurstSize = ph.BurstSize
			src.Start, src.Stop = *ph.Start, *ph.Start+ph.Duration
			src.Mix = mix
			src.Tenants = []string{name}
			src.InputLenMin, src.InputLenMax = ph.InputLen.Min, ph.InputLen.Max
			src.Timeout = ph.Timeout
			src.CancelRate, src.CancelAfter = ph.CancelRate, ph.CancelAfter
			src.Priority = priority[name]
			src.Params = ph.Params
			if ph.Poison != nil {
				src.PoisonShare, src.PoisonInputs = ph.Poison.Share, ph.Poison.Inputs
				src.PoisonPrefix = s.Faults.PoisonPrefix
			}
			cfg.Sources = append(cfg.Sources, src)
		}
	}

	f := s.Faults
	cfg.Faults = sim.FaultPlan{
		CrashRate: f.CrashRate, HangRate: f.HangRate, SlowRate: f.SlowRate, BatchErrorRate: f.BatchErrorRate,
		ItemErrorRate: f.ItemErrorRate, PoisonPrefix: f.PoisonPrefix, HealAt: f.HealAt,
	}
	if f.SlowRate > 0 {
		cfg.Faults.SlowFactor = f.SlowFactor
	}
	cfg.HealthyDevices = f.HealthyDevices
	for _, x := range f.Schedule {
		dev, err := s.deviceIndex(x)
		if err != nil {
			return sim.Config{}, fmt.Errorf("scenario %s: %w", s.Name, err)
		}
		cfg.FaultSchedule = append(cfg.FaultSchedule, sim.ScheduledFault{At: x.At, Device: dev, Kind: faultKinds[x.Kind], For: x.For, Factor: x.Factor})
	}
	return cfg, nil
}
