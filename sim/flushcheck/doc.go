// Package flushcheck is an independent checker of the simulator's runs:
// Checker, a sim.Observer, checks invariant 5 of the architecture (no
// request waits past its flush bound while a device that could take it is
// idle) from the messages to and from the batcher alone, and counts the
// items the batcher holds per key and in all (invariant 10).
//
// Why a package of its own: the check must not share code with what it
// checks. It rebuilds the batcher's queues, keys, devices and learnt
// overrun from the messages, and never reads actors.Batcher's state, so a
// bug in the batcher's bookkeeping cannot hide itself here; the batcher's
// own assertions (actors.Batcher.Check) are the other, inside view. It
// satisfies sim.Observer by its method set and imports only actors, so
// the simulator's tests can run it beside any world.
//
// Imported by: nothing (only tests: the property tests of sim). It
// imports actors and nothing else of batchd.
package flushcheck
