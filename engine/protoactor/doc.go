// Package protoactor runs batchd's actors on protoactor-go
// (github.com/asynkron/protoactor-go/actor), the engine's default runtime.
//
// Each batchd actor is a protoactor actor spawned at the root, named after
// its address, under a guardian with protoactor's restarting strategy: a
// panic restarts the actor with a fresh value from its factory, which gets
// actors.Start again. Messages travel through protoactor mailboxes; the
// contract itself (addressing, timers, per-actor randomness, device
// workers, incarnations) is engine/internal/live, shared with the hollywood
// adapter.
//
// Imported by: cmd/batchd (in its default build; and tests). It must never
// be linked with engine/hollywood: both libraries register the protobuf
// file actor.proto, and such a program panics at start.
package protoactor
