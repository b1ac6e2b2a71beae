// Package loadgen is the load generator behind `batchd load`: open-loop
// arrivals at a fixed or Poisson rate, or a closed loop of connections that
// send as fast as they are answered, against
// POST /v1/models/{model}/infer, with latency percentiles from
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
// It is a client of the HTTP API, not part of the server: it imports
// actors (for the outputs it checks) and nothing else of batchd.
//
// Imported by: cmd/batchd, engine/fidelity (and tests).
package loadgen
