// Package grpcapi serves the Open Inference Protocol (KServe v2) over
// gRPC: the protocol's service inference.GRPCInferenceService (ServerLive,
// ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer) and
// Triton's streaming ModelStreamInfer, in front of the same request path
// as the REST /v2 routes (engine/httpapi).
//
// Imported by: engine/server (serve, on grpc.addr), engine/config (its
// defaults; and cmd/batchd's tests). It imports engine/httpapi (the OIP as
// REST runs it: authentication, the registry, validation, the infer path,
// the metrics) and engine/grpcapi/oippb (the generated messages).
//
// # The service, and the streaming RPC
//
// oippb is generated from the protocol's published
// open_inference_grpc.proto, verbatim: its service, messages, names and
// field numbers are the protocol's own. That file has no streaming RPC:
// ModelStreamInfer(stream ModelInferRequest) returns (stream
// ModelStreamInferResponse) is Triton's extension, declared in Triton's
// own grpc_service.proto, whose service is a superset of the published
// one under the same name. A .proto cannot declare a service twice, and
// Triton's file cannot be generated beside the published one (the same
// messages in the same package), so batchd takes the published file as
// it is, copies Triton's one reply message, ModelStreamInferResponse,
// verbatim into triton_stream.proto (same package, same field numbers),
// and registers one grpc.ServiceDesc: the generated service's methods
// plus ModelStreamInfer, at Triton's path
// /inference.GRPCInferenceService/ModelStreamInfer. On the wire that is
// exactly Triton's service, for the RPCs batchd serves: a Triton client
// (tritonclient.grpc, or any client generated from Triton's file) streams
// to batchd unchanged, and a client generated from the published file
// sees exactly the published service. A tool that reads only the
// published file (grpcurl with it) cannot call the stream; the node
// client in the tests calls it by path, with the messages of the two
// files. The RPCs of Triton's file that batchd does not serve (model
// repository, statistics, shared memory, ...) answer Unimplemented.
//
// # Behaving like REST
//
// Every call goes through httpapi's exported OIP methods (see OIP), the
// code the REST routes run: the same bearer keys and tenants (metadata
// "authorization: Bearer KEY"), the same registry checks, the same input
// checks (one BYTES input tensor, its shape, each element UTF-8 within the
// input limit), every element one request in the batcher, submitted
// together on one version, the same series in /metrics
// (batchd_requests_total, batchd_latency_seconds, ... count gRPC requests
// as REST ones, without a transport label, so REST's series are
// unchanged) and, beside batchd_http_responses_total,
// batchd_grpc_responses_total{method,code}. Refusals carry REST's code
// as an ErrorInfo detail (reason, upper-cased: RATE_LIMITED; domain
// "batchd") and a 429's or 503's retry hint as a RetryInfo detail. REST's
// statuses map to gRPC codes:
//
//	400 bad_request, invalid       InvalidArgument
//	401 unauthorized               Unauthenticated
//	403 forbidden                  PermissionDenied (the key may not use the model)
//	404 unknown_model              NotFound
//	429 rate_limited, quota        ResourceExhausted
//	503 queue_full, overloaded,    Unavailable
//	    no_device, draining,
//	    cancelled
//	504 deadline                   DeadlineExceeded
//	500 backend, attempts          Internal
//	499 cancelled                  Canceled (the client went away)
//	a message over MsgMaxBytes     ResourceExhausted (grpc-go's own refusal)
//
// # Tensors
//
// The input's elements come as contents.bytes_contents or as
// raw_input_contents (Triton's clients send raw by default: each element
// a 4-byte little-endian length and its bytes), not both. The output goes
// back as it came: raw_output_contents for a raw input, contents for
// contents, unless the requested output's parameter binary_data (Triton's)
// says otherwise. An outputs list may name "output" alone.
//
// # Deadlines
//
// A call's gRPC deadline is its request's deadline: the time left of it
// becomes the request's timeout (REST's timeout_ms), capped at the
// batcher's TimeoutMax as REST caps it; Triton's request parameter
// "timeout" (int64, microseconds) sets a shorter one. A call without
// either gets the SLO. A deadline already past is DeadlineExceeded
// without reaching the engine.
//
// # Streams
//
// A ModelStreamInfer stream is authenticated once, from its metadata. Its
// requests run concurrently, at most Config.StreamInFlightMax (128) at
// once: past that the server stops reading the stream until one is
// answered, and HTTP/2 flow control holds the client. Replies go out as
// they finish, in any order, each with its request's id; a failed request
// is a reply whose error_message is REST's code and message ("quota:
// ..."), with an infer_response naming its model and id, and the stream
// goes on. A client that cancels its stream withdraws its requests still
// in the engine. A stream costs two goroutines, whatever its requests in
// flight: one reads and submits (httpapi's OIPSubmit, which does not
// wait), the handler's own sends the replies the engine hands over.
//
// # Limits and stopping
//
// A received message is at most Config.MsgMaxBytes (1 MiB, REST's body
// bound), a connection carries at most Config.ConnStreamsMax (1,024)
// calls at once. Shutdown (engine/server calls it after the engine's
// drain, beside the HTTP server's) makes streams take no more requests
// and end with Unavailable once theirs are answered, refuses new calls,
// waits for those in progress (GracefulStop) within its bound, and then
// cuts off the rest (Stop).
package grpcapi
