// Package engine is batchd's live runtime: it runs the actors of package
// actors for real, behind a front door that turns one request into its one
// reply.
//
// The pieces:
//
//   - Engine (engine.go) is the front door. New spawns the node's
//     actors.Front, one actors.Batcher and Config.Devices actors.Device on
//     a Runtime (hosts.go wraps each in what the engine asks of it); Do
//     submits a request and waits for its Reply, withdrawing it
//     (actors.Cancel) if the caller's ctx ends first; Drain, Close and
//     Stats do what they say. The request's life is the Front's, the same
//     actor the cluster simulator runs: routing to the batcher that owns
//     its model (on one node, the node's own), resubmission when that
//     batcher restarts (a new incarnation in the Front's membership view),
//     one reply per request (the first wins), Expired at the deadline plus
//     ReplyGrace. The engine keeps the door: admission (door.go), the
//     in-flight bound and the map from a request's ID to whoever waits.
//     Replies go straight from the device actor to the front, not back
//     through the batcher, and from the front to the engine's waiter
//     endpoint, which queues them; one goroutine of the engine hands each
//     to its Do (fanout.go), so an actor is free for its next message
//     without waiting for a hundred wake-ups. Everything is bounded:
//     requests in flight (InFlightMax), hence the waiters and what can
//     queue in any mailbox or in the reply queue.
//   - A cluster node (Config.Cluster, cluster.go) is the same actors
//     assembled as the cluster simulator assembles a node (sim/cluster):
//     when the registry names its models, an accumulator per model (the
//     split; an open registry: one for every model the node owns); the
//     Fronts route each request to its model's accumulator on the model's
//     owner, the Devices announce themselves to their models' accumulators
//     on the owners and claim their offers (actors.NewSplitClusterDevice).
//     The runtime hands every message for another node to the Remote the
//     config names (the data plane, cluster/transport); Engine.Deliver
//     takes what the data plane brings, Engine.Member what membership
//     says, and passes it to the fronts, the accumulators and the devices;
//     Engine.PeerDown a stream to a peer that broke (the fronts resubmit
//     what they placed there). An accumulator restarted by supervision
//     tells every node's fronts the node's new life, and they resubmit
//     what they sent the node; a batch on another node's device that
//     outlives twice its watchdog is re-queued. Messages
//     between the node's own actors never leave the runtime.
//   - Runtime is the small interface the engine needs of an actor runtime:
//     spawn an actor (with a Backend for its Exec jobs, and a factory for a
//     fresh value after a supervised restart), listen at an address, send,
//     a monotonic clock, close. LinkedRuntime (runtime.go) is this build's:
//     a host (host.go, cell.go, worker.go) that implements actors.Context
//     over any mailbox — addressing, timers, per-actor random streams, one
//     worker goroutine per device, and incarnations (a restarted actor sees
//     no timer or job result of the incarnation that panicked) — with the
//     mailboxes and supervision of one actor library: protoactor-go by
//     default (runtime_protoactor.go), anthdm/hollywood with -tags
//     hollywood (runtime_hollywood.go). The two libraries cannot be linked
//     into one binary (both register the protobuf file actor.proto), so a
//     build tag picks one; RuntimeName says which.
//   - Backend (backend.go) is "run this batch": context, model, version and
//     inputs in; per-item outputs and errors, or a batch error, out, with
//     ErrDeviceFault for a device that must restart. Emulated is the seeds'
//     batchstring (1 to 100 inputs at a fixed or modelled latency, outputs
//     from actors.EmulatedOutput, one batch at a time, with the faults of
//     the one device model, package actors/devicemodel).
//     The engine bounds every call at JobTimeoutMultiple times its
//     predicted latency, so a worker stuck in a hung call is freed even if
//     its device actor never starts another job.
//
// The runtime conformance suite in actors/actorstest (run by
// engine/enginetest) checks the runtime against the same contract as the
// simulator, in both builds.
//
// Imported by: engine/autoscale, engine/config, engine/enginetest, engine/generate,
// engine/httpapi, engine/jobs, engine/record, engine/server, engine/upstream,
// engine/workerproc (and tests).
// It imports actors, actors/devicemodel and actors/member and nothing
// else of batchd.
package engine
