// Package actorstest is the runtime conformance suite: one set of tests
// that every runtime of package actors must pass, so that the actors behave
// the same in the deterministic simulator (sim) and on the live runtimes
// (engine, on protoactor by default and on hollywood with -tags hollywood).
//
// It checks what actors.Context promises: per-sender FIFO delivery; timers
// that fire no sooner than their delay, that Cancel withdraws, and whose
// stale cancellation is harmless; Exec jobs whose completion comes back as
// a JobDone with the job's ID and outputs, and a hung job that blocks
// neither the actor nor its next job; a clock that never goes back; and,
// where the runtime supervises, a panicking actor restarted with a fresh
// value that gets Start again and sees nothing of its last incarnation
// (timers, job results).
//
// A runtime plugs in through the small Runtime interface. Live runtimes run
// in real time: the suite waits on conditions with generous bounds and
// asserts only lower bounds on elapsed time, never upper ones, so a loaded
// machine makes it slower, not flaky.
//
// Imported by: engine/enginetest (and the tests of sim and engine). It
// imports actors and nothing else of batchd.
//
// Its recorder actors may run on a live runtime's goroutines while the
// checks read on the test's; the lock for that comes from the runtime
// (Runtime.Locker), which owns concurrency here as it does for the actors.
package actorstest
