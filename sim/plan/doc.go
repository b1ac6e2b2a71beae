// Package plan sizes a fleet: for a steady offered rate, a batch size, a
// cost model and a p95 target it puts the back-of-envelope formula,
// devices = ceil(rps × latency / batch size) with utilisation headroom,
// beside the smallest fleet the simulator shows holding the target, and
// says from the runs why the two differ (the batch the linger fills, the
// stagger between devices, fragmentation into keys). It is what
// `batchd plan` prints.
//
// The search is over fleet sizes, each probe one sim.Run of a fixed
// warm-up and measured window, seeded: the same options and seed give
// the same answer. It starts at the physical floor (the fewest devices
// whose full batches could carry the rate at all) and is bounded in
// devices and in probes.
//
// Imported by: cmd/batchd (and tests). It imports sim and sim/ledger
// and nothing else of batchd.
package plan
