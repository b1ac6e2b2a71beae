package schema

import (
	"fmt"
	"time"

	"github.com/batchd/batchd/actors"
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
}

// LatencyPoint is one measured batch latency.
type LatencyPoint struct {
	BatchSize int           `yaml:"batch_size"`
	Latency   time.Duration `yaml:"latency"`
}

// LatencyModelOf is m as written in a file.
func LatencyModelOf(m actors.LatencyModel) LatencyModel {
	lm := LatencyModel{Base: m.Base, PerItem: m.PerItem, PerPaddedByte: m.PerPaddedByte}
	for _, p := range m.Table {
		lm.Table = append(lm.Table, LatencyPoint{BatchSize: p.BatchSize, Latency: p.Latency})
	}
	return lm
}

// Model is the cost model the devices run and the batcher plans with.
func (l LatencyModel) Model() actors.LatencyModel {
	m := actors.LatencyModel{Base: l.Base, PerItem: l.PerItem, PerPaddedByte: l.PerPaddedByte}
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
	if len(l.Table) == 0 && l.Base+l.PerItem <= 0 {
		v.Bad(path, "a batch must cost more than zero: set base or per_item")
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
