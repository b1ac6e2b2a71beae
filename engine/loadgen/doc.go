// Package loadgen is the load generator behind `batchd load`: open-loop
// arrivals at a fixed or Poisson rate, or a closed loop of connections that
// send as fast as they are answered, against
// POST /v1/models/{model}/infer (or gRPC), with latency percentiles from
// HdrHistogram.
//
// Open-loop latency is measured from each request's intended send time,
// not from when the generator got round to sending it, so a server (or a
// generator) that falls behind shows as latency instead of hiding as fewer
// requests (coordinated omission). The generator is bounded in everything:
// duration, rate, requests in flight, its backlog of requests due but not
// yet sent; what it had to drop is counted and reported. Send times are
// kept with SleepUntil (sleep.go): a Go timer, then the kernel's nanosleep
// for the last 2 ms, as Go's timers alone wake up to a millisecond late.
//
// With Config.GRPC it sends the same load over the Open Inference
// Protocol's gRPC service instead (ModelInfer, or with GRPCStream
// ModelStreamInfer streams, many requests in flight on each, replies
// matched by id), so REST and gRPC can be compared at the same rate.
//
// It is a client of the server's APIs, not part of the server: it imports
// actors (for the outputs it checks), engine/grpcapi/oippb (the gRPC
// messages) and nothing else of batchd.
//
// Imported by: cmd/batchd, engine/fidelity (and tests).
package loadgen
