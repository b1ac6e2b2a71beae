// Package cluster simulates a batchd cluster: nodes, each with a front
// (actors.Front, the request actor), accumulators (by default one
// actors.Batcher per model, batching it where the node owns it: the split;
// Config.Split false: one Batcher for every model the node owns) and
// devices (actors.Device in cluster mode),
// over a seeded network model (per-link latency and jitter, loss, one-way
// and symmetric partitions, nodes that crash and restart), with membership
// delivered to every node's actors as the SWIM model of package sim/swim
// says each node learns it. The same actors run live; only the runtime
// differs.
//
// A checker watches every delivery: each request a live front accepted is
// answered exactly once if its front lives on (at most once otherwise), with
// its own output, to its own front; no batch mixes keys or passes the batch
// bound; once membership has settled, one accumulator batches each model.
//
// Imported by: cmd/batchd (batchd sim-cluster; its tests hold the cluster
// properties and figures), scenarios (cluster scenarios: YAML files turned
// into a Config, their expectations checked against the Report),
// engine/fidelity (the cluster fidelity check: the same workload on a live
// cluster and here).
package cluster
