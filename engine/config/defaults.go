package config

import (
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/schema"
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
		GRPC: defaultGRPC(),
		Engine: Engine{
			Seed:               e.Seed,
			InFlightMax:        e.InFlightMax,
			JobTimeoutMultiple: e.JobTimeoutMultiple,
			JobTimeoutMin:      e.JobTimeoutMin,
		},
		Devices: Devices{
			Backend:     BackendEmulated,
			Count:       e.Devices,
			CUDAGraphs:  true, // cudabridge.DefaultDeviceConfig's, which engine/ may not import (engine/server's tests hold them equal)
			Latency:     d.Latency.Base,
			WarmModels:  d.Models,
			Supervision: schema.SupervisionOf(d),
			Faults:      schema.FaultsOf(),
			Worker:      defaultWorker(),
			Upstream:    defaultUpstream(),
			Fanout:      defaultFanout(),
		},
		Policy:        schema.PolicyOf(b),
		Models:        []Model{defaultEcho()},
		DefaultTenant: schema.LimitsOf(b.DefaultTenant),
		Jobs:          defaultJobs(),
		Process:       Process{GCPercent: DefaultGCPercent},
		Cluster:       defaultCluster(),
		Generation:    defaultGeneration(),
	}
}

// DefaultGCPercent is the server's GOGC: with 4x the heap's live size
// between collections, a collection comes a quarter as often as at Go's
// 100, for about twice the resident memory (113 to 221 MB at 3x overload on
// the development VM; RESULTS.md).
const DefaultGCPercent = 400

// defaultEcho is the default registry's one model: the seeds' "echo", one
// version, v1.
func defaultEcho() Model {
	m := schema.DefaultModel()
	m.Name = "echo"
	return m
}

// defaultTenant is what a tenant listed in the file starts from: the
// batcher's default tenant settings (weight 1, no limits).
func defaultTenant() Tenant {
	return Tenant{Tenant: schema.Tenant{Limits: schema.DefaultLimits()}}
}

// shutdownTimeoutDefault bounds the graceful shutdown: long enough for a
// full queue to drain at the seeds' throughput (10,000 items at 4,000/s),
// short enough that an orchestrator's own kill (Kubernetes waits 30 s)
// does not come first.
const shutdownTimeoutDefault = 25 * time.Second
