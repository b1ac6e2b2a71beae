package scenarios

import (
	"fmt"
	"slices"

	"github.com/batchd/batchd/actors/schema"
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

	s.Devices.Supervision.Apply(&cfg.Device)

	b := &cfg.Batcher
	s.Policy.Apply(b)
	// A fleet larger than the policy's bound is the scenario's to ask for.
	b.DevicesMax = max(b.DevicesMax, cfg.Devices)
	if a := s.Autoscale; a != nil {
		cfg.Autoscale = &sim.AutoscaleConfig{Policy: a.Config(), Every: a.Every}
		b.DevicesMax = max(b.DevicesMax, a.DevicesMax)
	}
	b.Models = schema.ModelConfigs(s.Models)
	b.DefaultTenant = s.DefaultTenant.Config("")
	priority := map[string]int8{}
	for _, t := range s.Tenants {
		b.Tenants = append(b.Tenants, t.Limits.Config(t.Name))
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

	cfg.Faults = s.Faults.Plan()
	cfg.HealthyDevices = s.Faults.HealthyDevices
	sched, err := s.Faults.Scheduled(s.deviceIndex)
	if err != nil {
		return sim.Config{}, fmt.Errorf("scenario %s: %w", s.Name, err)
	}
	cfg.FaultSchedule = sched
	return cfg, nil
}
