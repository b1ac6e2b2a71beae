// Package devicemodel is the one model of an emulated device's cost and
// faults. The simulator's devices (sim.Device, on virtual time) and the
// live emulated backend (engine.Emulated, on the wall clock) both draw each
// batch's fate from a Model, so every fault the simulator knows (crash,
// hang, slow, batch and item errors, poison inputs, heal times, faults at
// given times) can run live, and the two agree on what a rate or a
// schedule means.
//
// It is pure, as package actors is (actors' TestPurity checks it too): a
// draw takes the time and the device's random stream from its caller and
// reads no clock, global randomness or map order of its own.
//
// Imported by: actors/schema (the fault section of the configs), engine
// (the emulated backend), engine/config (a healthy device's plan), sim (the
// simulated device and its fault schedule). It imports actors (the cost
// model) and nothing else of batchd.
package devicemodel
