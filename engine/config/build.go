package config

import (
	"fmt"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

var keyPolicies = map[string]actors.KeyPolicy{
	"fair":  actors.PolicyFair,
	"slack": actors.PolicySlack,
}

// EngineConfig returns the engine's configuration, running on rt. Call it
// on a validated File.
func (f *File) EngineConfig(rt engine.NewRuntime) (engine.Config, error) {
	c, err := f.engineConfig(rt)
	if err != nil {
		return engine.Config{}, fmt.Errorf("config: %w: %w", ErrInvalid, err)
	}
	return c, nil
}

// latency is the one cost model of the devices, their emulated backends
// and the batcher's planning: the batcher plans with what the devices do.
func (f *File) latency() actors.LatencyModel {
	d := f.Devices
	if d.LatencyModel == nil {
		return actors.FixedLatency(d.Latency)
	}
	m := actors.LatencyModel{Base: d.LatencyModel.Base, PerItem: d.LatencyModel.PerItem, PerPaddedByte: d.LatencyModel.PerPaddedByte}
	for _, p := range d.LatencyModel.Table {
		m.Table = append(m.Table, actors.LatencyPoint{BatchSize: p.BatchSize, Latency: p.Latency})
	}
	return m
}

// engineConfig maps the file onto engine.Config and runs the owners'
// checks. With rt nil it checks everything but the runtime.
func (f *File) engineConfig(rt engine.NewRuntime) (engine.Config, error) {
	lat := f.latency()
	p := f.Policy

	b := actors.DefaultBatcherConfig()
	b.BatchMax = p.BatchMax
	b.QueueMax = p.QueueMax
	b.QueueTotalMax = p.QueueTotalMax
	b.KeysMax = p.KeysMax
	b.TenantKeysMax = p.TenantKeysMax
	b.DevicesMax = p.DevicesMax
	b.TenantsMax = p.TenantsMax
	b.SLO = p.SLO
	b.TimeoutMax = p.TimeoutMax
	b.Margin = p.Margin
	b.LearnOverrun = p.LearnOverrun
	b.OverrunMax = p.OverrunMax
	b.OverrunAge = p.OverrunAge
	b.PoisonMemoryMax = p.PoisonMemoryMax
	b.PoisonMemoryAge = p.PoisonMemoryAge
	b.LingerMax = p.LingerMax
	b.AttemptMax = p.AttemptMax
	b.Latency = lat
	b.NoDeviceRetryAfter = p.NoDeviceRetryAfter
	b.KeyPolicy = keyPolicies[p.KeyPolicy]
	b.PriorityAging = p.PriorityAging
	b.BucketMerge = p.BucketMerge
	b.SignalWindow = p.SignalWindow
	b.TargetUtilization = p.TargetUtilization
	b.DefaultTenant = tenantConfig("", f.DefaultTenant)
	b.Models = f.batcherModels()
	b.Tenants = nil
	for _, t := range f.Tenants {
		b.Tenants = append(b.Tenants, tenantConfig(t.Name, t.Limits))
	}

	d := engine.DefaultConfig().Device // the live defaults (a watchdog minimum)
	d.Latency = lat
	d.WatchdogMultiple = f.Devices.WatchdogMultiple
	d.RestartBackoff = f.Devices.RestartBackoff
	d.RestartBackoffMax = f.Devices.RestartBackoffMax
	d.QuarantineAfter = f.Devices.QuarantineAfter
	d.QuarantineFor = f.Devices.QuarantineFor
	d.Models = append([]string(nil), f.Devices.WarmModels...)

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
	ec.BatchMax = b.BatchMax
	ec.HangRate = f.Devices.Faults.HangRate
	ec.CrashRate = f.Devices.Faults.CrashRate
	ec.BatchErrorRate = f.Devices.Faults.BatchErrorRate
	ec.ItemErrorRate = f.Devices.Faults.ItemErrorRate
	ec.PoisonPrefix = f.Devices.Faults.PoisonPrefix
	if err := ec.Validate(); err != nil {
		return engine.Config{}, err
	}
	seed := c.Seed
	c.Backend = func(i int) engine.Backend {
		e := ec
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

func tenantConfig(name string, l Limits) actors.TenantConfig {
	return actors.TenantConfig{Name: name, Weight: l.Weight, Rate: l.Rate, Burst: l.Burst, InflightMax: l.InFlightMax}
}
