// Package server assembles one batchd node from one configuration file
// (engine/config): the backends, the engine (on the actor runtime this
// build links: protoactor by default, hollywood with -tags hollywood),
// the HTTP API and its metrics (engine/httpapi), the Open Inference
// Protocol over gRPC when grpc.addr is set (engine/grpcapi), the durable
// jobs (engine/jobs: the store and the runner that feeds it to the
// engine), the request recorder (engine/record), and the memory releaser.
// `batchd serve` is flag parsing, ApplyGC, and Run (New, Serve, and
// Shutdown once a signal ends its ctx); everything between is here.
//
// Imported by: cmd/batchd (serve; and tests). It imports actors, actors/gen, engine,
// engine/autoscale, engine/config, engine/grpcapi, engine/httpapi, engine/jobs,
// engine/rawtcp (its listeners' connections), engine/fastlane (the HTTP
// listener's plainest infer requests), engine/record, engine/upstream (the upstream and fanout backends),
// engine/generate and engine/openai (generation over the
// OpenAI-compatible API, with generation.enabled),
// engine/workerproc (the worker backend), cudabridge (the cpu and cuda
// backends), cluster and actors/member (a node's membership in a cluster),
// and cluster/transport (its data plane, with cluster.data_addr: the
// engine then batches each model at its owner, across nodes; a stream to
// a peer that breaks reaches the engine as Engine.PeerDown;
// batchd_cluster_forward_seconds times the requests sent to other nodes;
// BATCHD_FAULT_SIGNALS=1 makes SIGUSR1 and SIGUSR2 cut and heal the data
// plane, for tests on one machine).
//
// # Backends
//
// devices.backend picks what runs the batches: emulated (the engine's
// own batchstring), cpu or cuda (the bytenet model of cudabridge; cuda
// opens every visible GPU, one device each, and a missing driver stops
// the start), or worker (devices.worker.cmd, one process per device,
// engine/workerproc; every worker must answer its handshake before the
// engine starts, or the start stops with the worker's last stderr lines),
// upstream (devices.upstream: the devices are slots on an Open Inference
// Protocol server, which must answer /v2/health/ready within
// devices.upstream.ready_timeout or the start stops, saying what it saw)
// or fanout (devices.fanout: one call per input to a single-input API,
// engine/upstream). cudabridge does not import the engine, so an adapter
// here maps its device faults and batch-size errors onto the engine's.
//
// # Start (New)
//
// New opens, in order, and releases what it opened if a later step
// fails: the backends; the job store (a damaged or locked file stops the
// start, naming it); the engine (bounded, the devices must register); the
// recorder (serve --record), which then stands in front of the engine
// for both the handler and the runner; the HTTP handler; the job runner;
// the listener; with grpc.addr, the gRPC server and its listener; with
// autoscale, the live autoscaling policy (engine/autoscale) beside the
// engine. With generation.enabled, the generation service
// (engine/generate: a scheduler per model on a runtime of its own, its
// devices emulated or, with generation.backend bytenet, cudabridge's CPU
// generator injected through generate.Config.NewStep) starts before the
// HTTP handler, and the OpenAI-compatible routes
// (/v1/completions, /v1/chat/completions, /v1/models: engine/openai) are
// mounted beside the handler's on the same listener, with its API keys.
// Both listeners hand out connections whose reads and writes are raw
// system calls (engine/rawtcp): a call the runtime is told of wakes its
// monitor thread after every idle spell, which cost a server between
// requests a quarter of its CPU. With http.fast_lane (the default), the
// HTTP listener is engine/fastlane's: it serves the plainest infer
// requests on its own connection loop, waiting for the engine in the
// connection's read, and hands every other connection to net/http at its
// first other request; its Shutdown is net/http's, and waits for its own
// connections too. Its kept-alive connections idle past http.park_after
// wait without a goroutine until their clients send. Serve then serves HTTP (and gRPC), starts the memory releaser,
// which gives memory back to the OS when load falls after an overload,
// and the policy's readings of the batcher's signals.
//
// # Stop (Shutdown)
//
// The order is written once, in Server.stop; every step skips what New
// did not open. Within Shutdown's ctx:
//
//  1. the handler turns not ready and stops taking new jobs (durable
//     async requests and batches get 503 draining), and generation
//     takes no new request (503; the streams in flight go on);
//  2. the job runner stops feeding, and writes what it has in flight (or
//     hands it back to the store queued);
//  3. the engine stops admitting (new requests get 503 at once), flushes
//     its queues without lingering and answers every request in flight;
//  4. the gRPC server's streams take no more requests and end
//     (Unavailable) once theirs are answered, and it stops
//     (GracefulStop, cut off at the bound);
//  5. the HTTP server goes on accepting, and answering 503, until
//     connections stop coming (closing a listener resets the connections
//     in its accept queue), then closes its listener and waits for the
//     synchronous handlers to finish writing.
//
// Then, each with a bound of its own where it needs one:
//
//  6. the autoscaling policy stops reading the signals, and its runtime
//     stops; the generation service's schedulers and device workers
//     stop; the engine's actors and goroutines stop;
//  7. the recording is flushed and closed;
//  8. the memory releaser stops;
//  9. the job store is closed;
//
// 10. the backends (GPUs) are released.
//
// Signals are the command's business: `batchd serve` calls Shutdown on
// the first SIGTERM or SIGINT, and a second one ends the process.
package server
