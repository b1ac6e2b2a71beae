package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/scenarios"
	"github.com/batchd/batchd/sim"
)

// embeddedConfigArg is the --config value that names the embedded default
// serve configuration, the one `batchd serve` runs without --config.
const embeddedConfigArg = "default"

// loadServeConfig reads the serve configuration `batchd sim --config`
// names: a file, or the embedded default.
func loadServeConfig(arg string) (*config.File, error) {
	if arg == embeddedConfigArg {
		return config.LoadEmbedded()
	}
	return config.LoadFile(arg)
}

// errNotEmulated is simServer's error for a serve configuration whose
// devices are real (cpu, cuda): the simulator runs the file's cost model
// on emulated devices, which is not what serve would run.
var errNotEmulated = errors.New("the simulator runs emulated devices only")

// simServer sets the server side of cfg (the batcher, the devices: their
// count, cost model, supervision, warm models and, with faults, their
// fault rates) to what `batchd serve` runs with f: the batcher's
// configuration is the one f.BatcherConfig maps, the same the live engine
// gets. The traffic stays cfg's, sent to the registry's models.
func simServer(cfg *sim.Config, f *config.File, faults bool) error {
	if b := f.Devices.Backend; b != config.BackendEmulated {
		return fmt.Errorf("devices.backend %s: %w: set devices.backend: emulated with the backend's measured latency_model (batchd profile)", b, errNotEmulated)
	}
	ec, err := f.EngineConfig(nil)
	if err != nil {
		return err
	}
	cfg.Batcher, cfg.Device, cfg.Devices = ec.Batcher, ec.Device, ec.Devices
	cfg.Latency = f.Latency()
	cfg.DeviceModels = nil // every device holds devices.warm_models
	if faults {
		r := f.Devices.Faults
		cfg.Faults = sim.FaultPlan{CrashRate: r.CrashRate, HangRate: r.HangRate, BatchErrorRate: r.BatchErrorRate,
			ItemErrorRate: r.ItemErrorRate, PoisonPrefix: r.PoisonPrefix}
	}
	// Traffic for the stand-in model of a workload without a registry
	// (model m, version v1) goes to the registry's models instead, each at
	// weight 1 with its version routed, as `batchd load` sends to them.
	if len(f.Models) == 0 {
		return nil
	}
	mix := make([]sim.ModelMix, len(f.Models))
	for i, m := range f.Models {
		mix[i] = sim.ModelMix{Model: m.Name, Weight: 1}
	}
	standIn := sim.DefaultTrafficConfig().Mix
	retarget := func(t *sim.TrafficConfig) {
		if slices.Equal(t.Mix, standIn) {
			t.Mix = slices.Clone(mix)
		}
	}
	retarget(&cfg.Traffic)
	for i := range cfg.Sources {
		retarget(&cfg.Sources[i])
	}
	if len(f.Tenants) > 0 && slices.Equal(cfg.Traffic.Tenants, sim.DefaultTrafficConfig().Tenants) {
		// With tenants, every request is a listed tenant's: the open
		// tenant has no key to send.
		cfg.Traffic.Tenants = nil
		for _, t := range f.Tenants {
			cfg.Traffic.Tenants = append(cfg.Traffic.Tenants, t.Name)
		}
	}
	return checkMix(cfg, f)
}

// checkMix refuses traffic for models the registry does not serve: live,
// each such request would be a 404.
func checkMix(cfg *sim.Config, f *config.File) error {
	served := map[string]bool{}
	for _, m := range f.Models {
		served[m.Name] = true
	}
	srcs := cfg.Sources // a workload of sources sends only those
	if len(srcs) == 0 {
		srcs = []sim.TrafficConfig{cfg.Traffic}
	}
	for _, s := range srcs {
		for _, m := range s.Mix {
			if !served[m.Model] {
				names := make([]string, 0, len(f.Models))
				for _, m := range f.Models {
					names = append(names, m.Name)
				}
				return fmt.Errorf("the traffic asks for model %q, which the serve configuration does not serve (models: %s)", m.Model, strings.Join(names, ", "))
			}
		}
	}
	return nil
}

// scenarioWithServer is a scenario's configuration with its server side
// replaced by the serve configuration's (simServer): its traffic, timing,
// faults and expectations stay the scenario's.
func scenarioWithServer(sc *scenarios.Scenario, f *config.File) (sim.Config, error) {
	cfg, err := sc.SimConfig(sc.Seed)
	if err != nil {
		return sim.Config{}, err
	}
	if err := simServer(&cfg, f, false); err != nil {
		return sim.Config{}, err
	}
	return cfg, nil
}

// followLatency makes the batcher and the devices plan with and run
// cfg.Latency, for a flag that replaces the cost model.
func followLatency(cfg *sim.Config) {
	cfg.Batcher.Latency, cfg.Device.Latency = actors.LatencyModel{}, actors.LatencyModel{}
}
