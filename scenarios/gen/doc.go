// Package gen holds generation scenarios as data (the YAML files of this
// folder, embedded) and runs them in the simulator (sim/gen): a scenario
// states the devices, the KV cache, the step budget and cost model, the
// TTFT SLO, the prompt and output length distributions (lognormal), the
// tenants and their shares, the rates to run and the faults, and what
// must hold at each rate (expect:, "[rate:R] [tenant:T] METRIC OP
// VALUE", Metrics). A run reports TTFT, TPOT and inter-token p50/p95/p99
// per tenant, tokens/s, KV use over time and preemptions per rate, and
// draws charts (gonum/plot): KV use over time, the TTFT CDF per rate,
// tokens/s and TTFT p95 by rate.
//
// `batchd sim-gen NAME|FILE` runs one; TestScenarios runs every built-in
// one and fails on a broken expectation, which puts them in `make test`
// (those marked long: only with -scenarios.long).
//
// Imported by: cmd/batchd (the sim-gen subcommand). It imports sim/gen and
// actors/gen.
package gen
