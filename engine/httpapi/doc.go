// Package httpapi is batchd's HTTP adapter: net/http in front of the
// engine's front door (engine.FrontDoor), with batchd's own JSON API, the
// Open Inference Protocol (KServe v2) REST endpoints and Prometheus
// metrics.
//
// Imported by: engine/server (serve), engine/config (its defaults; and
// tests), engine/grpcapi (the OIP over gRPC runs through its exported
// OIP methods: Authenticate, ResolveModel, Ready, OIPInfer, OIPSubmit,
// GRPCResponse). It imports actors, engine (the FrontDoor interface it
// takes the engine through, and the engine's sentinel errors), engine/jobs and
// engine/httpapi/metrics (the Prometheus series), never a runtime adapter;
// its tests run on a fake front door (enginetest.Door) as well as on the
// real engine.
//
// # Endpoints
//
//	POST /v1/models/{model}/infer   {"input", "version"?, "priority"?, "timeout_ms"?, "params"?, "async"?}
//	                                -> 200 {"id", "output", "model", "version", "latency_ms", "queue_ms",
//	                                        "compute_ms", "batch_size", "attempts"}
//	                                   async ("async": true or "Prefer: respond-async"; Config.Jobs set)
//	                                   -> 202 {"id", "status_url", "status", "total"}
//	GET  /v1/requests/{id}[?offset=&limit=]
//	                                -> {"id", "status", "model", ...the result, or "error" and "http_status"}
//	                                   (a durable job's) and "kind", "progress" {completed, failed, cancelled,
//	                                   expired, total}, "created", "finished"?, and for a batch a page of
//	                                   "items" (once finished, or when offset/limit is given), "next_offset"?
//	DELETE /v1/requests/{id}        cancel a durable job -> 200 its status; idempotent
//	POST /v1/models/{model}/batch   {"items": [{"input"}...], "version"?, "priority"?, "timeout_ms"?, "params"?, "async"?}
//	                                -> 200 {"items": [{"status", "output"?, "version"?, "error"?, "http_status"?}...]}
//	                                   async, or more than BatchAsyncAbove items (Config.Jobs set)
//	                                   -> 202 {"id", "status_url", "status", "total"}
//	GET  /v2, /v2/health/live, /v2/health/ready
//	                                server metadata: extensions ["binary_tensor_data"]
//	GET  /v2/models/{m}[/versions/{v}]        metadata: one BYTES input "input", one BYTES output "output"
//	GET  /v2/models/{m}[/versions/{v}]/ready
//	POST /v2/models/{m}[/versions/{v}]/infer  {"id"?, "parameters"?, "inputs": [{"name", "shape", "datatype": "BYTES",
//	                                           "data" | "parameters": {"binary_data_size"}}], "outputs"?: [{"name": "output"}]}
//	                                -> {"model_name", "model_version", "id", "outputs": [{"name": "output", ...}]}
//	GET  /metrics                   Prometheus text format
//	GET  /v1/stats                  what the status page draws: {"time", "signals", "devices_healthy",
//	                                   "devices_needed", "wait_predicted_ms", "devices": [{"device", "state"
//	                                   (busy, idle, quarantined), "busy_fraction", "busy_s"}], "keys" (the 100
//	                                   deepest): [{"model", "version", "bucket", "depth", "wait_oldest_ms",
//	                                   "slack_min_ms", "rate", "batch_size_mean"}], "keys_total", "latency":
//	                                   {"window_s", "count", "p50_ms", "p95_ms", "p99_ms"} (completed requests
//	                                   of the last minute, at most the latest 4,096), "autoscale": {...} | null};
//	                                   read as /metrics is (the same key)
//	GET  /                          the status page (status.html, embedded): polls /v1/stats every second
//
// Every /v2 route also answers with a trailing slash ("/v2/",
// "/v2/models/m/infer/"): some clients build their URLs with one.
//
// # The OIP binary tensor data extension
//
// An infer request with an Inference-Header-Content-Length: N header (and
// Content-Type application/octet-stream, application/json or none) is N
// bytes of JSON, the header, then raw tensor data: an input with
// "parameters": {"binary_data_size": S} has no "data" and takes the next S
// bytes, each BYTES element a 4-byte little-endian length and its bytes,
// as many as its shape's product, each valid UTF-8 (batchd's inputs are
// text). The sizes must add up to what follows the header exactly. The
// reply is binary when the request says "parameters":
// {"binary_data_output": true} or its output says "parameters":
// {"binary_data": true} (which overrides it): Content-Type
// application/octet-stream, Inference-Header-Content-Length the length of
// its JSON header (no newline), whose output has "parameters":
// {"binary_data_size"} in place of "data", then the output's elements,
// length-prefixed likewise. Triton's and KServe's clients send and ask for
// binary tensors by default.
//
// Every element of an OIP input tensor and every item of a /v1 batch is
// one request in the batcher; they are submitted together (Submit, no
// goroutine per item), so they can share engine batches.
// "priority" is low, normal or high; "timeout_ms" sets the request's
// deadline (capped at Config.TimeoutMax, not refused above it); "params"
// is an object, canonicalised (keys sorted at every depth) so that equal
// params share a batch and different ones never do.
//
// # Decoding
//
// Every POST body is JSON (an OIP infer body may be binary tensor data,
// above): no Content-Type, application/json or application/*+json (charset
// utf-8, if given) are read as such, and so is
// application/x-www-form-urlencoded, which `curl -d` declares for the JSON
// it sends; any other type is 415 before the body is read
// (application/octet-stream is taken on OIP infer alone). A body may be
// compressed (Content-Encoding gzip, x-gzip or deflate, zlib or raw;
// identity is none): BodyMaxBytes bounds it as it arrives and again as it
// decompresses, so one that inflates past it is 413 after at most
// BodyMaxBytes+1 bytes of work; bytes after the compressed stream are a
// 400, and any other coding, or more than one, is 415 with an
// Accept-Encoding header naming those taken.
// Bad input never reaches the engine: the body must be valid UTF-8 JSON of
// at most Config.BodyMaxBytes, with one value and nothing after it; inputs
// must be present and at most Config.InputMaxBytes (or the model's
// InputLenMax); models and versions must be in the registry, if there is
// one. A /v1 batch or an OIP tensor with one bad item is refused whole,
// before any item is submitted. The /v1 routes refuse unknown fields (a
// misspelt "timeout" would otherwise be silently ignored); the /v2 routes
// ignore them, since OIP clients send extensions ("parameters",
// "outputs") batchd does not use. On both, keys are matched exactly and
// once: encoding/json would take "INPUT" for "input" and keep the last of
// a repeated key, so a key that only case-folds to a field's name, or a
// field given twice, is a 400 (params, free-form, are not checked). OIP
// data is flat (as many strings as the shape's product) or nested as its
// shape says at every depth, of any rank up to 32, read row-major: a
// ragged array is a 400 even when its strings add up to the product. An
// "outputs" list may name "output" alone: another name is a 400.
// JSON \u escapes of lone surrogates decode to U+FFFD, as encoding/json
// does; raw invalid UTF-8 is refused.
//
// # Status codes
//
// Errors are {"error": {"code", "message", "retry_after_ms"?}} on /v1 and
// {"error": "message"} on /v2, with the same status codes. 429 and 503
// carry a Retry-After header in whole seconds, rounded up (at least 1),
// and retry_after_ms; the hint is the batcher's (RetryAfter, from its
// predicted drain time) or Config.RetryAfterDefault. A 503 draining, and
// any 503 after Shutdown (readiness included), carries Connection: close,
// so the client's next request goes out on a new connection, to a server
// that is not stopping.
//
//	status  code                               cause
//	400     bad_request                        bad JSON, unknown /v1 field, missing or oversize input,
//	                                           invalid UTF-8, bad priority/timeout/params/shape/datatype,
//	                                           unknown OIP output, bad binary tensor data (header length,
//	                                           sizes, element lengths), a body that does not decompress
//	400     invalid                            the batcher refused the request as malformed (Reason invalid)
//	401     unauthorized                       API keys configured; no or unknown bearer token
//	403     forbidden                          the key may not use this model (APIKey.Models)
//	404     unknown_model                      model or version not in the registry (here, or Reason unknown_model)
//	404     not_found                          no such route (a path with ".", ".." or "//" included: no
//	                                           redirect); job unknown, expired, or another tenant's
//	405     method_not_allowed                 wrong method for the route
//	408     request_timeout                    the body did not arrive within BodyReadTimeout
//	409     idempotency_conflict               Idempotency-Key reused with a different request
//	413     body_too_large                     body over BodyMaxBytes (or declared over it: refused unread),
//	                                           compressed or once decompressed
//	415     unsupported_media_type             a POST whose Content-Type is not JSON, or whose
//	                                           Content-Encoding is not gzip or deflate (see Decoding)
//	429     rate_limited, quota                Rejected, Reason rate_limited or quota (the tenant's limits)
//	503     queue_full, overloaded, no_device, Rejected for load, no device, or draining; engine.ErrInFlightMax
//	        draining                           (overloaded), engine.ErrClosed (draining), shutting down
//	                                           (draining); answered at once
//	503     cancelled                          Cancelled while the client still waits (the service withdrew it)
//	504     deadline                           Expired (Reason deadline), or no reply by deadline + ReplyGrace
//	500     backend, attempts                  Failed: the backend failed the item, or device failures used
//	                                           up its attempts
//	499     cancelled                          the client went away (recorded in metrics; nobody reads it)
//
// Framing net/http cannot parse never reaches the handler: net/http
// answers it itself, in plain text, and closes the connection: 400 for a
// bad request line, header line or Content-Length, or no Host; 431 for
// headers over MaxHeaderBytes. testdata/malformed is a corpus of bad
// requests, each with the answer above it must get, that the tests send to
// the real handler on the real engine (and seed FuzzDecodeInfer with).
//
// A /v1 batch is 200 once valid; each item has its own status (completed,
// failed, rejected, expired, cancelled) and, when not completed, its error
// and the http_status it would have had alone. An OIP infer has no
// per-element errors: any failed element fails the request with that
// element's status.
//
// # Async requests
//
// An async request ("async": true, or "Prefer: respond-async") is a durable
// job (below). Without a job store (Config.Jobs nil, which only tests of
// the synchronous API use) it is refused with 400, as an async batch is.
//
// # Durable jobs
//
// With Config.Jobs (a *jobs.Runner; batchd serve always sets it), an async
// infer is a durable job of one item and an async /v1 batch (or one of more
// than BatchAsyncAbove items, up to JobItemsMax, in a body of up to
// JobBodyMaxBytes) a durable job of many: written and synced to the job
// store before the 202, fed to the engine from the store, each item's
// result written as it finishes, kept across a crash or restart until
// retention drops it (see package jobs for the delivery semantics). An
// Idempotency-Key header (at most one, 1 to 256 bytes of printable UTF-8)
// makes a submission idempotent per tenant: the same key with the same
// request (its decoded fields hashed, so spacing and key order do not
// matter) answers 202 with the original id and Idempotent-Replayed: true;
// with another request, 409 idempotency_conflict. A job's items run at
// low priority unless its body names one: nobody waits on a connection
// for them. A full store is 503
// store_full with Retry-After. Each engine call of a job item counts in
// batchd_requests_total, batchd_latency_seconds (the call's own time) and
// the batch series as a synchronous request does (the runner tells the
// handler of it, jobs.Runner.Observe); the batchd_job_* series count the
// items apart, so the synchronous share is the difference.
//
// # Cancellation and deadlines
//
// A synchronous request passes its request context to Do: a client that
// disconnects ends it, and the engine withdraws the queued request
// (actors.Cancel). The request's timeout becomes its Deadline on the
// engine clock (FrontDoor.Now at arrival + timeout); the engine answers by
// it (Expired: 504). The wait is bounded by the front door: engine.Engine
// answers a request it has lost Expired at its deadline (or TimeoutMax)
// plus its ReplyGrace, so no handler waits for ever,
// without a timer per request.
//
// # Server timeouts and graceful stop
//
// Serve with NewServer, which sets ReadHeaderTimeout (5 s), IdleTimeout
// (120 s) and MaxHeaderBytes (64 KiB) and leaves ReadTimeout and
// WriteTimeout to the handler, which sets them per request (see NewServer
// for why). On SIGTERM:
//
//  1. Handler.Shutdown(ctx): readiness turns 503 and new job intake gets
//     503 (the job runner is stopped by its owner).
//  2. engine.Drain(ctx): the batcher stops admitting (new requests: 503
//     draining) and flushes its queues without lingering; every request in
//     flight is answered.
//  3. http.Server.Shutdown(ctx): the listener closes and the synchronous
//     handlers, answered by now, finish writing.
//  4. engine.Shutdown(ctx).
//
// # Metrics
//
// GET /metrics serves a registry of the handler's own (not Prometheus's
// global one; package metrics makes the series). Its series name every
// tenant and model, so who may read it is configured: anyone while there
// are no API keys; with keys, only a bearer of Config.MetricsKey (401
// otherwise; never a tenant's key), or nobody (403) when no metrics key is
// set, unless Config.MetricsOpen says anyone may:
//
//	batchd_requests_total{model,tenant,outcome,reason}   requests handed to the engine (job items included)
//	batchd_http_responses_total{route,code}              every response
//	batchd_latency_seconds{model,outcome}                handler arrival to engine reply
//	batchd_queue_wait_seconds{model}                     arrival to dispatch (completed requests)
//	batchd_compute_seconds{model}                        dispatch to reply (completed requests)
//	batchd_batch_size{model}                             the batch each completed request ran in
//	batchd_job_items_total{outcome}                      durable job items the runner wrote finished
//	batchd_job_item_retries_total                        job item runs refused for load, queued again
//	batchd_job_items_held, batchd_jobs_active            job items in the engine or waiting; open jobs
//
// and, when Config.Signals is set, gauges read from the batcher at scrape
// time by a prometheus.Collector: batchd_queue_depth,
// batchd_queue_wait_oldest_seconds, batchd_queue_slack_min_seconds,
// batchd_queue_arrival_rate, batchd_queue_batch_size_mean and
// batchd_queue_devices_needed per {model,version,bucket};
// batchd_device_busy_fraction and batchd_device_healthy per {device} (the
// device's index in Config.Devices, from 0);
// batchd_device_busy_seconds_total (a counter) per {device};
// batchd_devices_healthy; batchd_devices_needed (the batcher's
// recommendation); batchd_queue_wait_predicted_seconds;
// batchd_signals_up. Config.Collectors adds the server's own (the
// cluster's, the generator's, the GPUs'). When Config.Autoscale is set (autoscale in the serve
// config): batchd_autoscale_devices_recommended (the autoscaling policy's
// recommendation), batchd_autoscale_devices_current and
// batchd_autoscale_decisions_total{direction}. The Grafana dashboard
// (metrics/grafana/batchd.json) and the alert rules (metrics/alerts.yml)
// read these series; a test fails when one names a series that is gone. The handler never reads actor state
// itself: Signals must ask the actor (a message round trip) and is
// responsible for its own synchronisation. Model labels are bounded (the
// registry's names, or the first Config.ModelLabelsMax seen; the rest are
// "other"), tenants by the API keys.
package httpapi
