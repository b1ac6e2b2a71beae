// Package fidelity checks the simulator against the live server: it runs
// one workload twice, live (a `batchd serve` child process with emulated
// devices that really sleep, real HTTP on loopback, the open-loop load of
// engine/loadgen measuring each request from its intended send time) and in
// package sim (same rate, Poisson arrivals, devices, batch max, latency,
// SLO and duration), leaves the warm-up out of both, and compares p50, p95
// and p99 of the completed requests and their throughput. A third run
// replays the live run's own recorded arrivals in the simulator, to tell
// the model's error from the noise of two Poisson draws. RunCluster does
// the same for a cluster: N live `batchd serve` nodes that batch together
// on loopback, the load spread over their fronts by a generator of its own
// (each front a Poisson source; every latency kept, so the percentiles
// are over all requests and front by front), against sim/cluster.
//
// It is the one package that compares the two runtimes, so it is the one
// package under engine/ that imports sim (cmd/batchd's TestPackageDeps
// allows exactly this); it imports actors, sim, sim/cluster, engine/loadgen and
// engine/config (both sides run one serve configuration: SimServer builds
// the simulated server from it, which `batchd sim --config` uses too), and
// nothing else of the server: the live side is a separate process.
//
// Imported by: cmd/batchd (and tests).
package fidelity
