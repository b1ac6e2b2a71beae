// Package actors holds batchd's batching logic as pure actors: admission and
// per-key batch accumulation and scheduling (the Batcher), and GPU device
// actors (the Device), plus the plain-data messages they exchange. The
// continuous-batching scheduler of generation models is its subpackage
// actors/gen, which keeps its tenants as the Batcher does (Tenant and
// TenantTable, tenant.go).
//
// A Batcher configured for one model is an accumulator: a split runs one per
// model, a Router (on one node) or the cluster's Front in front of them, and
// Devices shared between them (NewSharedDevice, NewSplitClusterDevice) that
// claim their Offers in the order one Batcher picks its keys. The
// accumulators keep cross-model fairness without a global lock by telling
// each other, through the devices they share (Share on RunBatch and
// DeviceBusy), the service they charged and the work they queue.
//
// Actors here are state machines in the style of etcd's raft core: a message
// comes in, state changes, effects go out through Context. The runtime that
// drives them (sim for the deterministic simulator, engine for the live
// server) owns time, timers, randomness, mailboxes, the network and the
// execution of backend batches. So code in this package never reads the wall
// clock, starts goroutines, uses channels, select, locks or the global
// math/rand, and never lets map iteration order decide anything; purity_test.go
// enforces this.
//
// Every runtime package may import actors; actors imports none of them (nor
// anything else of batchd).
//
// Imported by: actors/actorstest, actors/devicemodel, actors/gen,
// actors/schema, cluster/transport, cluster/wire, cmd/batchd, engine,
// engine/autoscale, engine/config, engine/enginetest, engine/fidelity,
// engine/generate, engine/httpapi, engine/httpapi/metrics, engine/jobs,
// engine/loadgen, engine/record, engine/server, scenarios, sim,
// sim/charts, sim/cluster, sim/flushcheck, sim/gen, sim/ledger (and
// tests).
package actors
