// Package upstream runs a device's batches on another model server, over
// HTTP: two more engine.Backends, for an operator whose model is already
// served somewhere and who wants batchd's front (its batching, tenants,
// deadlines and supervision) before it.
//
// OIP (devices.backend: upstream) is a slot on an upstream that speaks the
// Open Inference Protocol's REST API (KServe v2: Triton, KServe,
// MLServer, or another batchd): a batch becomes one
// POST {base}/v2/models/{model}[/versions/{version}]/infer with one BYTES
// input tensor of shape [n] (binary tensor data by default, so any bytes
// go through; JSON where the upstream lacks that extension), and the
// output tensor's n elements are the batch's outputs, in order. devices.count
// slots are the concurrency against the upstream; they share one
// http.Transport, so its keep-alive connections are pooled.
//
// Fanout (devices.backend: fanout) is a device on an upstream that takes
// one input per call: a batch is sent as concurrent single calls, under a
// concurrency limit that every device of that upstream shares, each retried
// with a bounded, jittered exponential backoff where the upstream marks the
// failure retryable (429, 503, a refused connection); an item that still
// fails fails alone (a per-item error).
//
// Both map the upstream's failures onto the device actor's: a timeout, a
// lost or refused connection, a 5xx (or a 429) for a whole batch is a
// device fault (Run's error wraps engine.ErrDeviceFault), so the batch is
// re-queued on another device and this one restarts with the actor's
// backoff and quarantine; an answer that is well-formed HTTP but wrong (a
// 4xx, a wrong shape or count) fails the batch, not the device.
//
// Imported by: engine/config (the defaults of devices.upstream and
// devices.fanout, and the mapping onto Config), engine/server (the
// backends). It imports engine.
package upstream
