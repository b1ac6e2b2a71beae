package fidelity

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/batchd/batchd/actors/schema"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/sim"
)

// EmbeddedConfig is the name of the embedded default serve configuration,
// the one `batchd serve` runs without --config, where a serve
// configuration is asked for.
const EmbeddedConfig = "default"

// LoadServeConfig reads the serve configuration arg names: a file, or the
// embedded default ("" or EmbeddedConfig).
func LoadServeConfig(arg string) (*config.File, error) {
	if arg == "" || arg == EmbeddedConfig {
		return config.LoadEmbedded()
	}
	// The simulated side needs no secret: a tenant's unset api_key_env is
	// a stand-in key (the live side's serve reads the real ones).
	return config.LoadFileKeyless(arg)
}

// ErrNotEmulated is SimServer's error for a serve configuration whose
// devices are real (cpu, cuda): the simulator runs the file's cost model on
// emulated devices, which is not what serve would run.
var ErrNotEmulated = errors.New("the simulator runs emulated devices only")

// SimServer sets the server side of cfg (the batcher, the devices: their
// count, cost model, supervision, warm models and, with faults, their fault
// rates) to what `batchd serve` runs with f: the batcher's configuration is
// the one f.BatcherConfig maps, the same the live engine gets. The traffic
// stays cfg's, but traffic for the stand-in model of a workload without a
// registry (model m, version v1) goes to the registry's models, each at
// weight 1 with its version routed, and the default traffic's tenant to
// the listed tenants.
func SimServer(cfg *sim.Config, f *config.File, faults bool) error {
	if b := f.Devices.Backend; b != config.BackendEmulated {
		return fmt.Errorf("devices.backend %s: %w: set devices.backend: emulated with the backend's measured latency_model (batchd profile)", b, ErrNotEmulated)
	}
	ec, err := f.EngineConfig(nil)
	if err != nil {
		return err
	}
	cfg.Batcher, cfg.Device, cfg.Devices = ec.Batcher, ec.Device, ec.Devices
	cfg.Latency = f.Latency()
	cfg.LatencySpread = f.Devices.LatencySpread
	cfg.DeviceModels = nil // every device holds devices.warm_models
	if faults {
		r := f.Devices.Faults
		cfg.Faults = r.Plan()
		cfg.HealthyDevices = r.HealthyDevices
		sched, err := r.Scheduled(schema.FleetIndex(f.Devices.Count))
		if err != nil {
			return err
		}
		cfg.FaultSchedule = sched
	}
	if len(f.Models) == 0 {
		return nil // an open registry serves any name
	}
	mix := make([]sim.ModelMix, len(f.Models))
	names := make([]string, len(f.Models))
	for i, m := range f.Models {
		mix[i] = sim.ModelMix{Model: m.Name, Weight: 1}
		names[i] = m.Name
	}
	def := sim.DefaultTrafficConfig()
	retarget := func(t *sim.TrafficConfig) {
		if slices.Equal(t.Mix, def.Mix) {
			t.Mix = slices.Clone(mix)
		}
	}
	retarget(&cfg.Traffic)
	for i := range cfg.Sources {
		retarget(&cfg.Sources[i])
	}
	if len(f.Tenants) > 0 && slices.Equal(cfg.Traffic.Tenants, def.Tenants) {
		// With tenants, every request is a listed tenant's: the open
		// tenant has no key to send.
		cfg.Traffic.Tenants = nil
		for _, t := range f.Tenants {
			cfg.Traffic.Tenants = append(cfg.Traffic.Tenants, t.Name)
		}
	}
	// Traffic for a model the registry does not serve would be a 404
	// live: refuse it.
	srcs := cfg.Sources // a workload of sources sends only those
	if len(srcs) == 0 {
		srcs = []sim.TrafficConfig{cfg.Traffic}
	}
	for _, s := range srcs {
		for _, m := range s.Mix {
			if !slices.Contains(names, m.Model) {
				return fmt.Errorf("the traffic asks for model %q, which the serve configuration does not serve (models: %s)", m.Model, strings.Join(names, ", "))
			}
		}
	}
	return nil
}

// serveConfig is the serve configuration c's live side runs: c.ServeConfig
// with the settings c gives, as `batchd serve`'s flags set them.
func serveConfig(c Config) (*config.File, error) {
	f, err := LoadServeConfig(c.ServeConfig)
	if err != nil {
		return nil, err
	}
	f.Devices.Count = c.Devices
	f.Devices.Latency, f.Devices.LatencyModel = c.Latency, nil
	f.Policy.BatchMax = c.BatchMax
	f.Policy.SLO = c.SLO
	f.Engine.Seed = c.Seed
	f.Devices.Faults.CrashRate = c.CrashRate
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// serveArgs are the `batchd serve` arguments that make it run c's serve
// configuration.
func serveArgs(c Config) []string {
	var args []string
	if c.ServeConfig != "" && c.ServeConfig != EmbeddedConfig {
		args = append(args, "--config", c.ServeConfig)
	}
	return append(args, "--devices", fmt.Sprint(c.Devices), "--latency", c.Latency.String(),
		"--batch-max", fmt.Sprint(c.BatchMax), "--slo", c.SLO.String(),
		"--crash-rate", strconv.FormatFloat(c.CrashRate, 'g', -1, 64), "--seed", fmt.Sprint(c.Seed))
}
