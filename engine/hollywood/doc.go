// Package hollywood runs batchd's actors on anthdm/hollywood
// (github.com/anthdm/hollywood/actor, v1.0.5), the engine's second runtime.
//
// Each batchd actor is a hollywood receiver, named after its address, with
// restarts unlimited: a panic restarts the actor, after RestartDelay, with
// a fresh value from its factory, which gets actors.Start again. Messages
// travel through hollywood inboxes; the contract itself (addressing,
// timers, per-actor randomness, device workers, incarnations) is
// engine/internal/live, shared with the protoactor adapter.
//
// Imported by: cmd/batchd (built with -tags hollywood; and tests). It must
// never be linked with engine/protoactor: both libraries register the
// protobuf file actor.proto, and such a program panics at start.
package hollywood
