// Package live is the half of a live actor runtime that does not depend on
// which actor library carries the mailboxes: addressing, the clock, timers,
// per-actor randomness, backend jobs on device workers, and restarts. An
// adapter (engine/protoactor, engine/hollywood) gives each batchd actor a
// Cell, feeds the Cell every message its library's mailbox delivers, and
// tells it when its library starts or restarts the actor; the Cell is the
// actors.Context the batchd actor runs against.
//
// It is internal to engine so that the two adapters, which may never be
// linked into one binary, share one implementation of the contract without
// importing each other. It imports actors and engine, and neither library.
//
// Imported by: engine/hollywood, engine/protoactor (and tests).
package live
