// Package sweep runs one simulated workload over a range of one setting
// (offered rate, devices, batch max or linger) under several flush
// policies, and reports the throughput-latency curve of each next to the
// fleet's physical bound: what `batchd sim --sweep` prints and plots.
//
// Every point is an independent sim.Run, so the points run in parallel
// (at most Options.Parallel at once) and the results, gathered by index,
// come out in the same order and with the same figures whatever the
// parallelism: a sweep is as deterministic as a run.
//
// ParseFleet reads the fleet a run is tried against (`batchd sim --fleet`).
//
// Imported by: cmd/batchd, sim/charts (and tests). It imports sim and
// nothing else of batchd.
package sweep
