package schema

import (
	"fmt"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/devicemodel"
)

// Supervision is how the devices are watched and restarted
// (actors.DeviceConfig).
type Supervision struct {
	// WatchdogMultiple: a batch still running after this multiple of its
	// predicted latency is declared hung.
	WatchdogMultiple int `yaml:"watchdog_multiple"`
	// RestartBackoff and RestartBackoffMax: the wait before a failed device
	// restarts, doubling per consecutive failure up to the max.
	RestartBackoff    time.Duration `yaml:"restart_backoff"`
	RestartBackoffMax time.Duration `yaml:"restart_backoff_max"`
	// QuarantineAfter consecutive failures take a device out of service
	// for QuarantineFor.
	QuarantineAfter int           `yaml:"quarantine_after"`
	QuarantineFor   time.Duration `yaml:"quarantine_for"`
}

// SupervisionOf is the supervision d holds: what a file's starts from.
func SupervisionOf(d actors.DeviceConfig) Supervision {
	return Supervision{
		WatchdogMultiple:  d.WatchdogMultiple,
		RestartBackoff:    d.RestartBackoff,
		RestartBackoffMax: d.RestartBackoffMax,
		QuarantineAfter:   d.QuarantineAfter,
		QuarantineFor:     d.QuarantineFor,
	}
}

// Apply sets the supervision's fields of d.
func (s Supervision) Apply(d *actors.DeviceConfig) {
	d.WatchdogMultiple = s.WatchdogMultiple
	d.RestartBackoff, d.RestartBackoffMax = s.RestartBackoff, s.RestartBackoffMax
	d.QuarantineAfter, d.QuarantineFor = s.QuarantineAfter, s.QuarantineFor
}

// Check validates the supervision under the path prefix (devices).
func (s Supervision) Check(v *Validator, prefix string) {
	v.IntIn(prefix+".watchdog_multiple", s.WatchdogMultiple, 1, 1000)
	v.DurIn(prefix+".restart_backoff", s.RestartBackoff, time.Millisecond, time.Hour)
	v.DurIn(prefix+".restart_backoff_max", s.RestartBackoffMax, max(s.RestartBackoff, time.Millisecond), time.Hour)
	v.IntIn(prefix+".quarantine_after", s.QuarantineAfter, 1, 1000)
	v.DurIn(prefix+".quarantine_for", s.QuarantineFor, time.Millisecond, 24*time.Hour)
}

// LatencyModel is actors.LatencyModel: Base + PerItem·n +
// PerPaddedByte·n·longest, or a measured table instead of Base and PerItem.
type LatencyModel struct {
	Base          time.Duration  `yaml:"base"`
	PerItem       time.Duration  `yaml:"per_item"`
	PerPaddedByte time.Duration  `yaml:"per_padded_byte"`
	Table         []LatencyPoint `yaml:"table"`
	// Fanout models a single-item API called once per input, in place of
	// per_item and table.
	Fanout Fanout `yaml:"fanout"`
}

// Fanout is a single-item API behind a device: Concurrency calls at once,
// each Call long.
type Fanout struct {
	Concurrency int           `yaml:"concurrency"`
	Call        time.Duration `yaml:"call"`
}

// LatencyPoint is one measured batch latency.
type LatencyPoint struct {
	BatchSize int           `yaml:"batch_size"`
	Latency   time.Duration `yaml:"latency"`
}

// LatencyModelOf is m as written in a file.
func LatencyModelOf(m actors.LatencyModel) LatencyModel {
	lm := LatencyModel{Base: m.Base, PerItem: m.PerItem, PerPaddedByte: m.PerPaddedByte,
		Fanout: Fanout{Concurrency: m.FanoutConcurrency, Call: m.FanoutCall}}
	for _, p := range m.Table {
		lm.Table = append(lm.Table, LatencyPoint{BatchSize: p.BatchSize, Latency: p.Latency})
	}
	return lm
}

// Model is the cost model the devices run and the batcher plans with.
func (l LatencyModel) Model() actors.LatencyModel {
	m := actors.LatencyModel{Base: l.Base, PerItem: l.PerItem, PerPaddedByte: l.PerPaddedByte,
		FanoutConcurrency: l.Fanout.Concurrency, FanoutCall: l.Fanout.Call}
	for _, p := range l.Table {
		m.Table = append(m.Table, actors.LatencyPoint{BatchSize: p.BatchSize, Latency: p.Latency})
	}
	return m
}

// Check validates the model at path (devices.latency_model).
func (l LatencyModel) Check(v *Validator, path string) {
	v.DurIn(path+".base", l.Base, 0, time.Hour)
	v.DurIn(path+".per_item", l.PerItem, 0, time.Minute)
	v.DurIn(path+".per_padded_byte", l.PerPaddedByte, 0, time.Second)
	for i, pt := range l.Table {
		p := fmt.Sprintf("%s.table[%d]", path, i)
		if pt.BatchSize < 1 || (i > 0 && pt.BatchSize <= l.Table[i-1].BatchSize) {
			v.Bad(p+".batch_size", "%d: want positive and increasing", pt.BatchSize)
		}
		v.DurIn(p+".latency", pt.Latency, time.Microsecond, time.Hour)
	}
	switch f := l.Fanout; {
	case f != Fanout{}:
		v.IntIn(path+".fanout.concurrency", f.Concurrency, 1, 10_000)
		v.DurIn(path+".fanout.call", f.Call, time.Microsecond, time.Hour)
		if l.PerItem != 0 || len(l.Table) > 0 {
			v.Bad(path+".fanout", "replaces per_item and table: give one")
		}
	case len(l.Table) == 0 && l.Base+l.PerItem <= 0:
		v.Bad(path, "a batch must cost more than zero: set base, per_item, table or fanout")
	}
}

// FaultRates are the device faults drawn per batch, probabilities in
// [0, 1]. Hang, crash and batch error are exclusive outcomes of one batch,
// so their sum must not exceed 1.
type FaultRates struct {
	HangRate       float64 `yaml:"hang_rate"`
	CrashRate      float64 `yaml:"crash_rate"`
	BatchErrorRate float64 `yaml:"batch_error_rate"`
	ItemErrorRate  float64 `yaml:"item_error_rate"`
	// PoisonPrefix: a batch holding an input with this prefix fails whole,
	// every time. Empty: off.
	PoisonPrefix string `yaml:"poison_prefix"`
}

// Check validates the rates under the path prefix (devices.faults).
func (f FaultRates) Check(v *Validator, prefix string) {
	v.Prob(prefix+".hang_rate", f.HangRate)
	v.Prob(prefix+".crash_rate", f.CrashRate)
	v.Prob(prefix+".batch_error_rate", f.BatchErrorRate)
	v.Prob(prefix+".item_error_rate", f.ItemErrorRate)
	if s := f.HangRate + f.CrashRate + f.BatchErrorRate; s > 1 {
		v.Bad(prefix, "hang_rate + crash_rate + batch_error_rate = %v: must not exceed 1", s)
	}
}

// Faults are a device fleet's injected faults: the rates, slow batches, a
// heal time and faults at given times. The simulator and the live emulated
// backend run them with the one device model (devicemodel.Model), so a
// serve config and a scenario say the same thing with the same keys.
type Faults struct {
	// Crash, hang, batch and item error rates and the poison prefix.
	FaultRates `yaml:",inline"`
	SlowRate   float64 `yaml:"slow_rate"`
	SlowFactor float64 `yaml:"slow_factor"`
	// HealAt ends the faults at rates (poison stays). Zero: they never
	// heal (a scenario's default is its duration).
	HealAt time.Duration `yaml:"heal_at"`
	// HealthyDevices, counted from the last device, get no faults at
	// rates.
	HealthyDevices int `yaml:"healthy_devices"`
	// Schedule are faults at given times on given devices.
	Schedule []Fault `yaml:"schedule"`
}

// Fault is one fault at a given time.
type Fault struct {
	At time.Duration `yaml:"at"`
	// Kind is crash (mid-batch), hang or slow.
	Kind string `yaml:"kind"`
	// Node, when given, makes Device an index within that node; else
	// Device counts over all devices, node after node.
	Node   string `yaml:"node"`
	Device int    `yaml:"device"`
	// For and Factor: a slow fault's span and latency multiple.
	For    time.Duration `yaml:"for"`
	Factor float64       `yaml:"factor"`
}

// CheckLatencySpread validates a devices.latency_spread: the σ of a
// log-normal factor of mean 1 on each batch's true cost
// (devicemodel.Model.SetLatencySpread).
func CheckLatencySpread(v *Validator, path string, sigma float64) {
	if !(sigma >= 0 && sigma <= devicemodel.LatencySpreadLimit) {
		v.Bad(path, "%v: want 0 to %v", sigma, float64(devicemodel.LatencySpreadLimit))
	}
}

// FaultTimeMax bounds the times of the faults (heal_at, a scheduled
// fault's at and for): the simulator's longest run, a day.
const FaultTimeMax = 24 * time.Hour

// FaultsOf is the faults a file's start from: none, and a slow batch at 4x
// its latency (past a watchdog at 3x) once slow_rate is set.
func FaultsOf() Faults { return Faults{SlowFactor: 4} }

// FaultKinds names the kinds of scheduled fault.
var FaultKinds = map[string]devicemodel.FaultKind{"crash": devicemodel.FaultCrash, "hang": devicemodel.FaultHang, "slow": devicemodel.FaultSlow}

// Check validates the faults under the path prefix for a fleet of devices
// whose faults strike before end (zero: no end). index resolves a scheduled
// fault's device to its index over the fleet.
func (f Faults) Check(v *Validator, prefix string, devices int, end time.Duration, index func(Fault) (int, error)) {
	atMax := FaultTimeMax
	if end > 0 {
		atMax = min(end-1, FaultTimeMax)
	}
	f.FaultRates.Check(v, prefix)
	v.Prob(prefix+".slow_rate", f.SlowRate)
	v.Finite(prefix+".slow_factor", f.SlowFactor, 1)
	v.DurIn(prefix+".heal_at", f.HealAt, 0, FaultTimeMax)
	v.IntIn(prefix+".healthy_devices", f.HealthyDevices, 0, devices)
	if len(f.Schedule) > devicemodel.ScheduledFaultsLimit {
		v.Bad(prefix+".schedule", "%d faults: at most %d", len(f.Schedule), devicemodel.ScheduledFaultsLimit)
	}
	for i, x := range f.Schedule {
		p := fmt.Sprintf("%s.schedule[%d]", prefix, i)
		v.DurIn(p+".at", x.At, 0, atMax)
		kind, ok := FaultKinds[x.Kind]
		if !ok {
			v.Bad(p+".kind", "%q: want crash, hang or slow", x.Kind)
		}
		if _, err := index(x); err != nil {
			v.Bad(p+".device", "%v", err)
		}
		if kind == devicemodel.FaultSlow {
			v.DurIn(p+".for", x.For, time.Microsecond, FaultTimeMax)
			v.Finite(p+".factor", x.Factor, 1)
		} else if x.For != 0 || x.Factor != 0 {
			v.Bad(p, "for and factor are a slow fault's")
		}
	}
}

// Plan is the faults at rates as the device model takes them.
func (f Faults) Plan() devicemodel.FaultPlan {
	p := devicemodel.FaultPlan{
		CrashRate: f.CrashRate, HangRate: f.HangRate, SlowRate: f.SlowRate, BatchErrorRate: f.BatchErrorRate,
		ItemErrorRate: f.ItemErrorRate, PoisonPrefix: f.PoisonPrefix, HealAt: f.HealAt,
	}
	if f.SlowRate > 0 {
		p.SlowFactor = f.SlowFactor
	}
	return p
}

// Scheduled is the schedule as the device model takes it, each fault's
// device resolved by index (validated by Check).
func (f Faults) Scheduled(index func(Fault) (int, error)) ([]devicemodel.ScheduledFault, error) {
	var out []devicemodel.ScheduledFault
	for _, x := range f.Schedule {
		dev, err := index(x)
		if err != nil {
			return nil, err
		}
		out = append(out, devicemodel.ScheduledFault{At: x.At, Device: dev, Kind: FaultKinds[x.Kind], For: x.For, Factor: x.Factor})
	}
	return out, nil
}

// FleetIndex resolves a scheduled fault's device on one node of count
// devices, where no fault may name a node.
func FleetIndex(count int) func(Fault) (int, error) {
	return func(x Fault) (int, error) {
		switch {
		case x.Node != "":
			return 0, fmt.Errorf("node %q: a server is one node; leave node out", x.Node)
		case x.Device < 0 || x.Device >= count:
			return 0, fmt.Errorf("%d: the devices are 0 to %d", x.Device, count-1)
		}
		return x.Device, nil
	}
}
