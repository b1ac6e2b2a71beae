package actors

import (
	"math/rand/v2"
	"time"
)

// Address names an actor anywhere in a cluster. It is a plain value, so a
// message that carries one can cross a node boundary unchanged.
type Address struct {
	// Node is the name of the node the actor lives on. Empty in a
	// single-node setup.
	Node string
	// ID identifies the actor within its node.
	ID uint64
}

// IsZero reports whether a is the zero Address, which names no actor.
func (a Address) IsZero() bool { return a == Address{} }

// Message is anything an actor can receive. Messages are plain data: no
// funcs, channels or pointers into another actor's state.
type Message any

// Actor is a state machine driven by its runtime. Receive is called with one
// message at a time; it must not block and must not keep ctx.
type Actor interface {
	Receive(ctx Context, msg Message)
}

// TimerID names a timer set with Context.After. Zero names no timer.
type TimerID uint64

// Context is all an actor may touch of the world. It is valid only during the
// Receive call it was passed to.
type Context interface {
	// Self is the address of the actor being run.
	Self() Address
	// Now is the runtime's monotonic clock, as time since the runtime
	// started. It never goes back.
	Now() time.Duration
	// Send delivers msg to the actor at to, asynchronously. Messages from one
	// sender to one receiver arrive in the order they were sent.
	Send(to Address, msg Message)
	// After delivers msg to the actor itself once d has passed. Timer
	// messages should carry a generation so that a stale firing is harmless.
	After(d time.Duration, msg Message) TimerID
	// Cancel stops a timer if it has not fired yet; cancelling a fired or
	// unknown timer does nothing.
	Cancel(id TimerID)
	// Rand is the actor's own seeded random stream.
	Rand() *rand.Rand
	// Exec hands a blocking job (a backend batch) to the runtime, which runs
	// it off the actor and later delivers a JobDone with the same JobID to
	// the actor itself. A hung job may never complete.
	Exec(job Job)
}

// Job is a backend batch for the runtime to run: batchstring(Inputs) for one
// model version on the device the calling actor stands for.
type Job struct {
	// ID correlates the job with its JobDone. Unique per actor.
	ID      uint64
	Model   string
	Version string
	Inputs  []string
}

// JobDone reports a finished Job to the actor that started it.
type JobDone struct {
	ID uint64
	// Outputs holds one output per input when Err is empty and Fault is false.
	Outputs []string
	// ItemErrs is nil, or holds one entry per input: non-empty where that
	// item failed on its own (the others are good).
	ItemErrs []string
	// Err is set when the whole batch failed but the device is still usable.
	Err string
	// Fault is set when the device itself failed (crashed, lost its context):
	// no output is valid and the device must restart.
	Fault bool
}
