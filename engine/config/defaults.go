package config

import (
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// Default returns the configuration a file starts from: every value is the
// default of the struct it ends up in, taken from that struct's own
// constructor, so the file and the packages cannot drift apart. It lists
// the seeds' one model, "echo" (a file that leaves models out keeps it),
// and no tenant (everyone is the open default tenant).
func Default() *File {
	e := engine.DefaultConfig()
	b := e.Batcher // the live engine's, which learns its batches' overrun (the simulator's does not)
	d := actors.DefaultDeviceConfig()
	h := defaultHTTP()
	return &File{
		HTTP: h,
		Engine: Engine{
			Seed:               e.Seed,
			InFlightMax:        e.InFlightMax,
			JobTimeoutMultiple: e.JobTimeoutMultiple,
			JobTimeoutMin:      e.JobTimeoutMin,
		},
		Devices: Devices{
			Backend:           BackendEmulated,
			Count:             e.Devices,
			Latency:           d.Latency.Base,
			WarmModels:        d.Models,
			WatchdogMultiple:  d.WatchdogMultiple,
			RestartBackoff:    d.RestartBackoff,
			RestartBackoffMax: d.RestartBackoffMax,
			QuarantineAfter:   d.QuarantineAfter,
			QuarantineFor:     d.QuarantineFor,
		},
		Policy: Policy{
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
			KeyPolicy:          keyPolicyName[b.KeyPolicy],
			PriorityAging:      b.PriorityAging,
			BucketMerge:        b.BucketMerge,
			SignalWindow:       b.SignalWindow,
			TargetUtilization:  b.TargetUtilization,
			NoDeviceRetryAfter: b.NoDeviceRetryAfter,
		},
		Models:        []Model{defaultEcho()},
		DefaultTenant: limitsOf(b.DefaultTenant),
		Jobs:          defaultJobs(),
		Process:       Process{GCPercent: DefaultGCPercent},
	}
}

// DefaultGCPercent is the server's GOGC: with 4x the heap's live size
// between collections, a collection comes a quarter as often as at Go's
// 100, for about twice the resident memory (113 to 221 MB at 3x overload on
// the development VM; RESULTS.md).
const DefaultGCPercent = 400

// defaultEcho is the default registry's one model: the seeds' "echo", one
// version.
func defaultEcho() Model {
	m := defaultModel()
	m.Name = "echo"
	v := defaultVersion()
	v.Name = "v1"
	m.Versions = []Version{v}
	return m
}

// defaultModel is what a model listed in the file starts from: no limits of
// its own (the policy's apply) and one bucket.
func defaultModel() Model { return Model{} }

// defaultVersion routes with weight 1, so a model's versions share the
// traffic equally unless the file says otherwise.
func defaultVersion() Version { return Version{Weight: 1} }

// defaultTenant is what a tenant listed in the file starts from: the
// batcher's default tenant settings (weight 1, no limits).
func defaultTenant() Tenant {
	return Tenant{Limits: limitsOf(actors.DefaultBatcherConfig().DefaultTenant)}
}

func limitsOf(t actors.TenantConfig) Limits {
	return Limits{Weight: max(t.Weight, 1), Rate: t.Rate, Burst: t.Burst, InFlightMax: t.InflightMax}
}

// shutdownTimeoutDefault bounds the graceful shutdown: long enough for a
// full queue to drain at the seeds' throughput (10,000 items at 4,000/s),
// short enough that an orchestrator's own kill (Kubernetes waits 30 s)
// does not come first.
const shutdownTimeoutDefault = 25 * time.Second

var keyPolicyName = map[actors.KeyPolicy]string{
	actors.PolicyFair:  "fair",
	actors.PolicySlack: "slack",
}
