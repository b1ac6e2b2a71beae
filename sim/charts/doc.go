// Package charts draws a simulated run and a sweep as PNG and SVG files
// with gonum.org/v1/plot: the latency CDF per tenant, latency and queue
// depth over time, the batch-size distribution, and the throughput-latency
// curve of a sweep next to the fleet's physical bound.
//
// The data come from a Collector, a sim.Observer that watches the run's
// messages (submits, replies, batches) without changing them, so a run
// with plots has the same trace hash as one without; the queue depth comes
// from the report's autoscaling samples. The series are plain values
// (Series), so tests check the numbers that are drawn, not the pictures.
//
// Imported by: cmd/batchd (sim --out, sim --sweep --out; and tests). It
// imports sim, sim/sweep and actors.
package charts
