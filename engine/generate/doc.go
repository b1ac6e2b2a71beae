// Package generate serves text generation live: it runs one
// gen.Scheduler per generation model on the engine's own actor
// runtime (engine.LinkedRuntime: protoactor-go, or hollywood with -tags
// hollywood), runs the steps the scheduler hands out on a worker
// goroutine per device with the emulated generator (gen.Emulated,
// each step taking the time the cost model predicts for it) or with the
// backend Config.NewStep makes (engine/server injects bytenet's CPU
// generator: real tokens, each step its own compute time; this package
// imports no backend), and
// implements openai.Generator over it, so engine/openai's handler serves
// the models over the OpenAI-compatible API.
//
// The scheduler is a pure actor whose Receive takes an
// gen.StepContext. The runtime gives a spawned actor a plain
// actors.Context; the actor here (schedActor) wraps that Context with
// ExecStep, which hands the step to its device's worker and returns at
// once. The worker runs the step off the actor and sends the StepDone
// back through the runtime (Runtime.Send, safe from any goroutine), so
// the scheduler still sees one message at a time in its mailbox, and the
// runtime's timers and clock are its timers and clock. Nothing of the
// runtime changes: a runtime restart of a panicking scheduler makes a
// fresh scheduler (a new incarnation, whose devices are reset and which
// ignores the old incarnation's step results); the requests the old one
// held end at their deadline (504), as no gen.End will come.
//
// Bounds: the requests in Generate at once (InFlightMax; past it 503),
// hence the mailbox (a request sends at most one gen.Submit and one
// gen.Cancel); one step per device (the scheduler's guarantee, and a
// worker has a one-step slot: a step handed over while the last has not
// started replaces it, which only a scheduler that gave up on a hung step
// does); the tokens a request buffers (its MaxTokens).
//
// A request's temperature and seed ride on every step slot of its
// sequence (gen.StepSlot), so a backend samples each sequence its own
// way within one step.
//
// Tokens reach a request's stream through one listener endpoint of the
// runtime, by request ID; the stream keeps the next index it expects and
// drops any other, so each token's text is emitted exactly once and in
// order.
//
// The autoscaling signal (Stats.Pressure, /metrics): the KV blocks held
// over a model's devices as a share (batchd_gen_kv_pressure), and over its
// queued new requests the TTFT deadline minus the predicted first-token
// time, least and 10th percentile (batchd_gen_ttft_slack_seconds; the
// actor computes it at most every pressureEvery while requests are
// queued); from them gen.Recommend's device count
// (batchd_gen_devices_recommended, beside batchd_gen_devices), one more
// under KV or slack pressure, one fewer when low, for a
// HorizontalPodAutoscaler to act on.
//
// Imported by: engine/server.
package generate
