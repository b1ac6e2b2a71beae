// Package gen is the continuous-batching scheduler of generation models,
// a pure actor in the style of package actors: the Scheduler (per-step
// decode plus chunked prefill, KV-cache blocks as the admission resource,
// preemption by recompute, crash recovery from the tokens already sent;
// scheduler.go), its Config (config.go), the messages a front door
// exchanges with it (Submit, Cancel, Token, End; messages.go), the Step
// interface a generation backend implements with the emulated generator
// (Emulated; step.go), and the device-count recommendation from its
// pressure (scale.go).
//
// It keeps its tenants as the Batcher does, with the table of package
// actors (actors.TenantTable: the same weights, rate limits, in-flight
// quotas and levelling), and uses the actors' Context, addresses,
// outcomes and reasons. Like actors it is pure: no wall clock,
// goroutines, channels, locks or global math/rand (actors/purity_test.go
// checks it). The runtime that hosts it (sim/gen in the simulator,
// engine/generate live) runs its steps through a StepContext.
//
// Imported by: cudabridge (its generators implement Step), engine/config,
// engine/generate, engine/server, scenarios/gen, sim/gen (and tests).
package gen
