//go:build race

package main

// raceOn: this test binary (and so every server process it starts as a
// helper) runs under the race detector, several times slower.
const raceOn = true
