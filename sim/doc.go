// Package sim is batchd's deterministic discrete-event runtime: it runs the
// very actors of package actors, unchanged, against a virtual clock, so that
// traffic can be replayed and CI can check SLO, fairness and crash-retry
// properties without a GPU or a wall clock.
//
// Why a simulator of our own: the actors are pure state machines (a message
// in, effects out through actors.Context), so a runtime that owns time,
// ordering and randomness can make a whole run a function of one seed. The
// same seed gives the same sequence of deliveries, and World.TraceHash
// fingerprints that sequence (invariant 9).
//
// The pieces:
//
//   - World is the runtime: one event queue ordered by (virtual time,
//     sequence number), actor registration, message delivery with a fixed
//     network delay, cancellable timers, per-actor seeded randomness, and the
//     execution of backend jobs by an Executor. It is single-threaded and
//     never calls an actor re-entrantly.
//   - Device is an Executor that emulates the seeds' GPU: it costs a batch
//     with an actors.LatencyModel, answers with actors.EmulatedOutput, and
//     injects faults (crashes, hangs, slow runs, batch and item errors,
//     poison inputs) from a FaultPlan, switched on per run, and faults at
//     given times on given devices (Config.FaultSchedule, schedule.go):
//     the one device model of package actors/devicemodel, which the live
//     emulated backend draws from too. Config.LatencySpread makes its cost
//     vary around the model.
//   - Stream and NewStream derive independent random streams from the master
//     seed and a name, so adding a consumer of randomness does not shift the
//     numbers every other consumer sees.
//   - Traffic is an actor that offers requests (Poisson, constant,
//     diurnal or burst arrivals, phases.go; model mix, tenants, input
//     lengths, priorities, cancels); a run may have several
//     (Config.Sources).
//   - The ledger (package sim/ledger) is the checker: it keeps one record
//     per request and checks the architecture's invariants from the
//     messages it observes, and builds the run's Report from them.
//     Invariant 5 (no request waits past its flush bound while a device
//     that could take it is idle) has an independent checker of its own,
//     package sim/flushcheck, which the property tests run beside the
//     ledger.
//   - Run builds a world from a Config (the reference workload by default,
//     or a named experiment), runs a safety phase under faults and a
//     liveness phase that must drain, and returns a Report (an alias of
//     ledger.Report): percentiles per tenant, model and version, throughput
//     and goodput, utilisation, batch sizes, queue wait against compute,
//     fairness, the autoscaling signal over time and, on request, a
//     timeline.
//
// The event loop is the hot path of every simulation, so it avoids
// container/heap and per-event allocation: events are concrete values in a
// hand-written 4-ary heap, and events due at the current instant go through
// a FIFO ring instead (see heap.go for why that keeps the exact order).
//
// Imported by: cmd/batchd (the sim subcommand), engine/fidelity (the one
// engine package that compares the live runtime with this one), scenarios,
// sim/charts, sim/cluster, sim/gen, sim/plan, sim/sweep (and tests). sim imports actors, actors/devicemodel
// and sim/ledger and nothing else of batchd.
package sim
