// Package gen runs generation workloads in the simulator: the very
// actors/gen Scheduler the live server would run (continuous batching,
// chunked prefill, KV-cache admission, preemption by recompute, crash
// recovery), hosted in a sim.World whose devices are actors/gen's
// Emulated generators with a step cost model and injected crashes and hangs.
//
// The pieces:
//
//   - Config: the workload (tenants with weights, priorities and Poisson
//     arrival rates; lognormal prompt lengths, the generator's lognormal
//     output lengths and each request's max_tokens; cancels), the
//     scheduler's configuration (actors/gen's Config), and the faults.
//   - the host: the adapter that makes the scheduler an actor of the
//     World and runs its steps (StepContext.ExecStep) on per-device
//     emulated generators, delivering each StepDone after the step's cost.
//     It checks, at every step, what only the device sees: the step's
//     tokens are within the budget, a device runs one step at a time, and
//     the KV the device really holds fits its blocks.
//   - the ledger: an observer of every Token and gen.End that reach the
//     clients. It checks each stream (every index once and in order, each
//     token the emulated generator's for its prompt and position, one
//     gen.End after the last token, a finished or cancelled sequence holding
//     no blocks, preemptions within the bound), and builds the Report:
//     TTFT, TPOT and inter-token latency p50/p95/p99 per tenant, tokens/s,
//     KV-cache use over time, preemptions, crashes and outcomes.
//
// The workload is declared in Go (Config); scenarios/gen declares it in
// YAML and runs it here. Arrivals draws a run's workload from its seed, so
// a live run replays the very arrivals (engine/generate's figures).
//
// Imported by: scenarios/gen.
package gen
