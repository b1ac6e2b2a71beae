package actors

import (
	"fmt"
	"time"
)

// BatcherConfig configures a Batcher: admission, per-key accumulation and the
// flush rule, and the scheduling of batches onto devices.
type BatcherConfig struct {
	// BatchMax is the most items in one batch. Default 100, the seeds'
	// backend limit.
	BatchMax int
	// QueueMax bounds the items queued under one key. Default 10,000.
	QueueMax int
	// QueueTotalMax bounds the items queued under all keys together.
	// Default 100,000 (a few tens of MB of small requests).
	QueueTotalMax int
	// KeysMax bounds the distinct compatibility keys tracked at once.
	// Default 1,024.
	KeysMax int
	// DevicesMax bounds the devices one batcher schedules. Default 1,024.
	DevicesMax int
	// SLO is the latency target: a request without its own deadline must be
	// answered within SLO of its arrival. Default 200 ms, the seeds' p95.
	SLO time.Duration
	// TimeoutMax caps a request's own deadline at Arrival+TimeoutMax, so no
	// request can pin queue space for ever. Default 60 s.
	TimeoutMax time.Duration
	// Margin is held back from every request's slack for what the cost model
	// does not see (delivery of messages, variance of compute). Default 5 ms.
	Margin time.Duration
	// LingerMax, when positive, caps the derived linger. Zero (the default)
	// uses the derived linger alone; see Linger.
	LingerMax time.Duration
	// AttemptMax is how many device runs a request may take part in before
	// it fails (runs lost to a crash or hang count). Default 3.
	AttemptMax int
	// Latency is the cost model the batcher plans with. Default: the seeds'
	// fixed 100 ms per batch.
	Latency LatencyModel
	// NoDeviceRetryAfter is the retry hint given when no device is
	// registered or all are quarantined. Default 1 s.
	NoDeviceRetryAfter time.Duration
}

// DefaultBatcherConfig returns the configuration for the seeds' reference
// service: batches of up to 100 at a fixed 100 ms, p95 target 200 ms.
func DefaultBatcherConfig() BatcherConfig {
	return BatcherConfig{
		BatchMax:           100,
		QueueMax:           10_000,
		QueueTotalMax:      100_000,
		KeysMax:            1_024,
		DevicesMax:         1_024,
		SLO:                200 * time.Millisecond,
		TimeoutMax:         60 * time.Second,
		Margin:             5 * time.Millisecond,
		AttemptMax:         3,
		Latency:            FixedLatency(100 * time.Millisecond),
		NoDeviceRetryAfter: time.Second,
	}
}

// Validate reports the first field that makes the configuration unusable.
func (c BatcherConfig) Validate() error {
	switch {
	case c.BatchMax < 1:
		return fmt.Errorf("batcher config: BatchMax %d: must be at least 1", c.BatchMax)
	case c.QueueMax < 1 || c.QueueTotalMax < c.QueueMax:
		return fmt.Errorf("batcher config: QueueMax %d, QueueTotalMax %d: need 1 <= QueueMax <= QueueTotalMax", c.QueueMax, c.QueueTotalMax)
	case c.KeysMax < 1 || c.DevicesMax < 1:
		return fmt.Errorf("batcher config: KeysMax and DevicesMax must be at least 1")
	case c.SLO <= 0 || c.TimeoutMax < c.SLO:
		return fmt.Errorf("batcher config: SLO %v, TimeoutMax %v: need 0 < SLO <= TimeoutMax", c.SLO, c.TimeoutMax)
	case c.Margin < 0 || c.LingerMax < 0 || c.NoDeviceRetryAfter < 0:
		return fmt.Errorf("batcher config: Margin, LingerMax and NoDeviceRetryAfter must not be negative")
	case c.AttemptMax < 1:
		return fmt.Errorf("batcher config: AttemptMax %d: must be at least 1", c.AttemptMax)
	}
	if err := c.Latency.Validate(); err != nil {
		return fmt.Errorf("batcher config: %w", err)
	}
	return nil
}

// Linger is how long the oldest request of a key may wait for company while
// a device is free. It is derived, not set:
//
//   - never more than the SLO leaves after a full batch's compute and the
//     margin (lingering longer would spend the request's own slack);
//   - never more than the gap between devices freeing up, compute/devices:
//     with that many devices, one becomes free that often, so holding a free
//     device longer fills no batch that the next device would not, and only
//     adds latency.
//
// LingerMax, when set, caps the result.
func (c BatcherConfig) Linger(devices, maxLen int) time.Duration {
	compute := c.Latency.Predict(c.BatchMax, maxLen)
	l := c.SLO - compute - c.Margin
	if devices < 1 {
		devices = 1
	}
	if gap := compute / time.Duration(devices); gap < l {
		l = gap
	}
	if c.LingerMax > 0 && c.LingerMax < l {
		l = c.LingerMax
	}
	return max(l, 0)
}

// DeviceConfig configures a Device actor.
type DeviceConfig struct {
	// Latency predicts the device's batch time; the watchdog is set from it.
	// Default: the seeds' fixed 100 ms.
	Latency LatencyModel
	// WatchdogMultiple: a run still going after this multiple of its
	// predicted latency is declared hung. Default 3.
	WatchdogMultiple int
	// RestartBackoff is the wait before the first restart after a failure;
	// it doubles with each further consecutive failure. Default 100 ms.
	RestartBackoff time.Duration
	// RestartBackoffMax caps the restart wait. Default 5 s.
	RestartBackoffMax time.Duration
	// QuarantineAfter consecutive failures take the device out of service
	// for QuarantineFor. Default 5.
	QuarantineAfter int
	// QuarantineFor is how long a quarantined device stays out. Default 30 s.
	QuarantineFor time.Duration
	// Models the device holds warm; empty means any.
	Models []string
}

// DefaultDeviceConfig returns the configuration of an emulated seeds' GPU.
func DefaultDeviceConfig() DeviceConfig {
	return DeviceConfig{
		Latency:           FixedLatency(100 * time.Millisecond),
		WatchdogMultiple:  3,
		RestartBackoff:    100 * time.Millisecond,
		RestartBackoffMax: 5 * time.Second,
		QuarantineAfter:   5,
		QuarantineFor:     30 * time.Second,
	}
}

// Validate reports the first field that makes the configuration unusable.
func (c DeviceConfig) Validate() error {
	switch {
	case c.WatchdogMultiple < 1:
		return fmt.Errorf("device config: WatchdogMultiple %d: must be at least 1", c.WatchdogMultiple)
	case c.RestartBackoff <= 0 || c.RestartBackoffMax < c.RestartBackoff:
		return fmt.Errorf("device config: need 0 < RestartBackoff <= RestartBackoffMax")
	case c.QuarantineAfter < 1 || c.QuarantineFor <= 0:
		return fmt.Errorf("device config: QuarantineAfter and QuarantineFor must be positive")
	}
	if err := c.Latency.Validate(); err != nil {
		return fmt.Errorf("device config: %w", err)
	}
	return nil
}
