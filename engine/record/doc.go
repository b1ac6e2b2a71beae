// Package record writes a live server's traffic as JSON Lines, one line per
// request, so that `batchd sim --replay` can offer the same arrivals to
// another fleet or policy in the simulator.
//
// A Recorder wraps the engine's front door (engine.FrontDoor, which the
// HTTP adapter and the job runner call) and is one itself: it times each
// request, lets the engine serve it unchanged and
// writes what happened. It records the arrival (relative to the
// recording's start, on the engine clock, and absolute wall time), tenant,
// model, version, parameters, priority, timeout, input length and outcome
// (reason, error, latency, queue wait and compute, batch size, attempts).
// The input text is left out unless Config.Inputs asks for it: inputs are
// the clients' data.
//
// The file is bounded (Config.BytesMax): past it the recorder stops
// writing, logs one warning and counts what it left out. Lines are
// buffered and written under a mutex in the request's own goroutine (no
// goroutine of its own); Close flushes the buffer and closes the file.
//
// Imported by: engine/server (serve --record; and tests), cmd/batchd
// (the default of --record-max-bytes). It imports
// actors and engine (for the FrontDoor it wraps and implements).
package record
