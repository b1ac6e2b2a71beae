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
	// KeysMax bounds the distinct compatibility keys tracked at once. A
	// key that holds no request is released when a new key needs its
	// place, so only keys that hold requests count against it. Default
	// 1,024.
	KeysMax int
	// TenantKeysMax bounds the keys one tenant holds requests in at once:
	// a key is made by any params, version or input length, and one
	// client must not take every key's place. A request that would need
	// one more is rejected ReasonQuota. Default 64.
	TenantKeysMax int
	// DevicesMax bounds the devices one batcher schedules. Default 1,024.
	DevicesMax int
	// Devices are the device actors the batcher asks, when it starts, to
	// announce themselves (Reannounce). A batcher that restarts (after a
	// panic, under supervision) has forgotten every device, and an idle
	// device announces itself only when it starts or restarts: without
	// this, a restarted batcher would have no device for ever. Empty by
	// default: devices register only by announcing themselves.
	Devices []Address
	// SLO is the latency target: a request without its own deadline must be
	// answered within SLO of its arrival. Default 200 ms, the seeds' p95.
	SLO time.Duration
	// TimeoutMax caps a request's own deadline at Arrival+TimeoutMax, so no
	// request can pin queue space for ever. Default 60 s.
	TimeoutMax time.Duration
	// Margin is held back from every request's slack for what the cost model
	// does not see (delivery of messages, variance of compute). Default 5 ms.
	Margin time.Duration
	// LearnOverrun adds to every batch the batcher plans with what batches
	// have lately run past the cost model, dispatch to BatchDone (see
	// OverrunWindow): in predicted waits and device free times, admission,
	// the slack flush rule and feasibility. The linger keeps to the model.
	// Off by default: the simulator's batches take exactly their predicted
	// time.
	LearnOverrun bool
	// OverrunMax caps one batch's overrun as LearnOverrun learns it, so a
	// stalled batch cannot close admission for the window's length.
	// Default 50 ms.
	OverrunMax time.Duration
	// OverrunAge is how long LearnOverrun remembers a batch: what an
	// overload taught (a starved CPU runs every batch late) is forgotten
	// this long after it ends, idle or not. Default 1 s: at four devices
	// of 100 ms, the last 40 batches.
	OverrunAge time.Duration
	// LingerMax, when positive, caps the derived linger. Zero (the default)
	// uses the derived linger alone; see Linger.
	LingerMax time.Duration
	// PoisonMemoryMax bounds the poison inputs the batcher remembers: an
	// input that failed a run alone after its batch failed with a
	// whole-batch error (the device splits a failed batch until the poison
	// is alone). While remembered, a copy of such an input is answered
	// Failed at admission, and a tenant that sent three of them has its
	// requests batched apart from other tenants': splitting finds a poison
	// only after its batch failed, which, with a batch time near the SLO,
	// costs every other request in that batch its deadline; remembered, it
	// costs no one else again. 0 remembers none. Default 1,024.
	PoisonMemoryMax int
	// PoisonMemoryAge is how long a poison input, and its tenant's
	// suspicion, are remembered after they last failed. Default 10 min.
	PoisonMemoryAge time.Duration
	// AttemptMax is how many device runs a request may take part in before
	// it fails (runs lost to a crash or hang count). Default 3.
	AttemptMax int
	// Latency is the cost model the batcher plans with. Default: the seeds'
	// fixed 100 ms per batch.
	Latency LatencyModel
	// NoDeviceRetryAfter is the retry hint given when no device is
	// registered or all are quarantined. Default 1 s.
	NoDeviceRetryAfter time.Duration

	// Models is the registry. Empty (the default) serves any model name and
	// takes a request's version as given; otherwise a request for a model
	// or version not listed is rejected.
	Models []ModelConfig
	// Tenants lists the tenants with their weights and limits. A tenant not
	// listed gets DefaultTenant's settings.
	Tenants []TenantConfig
	// DefaultTenant holds the settings of any tenant not listed: weight 1
	// and no limits by default.
	DefaultTenant TenantConfig
	// TenantsMax bounds the distinct tenants tracked. Default 1,024.
	TenantsMax int
	// KeyPolicy chooses which due key a free device serves. Default
	// PolicyFair.
	KeyPolicy KeyPolicy
	// PriorityAging is the wait after which a queued request counts one
	// priority level higher (and two levels after twice as long): a lower
	// level waits at most about twice this for the highest one, never for
	// ever. Default 50 ms, a quarter of the default SLO.
	PriorityAging time.Duration
	// BucketMerge lets a due batch with room take requests from the next
	// shorter length buckets of its model version. They are padded to the
	// batch's longest input, which costs compute where the latency model
	// charges for padding; in exchange, short buckets with little traffic
	// wait less. Default off.
	BucketMerge bool
	// SignalWindow is the time constant of the arrival-rate and wait
	// averages behind the signals and the autoscaling recommendation.
	// Default 1 s.
	SignalWindow time.Duration
	// TargetUtilization is the device busy fraction the autoscaling
	// recommendation plans for, leaving headroom for spikes. Default 0.75
	// (the seeds' 70-80%).
	TargetUtilization float64
}

// KeyPolicy is how a free device picks among the keys that are due.
type KeyPolicy uint8

const (
	// PolicyFair serves the due key whose least-served waiting tenant has
	// had the least device time for its weight (ties: least slack), after
	// the highest effective priority. A tenant flooding its own key then
	// gets its weighted share of the devices, not all of them.
	PolicyFair KeyPolicy = iota
	// PolicySlack serves the due key with the least slack first
	// (earliest deadline), priorities first.
	PolicySlack
)

// ModelConfig is one model in the registry.
type ModelConfig struct {
	Name string
	// Versions lists the servable versions; Weight routes requests that name
	// no version (a canary is {"v1", 95}, {"v2", 5}). A version with weight
	// 0 is served only to requests that pin it.
	Versions []VersionConfig
	// BatchMax, when positive and below the batcher's, caps this model's
	// batches.
	BatchMax int
	// InputLenMax, when positive, rejects longer inputs.
	InputLenMax int
	// SLO, when positive, replaces the batcher's SLO for this model.
	SLO time.Duration
	// BucketEdges are increasing input lengths in bytes: bucket i holds
	// inputs no longer than BucketEdges[i], the last bucket the rest. More
	// buckets mean less padding and more, smaller batches. Empty: one
	// bucket.
	BucketEdges []int
}

// VersionConfig is one version of a model.
type VersionConfig struct {
	Name   string
	Weight int
}

// TenantConfig is one tenant's share and limits.
type TenantConfig struct {
	Name string
	// Weight is the tenant's share of device time against other
	// backlogged tenants. Zero means 1.
	Weight int
	// Rate, when positive, limits the tenant to Rate requests per second
	// on average, with bursts of Burst (a token bucket).
	Rate  float64
	Burst int
	// InflightMax, when positive, caps the tenant's requests queued or on a
	// device at once.
	InflightMax int
}

// DefaultBatcherConfig returns the configuration for the seeds' reference
// service: batches of up to 100 at a fixed 100 ms, p95 target 200 ms.
func DefaultBatcherConfig() BatcherConfig {
	return BatcherConfig{
		BatchMax:           100,
		QueueMax:           10_000,
		QueueTotalMax:      100_000,
		KeysMax:            1_024,
		TenantKeysMax:      64,
		DevicesMax:         1_024,
		SLO:                200 * time.Millisecond,
		TimeoutMax:         60 * time.Second,
		Margin:             5 * time.Millisecond,
		OverrunMax:         50 * time.Millisecond,
		OverrunAge:         time.Second,
		AttemptMax:         3,
		PoisonMemoryMax:    1_024,
		PoisonMemoryAge:    10 * time.Minute,
		Latency:            FixedLatency(100 * time.Millisecond),
		NoDeviceRetryAfter: time.Second,
		DefaultTenant:      TenantConfig{Weight: 1},
		TenantsMax:         1_024,
		KeyPolicy:          PolicyFair,
		PriorityAging:      50 * time.Millisecond,
		SignalWindow:       time.Second,
		TargetUtilization:  0.75,
	}
}

// Validate reports the first field that makes the configuration unusable.
func (c BatcherConfig) Validate() error {
	switch {
	case c.BatchMax < 1:
		return fmt.Errorf("batcher config: BatchMax %d: must be at least 1", c.BatchMax)
	case c.QueueMax < 1 || c.QueueTotalMax < c.QueueMax:
		return fmt.Errorf("batcher config: QueueMax %d, QueueTotalMax %d: need 1 <= QueueMax <= QueueTotalMax", c.QueueMax, c.QueueTotalMax)
	case c.KeysMax < 1 || c.DevicesMax < 1 || c.TenantKeysMax < 1:
		return fmt.Errorf("batcher config: KeysMax, TenantKeysMax and DevicesMax must be at least 1")
	case len(c.Devices) > c.DevicesMax:
		return fmt.Errorf("batcher config: %d Devices, more than DevicesMax %d", len(c.Devices), c.DevicesMax)
	case c.SLO <= 0 || c.TimeoutMax < c.SLO:
		return fmt.Errorf("batcher config: SLO %v, TimeoutMax %v: need 0 < SLO <= TimeoutMax", c.SLO, c.TimeoutMax)
	case c.Margin < 0 || c.LingerMax < 0 || c.NoDeviceRetryAfter < 0 || c.OverrunMax < 0:
		return fmt.Errorf("batcher config: Margin, LingerMax, NoDeviceRetryAfter and OverrunMax must not be negative")
	case c.LearnOverrun && c.OverrunAge <= 0:
		return fmt.Errorf("batcher config: OverrunAge %v: must be positive with LearnOverrun", c.OverrunAge)
	case c.PoisonMemoryMax < 0 || c.PoisonMemoryMax > 0 && c.PoisonMemoryAge <= 0:
		return fmt.Errorf("batcher config: PoisonMemoryMax %d, PoisonMemoryAge %v: need no negative size, and a positive age with a size", c.PoisonMemoryMax, c.PoisonMemoryAge)
	case c.AttemptMax < 1:
		return fmt.Errorf("batcher config: AttemptMax %d: must be at least 1", c.AttemptMax)
	}
	if err := c.Latency.Validate(); err != nil {
		return fmt.Errorf("batcher config: %w", err)
	}
	switch {
	case c.TenantsMax < 1:
		return fmt.Errorf("batcher config: TenantsMax %d: must be at least 1", c.TenantsMax)
	case c.KeyPolicy > PolicySlack:
		return fmt.Errorf("batcher config: unknown KeyPolicy %d", c.KeyPolicy)
	case c.PriorityAging <= 0 || c.SignalWindow <= 0:
		return fmt.Errorf("batcher config: PriorityAging and SignalWindow must be positive")
	case !(c.TargetUtilization > 0 && c.TargetUtilization <= 1):
		return fmt.Errorf("batcher config: TargetUtilization %v: want (0, 1]", c.TargetUtilization)
	}
	if err := c.DefaultTenant.validate(); err != nil {
		return fmt.Errorf("batcher config: DefaultTenant: %w", err)
	}
	seen := map[string]bool{}
	for i, t := range c.Tenants {
		if t.Name == "" || seen["t/"+t.Name] {
			return fmt.Errorf("batcher config: Tenants[%d]: empty or repeated name %q", i, t.Name)
		}
		seen["t/"+t.Name] = true
		if err := t.validate(); err != nil {
			return fmt.Errorf("batcher config: tenant %q: %w", t.Name, err)
		}
	}
	for i, m := range c.Models {
		if m.Name == "" || seen["m/"+m.Name] {
			return fmt.Errorf("batcher config: Models[%d]: empty or repeated name %q", i, m.Name)
		}
		seen["m/"+m.Name] = true
		if err := m.validate(); err != nil {
			return fmt.Errorf("batcher config: model %q: %w", m.Name, err)
		}
	}
	return nil
}

func (t TenantConfig) validate() error {
	switch {
	case t.Weight < 0 || t.Rate < 0 || t.Burst < 0 || t.InflightMax < 0:
		return fmt.Errorf("negative weight or limit")
	case t.Rate > 0 && t.Burst < 1:
		return fmt.Errorf("Rate %v needs a Burst of at least 1", t.Rate)
	}
	return nil
}

func (m ModelConfig) validate() error {
	if len(m.Versions) == 0 {
		return fmt.Errorf("no versions")
	}
	names := map[string]bool{}
	total := 0
	for _, v := range m.Versions {
		if v.Name == "" || names[v.Name] || v.Weight < 0 {
			return fmt.Errorf("version %q: empty or repeated name, or negative weight", v.Name)
		}
		names[v.Name] = true
		total += v.Weight
	}
	if total == 0 {
		return fmt.Errorf("no version has a routing weight")
	}
	if m.BatchMax < 0 || m.InputLenMax < 0 || m.SLO < 0 {
		return fmt.Errorf("negative BatchMax, InputLenMax or SLO")
	}
	for i, e := range m.BucketEdges {
		if e < 1 || (i > 0 && e <= m.BucketEdges[i-1]) {
			return fmt.Errorf("BucketEdges must be positive and increasing")
		}
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
	return c.lingerFor(c.SLO, c.BatchMax, devices, maxLen)
}

// lingerFor is Linger for a model with its own SLO and batch size.
func (c *BatcherConfig) lingerFor(slo time.Duration, batchMax, devices, maxLen int) time.Duration {
	compute := c.Latency.Predict(batchMax, maxLen)
	l := slo - compute - c.Margin
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
	// WatchdogMin is the least time a run gets before it is declared hung,
	// whatever its prediction. Default 0 (the multiple alone), exact in
	// virtual time; a live runtime sets it, since a starved CPU delays
	// short batches by more than a few times their length.
	WatchdogMin time.Duration
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
	// OfferWindow is how long a device that serves several batchers
	// gathers their offers before it claims the best (it claims at once
	// when every one has offered). Default 0: ClusterOfferWindow, a few
	// link latencies; on one node (a split in the simulator) a microsecond
	// is enough.
	OfferWindow time.Duration
	// AskAhead is how long before its batch's predicted end a device takes
	// its next batch, and holds it, so that the next starts as soon as this
	// one ends, without the batcher's turn and two messages in between. The
	// device asks as each batch starts (DeviceReady.Running); the batcher
	// sends it a full batch at once, and a partial one that is due from
	// AskAhead before the running batch's predicted end (any when
	// draining). Set it to the hand-over it is to hide, a few hundred
	// microseconds: a partial batch formed that much earlier misses what
	// comes meanwhile, and one formed a whole batch time early (AskAhead
	// near the batch time) holds its requests for a batch time more. A
	// device still runs one batch at a time. Default 0: a device asks once
	// idle. Only a device with one batcher asks ahead (not one shared in a
	// cluster or a split).
	AskAhead time.Duration
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
	case c.WatchdogMultiple < 1 || c.WatchdogMin < 0:
		return fmt.Errorf("device config: WatchdogMultiple %d, WatchdogMin %v: need a multiple of at least 1 and no negative minimum", c.WatchdogMultiple, c.WatchdogMin)
	case c.RestartBackoff <= 0 || c.RestartBackoffMax < c.RestartBackoff:
		return fmt.Errorf("device config: need 0 < RestartBackoff <= RestartBackoffMax")
	case c.QuarantineAfter < 1 || c.QuarantineFor <= 0:
		return fmt.Errorf("device config: QuarantineAfter and QuarantineFor must be positive")
	case c.OfferWindow < 0 || c.OfferWindow > time.Second:
		return fmt.Errorf("device config: OfferWindow %v: want 0 to 1s", c.OfferWindow)
	case c.AskAhead < 0 || c.AskAhead > time.Minute:
		return fmt.Errorf("device config: AskAhead %v: want 0 to 1m", c.AskAhead)
	}
	if err := c.Latency.Validate(); err != nil {
		return fmt.Errorf("device config: %w", err)
	}
	return nil
}
