// Package enginetest holds test code shared by the runtime adapters'
// packages (engine/protoactor, engine/hollywood). The adapters cannot be
// linked into one test binary (both libraries register actor.proto), so
// each runs this code in its own; it imports actors, actors/actorstest and
// engine, never an adapter.
//
// Imported by: nothing (only the tests of engine/protoactor and
// engine/hollywood).
package enginetest
