package main

import (
	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/fidelity"
	"github.com/batchd/batchd/scenarios"
	"github.com/batchd/batchd/sim"
)

// embeddedConfigArg is the --config value that names the embedded default
// serve configuration, the one `batchd serve` runs without --config.
const embeddedConfigArg = fidelity.EmbeddedConfig

// loadServeConfig reads the serve configuration `batchd sim --config`
// names: a file, or the embedded default.
func loadServeConfig(arg string) (*config.File, error) { return fidelity.LoadServeConfig(arg) }

// simServer sets the server side of cfg to what `batchd serve` runs with
// f (fidelity.SimServer, which `batchd fidelity` builds its simulated side
// with too).
func simServer(cfg *sim.Config, f *config.File, faults bool) error {
	return fidelity.SimServer(cfg, f, faults)
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
