package schema

import (
	"time"

	"github.com/batchd/batchd/actors"
)

// Policy is the batcher's policy (actors.BatcherConfig): batching, queues,
// deadlines and fairness. Durations are written as Go durations ("100ms").
type Policy struct {
	// BatchMax is the most items in one batch.
	BatchMax int `yaml:"batch_max"`
	// QueueMax bounds the items queued under one key, QueueTotalMax under
	// all keys.
	QueueMax      int `yaml:"queue_max"`
	QueueTotalMax int `yaml:"queue_total_max"`
	// KeysMax bounds the keys holding requests at once, TenantKeysMax the
	// keys one tenant holds requests in.
	KeysMax       int `yaml:"keys_max"`
	TenantKeysMax int `yaml:"tenant_keys_max"`
	// DevicesMax and TenantsMax bound the devices and tenants the batcher
	// keeps state for.
	DevicesMax int `yaml:"devices_max"`
	TenantsMax int `yaml:"tenants_max"`
	// SLO is the latency target of a request without its own deadline.
	SLO time.Duration `yaml:"slo"`
	// TimeoutMax caps a request's own deadline.
	TimeoutMax time.Duration `yaml:"timeout_max"`
	// Margin is held back from every request's slack.
	Margin time.Duration `yaml:"margin"`
	// LearnOverrun adds to Margin what batches have lately run past their
	// predicted time (actors.BatcherConfig.LearnOverrun), capped per batch
	// at OverrunMax; OverrunAge forgets a batch's overrun this long after
	// it.
	LearnOverrun bool          `yaml:"learn_overrun"`
	OverrunMax   time.Duration `yaml:"overrun_max"`
	OverrunAge   time.Duration `yaml:"overrun_age"`
	// PoisonMemoryMax and PoisonMemoryAge bound the poison inputs the
	// batcher remembers (actors.BatcherConfig.PoisonMemoryMax).
	PoisonMemoryMax int           `yaml:"poison_memory_max"`
	PoisonMemoryAge time.Duration `yaml:"poison_memory_age"`
	// LingerMax, when positive, caps the linger derived from the SLO.
	LingerMax time.Duration `yaml:"linger_max"`
	// AttemptMax bounds the device runs a request may take part in.
	AttemptMax int `yaml:"attempt_max"`
	// KeyPolicy is "fair" (weighted device time per tenant) or "slack"
	// (earliest deadline first).
	KeyPolicy string `yaml:"key_policy"`
	// PriorityAging: a waiting request gains a priority level this often.
	PriorityAging time.Duration `yaml:"priority_aging"`
	// BucketMerge lets a due batch with room take shorter length buckets.
	BucketMerge bool `yaml:"bucket_merge"`
	// SignalWindow is the averaging window of the autoscaling signals, and
	// TargetUtilization the busy fraction their recommendation plans for.
	SignalWindow      time.Duration `yaml:"signal_window"`
	TargetUtilization float64       `yaml:"target_utilization"`
	// NoDeviceRetryAfter is the Retry-After when no device is up.
	NoDeviceRetryAfter time.Duration `yaml:"no_device_retry_after"`
}

// KeyPolicies maps the names of policy.key_policy onto actors' policies.
var KeyPolicies = map[string]actors.KeyPolicy{
	"fair":  actors.PolicyFair,
	"slack": actors.PolicySlack,
}

// KeyPolicyName is the name of p in policy.key_policy.
func KeyPolicyName(p actors.KeyPolicy) string {
	if p == actors.PolicySlack {
		return "slack"
	}
	return "fair"
}

// PolicyOf is the policy that b holds: what a file's policy starts from,
// so every default is the owner's (actors.DefaultBatcherConfig, or the live
// engine's, which learns its batches' overrun).
func PolicyOf(b actors.BatcherConfig) Policy {
	return Policy{
		BatchMax:           b.BatchMax,
		QueueMax:           b.QueueMax,
		QueueTotalMax:      b.QueueTotalMax,
		KeysMax:            b.KeysMax,
		TenantKeysMax:      b.TenantKeysMax,
		DevicesMax:         b.DevicesMax,
		TenantsMax:         b.TenantsMax,
		SLO:                b.SLO,
		TimeoutMax:         b.TimeoutMax,
		Margin:             b.Margin,
		LearnOverrun:       b.LearnOverrun,
		OverrunMax:         b.OverrunMax,
		OverrunAge:         b.OverrunAge,
		PoisonMemoryMax:    b.PoisonMemoryMax,
		PoisonMemoryAge:    b.PoisonMemoryAge,
		LingerMax:          b.LingerMax,
		AttemptMax:         b.AttemptMax,
		KeyPolicy:          KeyPolicyName(b.KeyPolicy),
		PriorityAging:      b.PriorityAging,
		BucketMerge:        b.BucketMerge,
		SignalWindow:       b.SignalWindow,
		TargetUtilization:  b.TargetUtilization,
		NoDeviceRetryAfter: b.NoDeviceRetryAfter,
	}
}

// Apply sets the policy's fields of b, the one mapping of the policy onto
// the batcher; b's registry, tenants and latency model are left alone.
func (p Policy) Apply(b *actors.BatcherConfig) {
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
	b.KeyPolicy = KeyPolicies[p.KeyPolicy]
	b.PriorityAging = p.PriorityAging
	b.BucketMerge = p.BucketMerge
	b.SignalWindow = p.SignalWindow
	b.TargetUtilization = p.TargetUtilization
	b.NoDeviceRetryAfter = p.NoDeviceRetryAfter
}

// Limits on values that would otherwise be accepted and then hurt: each
// says how large a sane setting can be, so a typo (an extra zero or three)
// is an error rather than a run that allocates for ever.
const (
	// DevicesCountMax bounds a fleet.
	DevicesCountMax = 1 << 16
	// BatchMaxMax bounds policy.batch_max.
	BatchMaxMax = 1 << 16
	// InFlightMaxMax bounds any in-flight cap.
	InFlightMaxMax = 1 << 24
	// QueueTotalMaxMax bounds any queue.
	QueueTotalMaxMax = 1 << 24
	// AttemptMaxMax bounds any count of attempts.
	AttemptMaxMax = 100
	timeoutMaxMax = time.Hour
)

// Check validates the policy, under the path prefix (policy).
func (p Policy) Check(v *Validator, prefix string) {
	k := func(key string) string { return prefix + "." + key }
	v.IntIn(k("batch_max"), p.BatchMax, 1, BatchMaxMax)
	v.IntIn(k("queue_total_max"), p.QueueTotalMax, 1, QueueTotalMaxMax)
	v.IntIn(k("queue_max"), p.QueueMax, 1, max(p.QueueTotalMax, 1))
	v.IntIn(k("keys_max"), p.KeysMax, 1, 1<<20)
	v.IntIn(k("tenant_keys_max"), p.TenantKeysMax, 1, max(p.KeysMax, 1))
	v.IntIn(k("devices_max"), p.DevicesMax, 1, DevicesCountMax)
	v.IntIn(k("tenants_max"), p.TenantsMax, 1, 1<<20)
	v.DurIn(k("timeout_max"), p.TimeoutMax, time.Millisecond, timeoutMaxMax)
	v.DurIn(k("slo"), p.SLO, time.Millisecond, max(p.TimeoutMax, time.Millisecond))
	v.DurIn(k("margin"), p.Margin, 0, p.SLO)
	v.DurIn(k("overrun_max"), p.OverrunMax, 0, p.SLO)
	v.DurIn(k("overrun_age"), p.OverrunAge, time.Millisecond, time.Hour)
	v.IntIn(k("poison_memory_max"), p.PoisonMemoryMax, 0, 1<<20)
	v.DurIn(k("poison_memory_age"), p.PoisonMemoryAge, time.Second, 24*time.Hour)
	v.DurIn(k("linger_max"), p.LingerMax, 0, p.SLO)
	v.IntIn(k("attempt_max"), p.AttemptMax, 1, AttemptMaxMax)
	if _, ok := KeyPolicies[p.KeyPolicy]; !ok {
		v.Bad(k("key_policy"), "%q: want fair or slack", p.KeyPolicy)
	}
	v.DurIn(k("priority_aging"), p.PriorityAging, time.Millisecond, time.Hour)
	v.DurIn(k("signal_window"), p.SignalWindow, time.Millisecond, time.Hour)
	if !(p.TargetUtilization > 0 && p.TargetUtilization <= 1) {
		v.Bad(k("target_utilization"), "%v: want (0, 1]", p.TargetUtilization)
	}
	v.DurIn(k("no_device_retry_after"), p.NoDeviceRetryAfter, 0, time.Hour)
}
