// Package enginetest is the engine's runtime tests that any Runtime must
// pass: the conformance suite of actors/actorstest run on a live runtime,
// a batcher restart, and the per-request benchmark. The engine's tests run
// it on the runtime of their build (protoactor by default, hollywood with
// -tags hollywood: the two libraries cannot share a binary, as both
// register actor.proto); a future runtime plugs in the same way. It also
// holds Door, which makes an engine.FrontDoor of a fake engine for the
// tests of the front door's consumers (engine/httpapi, engine/jobs,
// engine/record), NodeModules, which installs the npm packages of the
// unmodified clients the protocol tests run, and ClosedAddr, a loopback
// address nobody listens on. It imports actors,
// actors/actorstest and engine.
//
// Imported by: nothing (only the tests of engine, engine/httpapi,
// engine/jobs, engine/record, engine/grpcapi, engine/openai,
// engine/loadgen, engine/upstream and engine/server).
package enginetest
