package config

import (
	"fmt"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/devicemodel"
	"github.com/batchd/batchd/actors/schema"
	"github.com/batchd/batchd/engine"
)

// EngineConfig returns the engine's configuration, running on rt. Call it
// on a validated File.
func (f *File) EngineConfig(rt engine.NewRuntime) (engine.Config, error) {
	c, err := f.engineConfig(rt)
	if err != nil {
		return engine.Config{}, fmt.Errorf("config: %w: %w", ErrInvalid, err)
	}
	return c, nil
}

// Latency is the one cost model of the devices, their emulated backends
// and the batcher's planning: the batcher plans with what the devices do.
func (f *File) Latency() actors.LatencyModel {
	if f.Devices.LatencyModel == nil {
		return actors.FixedLatency(f.Devices.Latency)
	}
	return f.Devices.LatencyModel.Model()
}

// BatcherConfig is the batcher's configuration: the one mapping of the
// file's policy, registry, tenants and cost model onto actors.BatcherConfig,
// which the live engine and `batchd sim --config` both run.
func (f *File) BatcherConfig() actors.BatcherConfig {
	b := actors.DefaultBatcherConfig()
	f.Policy.Apply(&b)
	b.Latency = f.Latency()
	b.DefaultTenant = f.DefaultTenant.Config("")
	b.Models = schema.ModelConfigs(f.Models)
	b.Tenants = nil
	for _, t := range f.Tenants {
		b.Tenants = append(b.Tenants, t.Limits.Config(t.Name))
	}
	return b
}

// DeviceConfig is the devices' configuration: the live defaults (a
// watchdog minimum) with the file's cost model, supervision, warm models
// and ask-ahead.
func (f *File) DeviceConfig() actors.DeviceConfig {
	d := engine.DefaultConfig().Device
	d.Latency = f.Latency()
	f.Devices.Supervision.Apply(&d)
	d.Models = append([]string(nil), f.Devices.WarmModels...)
	d.AskAhead = f.Devices.AskAhead
	return d
}

// engineConfig maps the file onto engine.Config and runs the owners'
// checks. With rt nil it checks everything but the runtime.
func (f *File) engineConfig(rt engine.NewRuntime) (engine.Config, error) {
	lat := f.Latency()
	b := f.BatcherConfig()
	d := f.DeviceConfig()

	c := engine.DefaultConfig()
	c.Batcher = b
	c.Device = d
	c.Devices = f.Devices.Count
	c.Runtime = rt
	c.Seed = f.Engine.Seed
	c.InFlightMax = f.Engine.InFlightMax
	c.JobTimeoutMultiple = f.Engine.JobTimeoutMultiple
	c.JobTimeoutMin = f.Engine.JobTimeoutMin
	c.ReplyGrace = f.HTTP.ReplyGrace // the engine answers what it lost; the handler sizes its writes by it

	// Every device gets an emulated backend of its own, with the fault
	// knobs and a seed per device (the engine's own default backend,
	// plus the faults).
	ec := engine.DefaultEmulatedConfig()
	ec.Latency = lat
	ec.LatencySpread = f.Devices.LatencySpread
	ec.BatchMax = b.BatchMax
	faults := f.Devices.Faults
	ec.FaultPlan = faults.Plan()
	sched, err := faults.Scheduled(schema.FleetIndex(f.Devices.Count))
	if err != nil {
		return engine.Config{}, err
	}
	ec.Schedule = sched
	if err := ec.Validate(); err != nil {
		return engine.Config{}, err
	}
	// The last healthy_devices devices get no faults at rates (poison is
	// in the input, not the device, and stays), as in the simulator.
	healthy := ec
	healthy.FaultPlan = devicemodel.FaultPlan{PoisonPrefix: ec.PoisonPrefix}
	seed, count := c.Seed, f.Devices.Count
	c.Backend = func(i int) engine.Backend {
		e := ec
		if i >= count-faults.HealthyDevices {
			e = healthy
		}
		e.Index = i
		e.Seed = seed ^ uint64(i+1)*0x9e3779b97f4a7c15
		em, err := engine.NewEmulated(e)
		if err != nil {
			return nil // validated above; the engine reports a nil backend
		}
		return em
	}

	if rt == nil {
		if err := b.Validate(); err != nil {
			return engine.Config{}, err
		}
		if err := d.Validate(); err != nil {
			return engine.Config{}, err
		}
		return c, nil
	}
	if err := c.Validate(); err != nil {
		return engine.Config{}, err
	}
	return c, nil
}
