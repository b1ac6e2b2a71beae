// Package ledger is the simulator's checker and reporter. A Ledger
// observes every delivery of a simulated run (as a sim.Observer) and
// receives the requests' replies (as the actor they are addressed to),
// keeps one record per request, and checks
// the architecture's invariants from the messages alone: every accepted
// request reaches exactly one terminal state, a reply carries its own
// input's output, batches respect their bounds and keys, queues their
// bounds, and the batcher's own assertions hold (Config.SelfCheck). A
// broken invariant is a violation of a kind (ViolationKind), counted and
// described, never a panic, so that a run shows what happened.
//
// At the end of a run, Ledger.Report turns the records and what the run
// gathered (ReportInput) into the Report `batchd sim` prints: percentiles
// per tenant, model and version, throughput and goodput, utilisation,
// batch sizes, queue wait against compute, fairness, the autoscaling
// signal over time (Ledger.SampleSignals) and, on request, a timeline
// (timeline.go).
//
// The ledger is on the simulator's hot path (every delivery passes it), so
// a record holds only what a check needs after the request's submit, and
// the latency histograms are HDR histograms, not sorted samples.
//
// Imported by: sim (Run builds a ledger for every run; sim names the
// report's types by aliases of its own), sim/plan (a probe's window),
// sim/cluster (SelectKth, for its report's percentiles). It
// imports actors and nothing
// else of batchd.
package ledger
