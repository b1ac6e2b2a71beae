package httpapi

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/batchd/batchd/actors"
)

// The Open Inference Protocol for another transport. engine/grpcapi
// serves the protocol over gRPC through these few methods, so that a
// gRPC request is authenticated, resolved against the registry,
// validated, submitted, counted in /metrics and refused exactly as its
// REST twin is, by the same code: nothing of the REST path is copied.

// CallError is a refusal or failure as the REST API answers it: the HTTP
// status and code of the package doc's table, the message, and the retry
// hint of a 429 or 503. Another transport maps Status to its own codes.
type CallError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *CallError) Error() string { return e.Code + ": " + e.Message }

func callError(e *apiError) *CallError {
	if e == nil {
		return nil
	}
	return &CallError{Status: e.status, Code: e.code, Message: e.msg, RetryAfter: e.retryAfter}
}

// Caller is an authenticated client: the tenant its key names, and the
// models it may use.
type Caller struct{ k *tenantKey }

// Tenant is the tenant the caller's requests are accounted to.
func (c Caller) Tenant() string { return c.k.tenant }

// Models is the models the caller's key may use, sorted; nil: any
// (APIKey.Models).
func (c Caller) Models() []string {
	if c.k.models == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(c.k.models))
}

// Authenticate returns the caller an Authorization value ("Bearer KEY",
// from a header or gRPC's authorization metadata; "" for none)
// authenticates, as the REST routes do: any value while there are no API
// keys (the default tenant), else 401 for a missing or unknown key.
func (h *Handler) Authenticate(authorization string) (Caller, *CallError) {
	k, aerr := h.authBearer(authorization)
	if aerr != nil {
		return Caller{}, callError(aerr)
	}
	return Caller{k: k}, nil
}

// OIPModel is a model, and a version of it or none, that a caller may use
// and the registry has (any, without a registry).
type OIPModel struct {
	mi      *modelInfo
	name    string
	version string
}

// ResolveModel checks that c may use model and that the registry has it
// and version ("" for none), as the /v2/models/{model}[/versions/{v}]
// routes do: 400 for a bad name, 403, 404.
func (h *Handler) ResolveModel(c Caller, model, version string) (OIPModel, *CallError) {
	mi, aerr := h.model(c.k, model)
	if aerr == nil {
		aerr = mi.checkVersion(version)
	}
	if aerr != nil {
		return OIPModel{}, callError(aerr)
	}
	return OIPModel{mi: mi, name: model, version: version}, nil
}

// Name is the model's name.
func (m OIPModel) Name() string { return m.name }

// Versions are the versions the model metadata lists: the registry's, or
// without one the version asked for, or none.
func (m OIPModel) Versions() []string {
	vs := []string{}
	switch {
	case m.mi != nil:
		for _, v := range m.mi.cfg.Versions {
			vs = append(vs, v.Name)
		}
	case m.version != "":
		vs = append(vs, m.version)
	}
	return vs
}

// Ready reports what /v2/health/ready (model "") and
// /v2/models/{model}/ready answer: whether a request for model can be
// served now, and never once Shutdown has begun.
func (h *Handler) Ready(ctx context.Context, model string) bool { return h.ready(ctx, model) }

// OIPInput is an OIP infer request's one input tensor as another
// transport decoded it. Its elements come either split already
// (Elements: gRPC's contents.bytes_contents) or as binary tensor data
// (Raw, with HasRaw: gRPC's raw_input_contents, each element a 4-byte
// little-endian length and its bytes, as the REST binary extension's).
type OIPInput struct {
	Name     string
	Datatype string
	Shape    []int64
	Elements [][]byte
	Raw      []byte
	HasRaw   bool
}

// OIPInfer runs an OIP infer request's input tensor on model m, as POST
// /v2/models/{m}[/versions/{v}]/infer runs its body's: the tensor is
// checked as the REST decoder checks it (BYTES, its shape, each element
// valid UTF-8 within the input limit, the model's own included), every
// element is one request in the batcher, submitted together, on one
// version; timeout is the request's own (zero: the SLO's), capped at
// TimeoutMax as REST caps timeout_ms. It returns the version they ran on
// and the outputs in order, or the first failed element's error, and
// counts every element in /metrics as REST does. ctx ending withdraws the
// elements not answered yet.
func (h *Handler) OIPInfer(ctx context.Context, c Caller, m OIPModel, in OIPInput, timeout time.Duration) (string, []string, *CallError) {
	start := h.eng.Now()
	reqs, aerr := h.oipRequests(nil, c, m, in, timeout, start)
	if aerr != nil {
		return "", nil, callError(aerr)
	}
	return oipOutcome(h.fanOut(ctx, reqs, start))
}

// OIPCall is one OIPSubmit's elements in the engine.
type OIPCall struct {
	engineCall
	err   *apiError // the input's refusal: nothing was submitted
	taken atomic.Bool
}

// OIPSubmit is OIPInfer without the wait, for a caller that keeps many
// requests in flight without a goroutine for each (a gRPC stream): it
// checks the input and submits its elements, and done is called exactly
// once, when every element is answered or withdrawn; the caller then
// takes the outcome with Outcome. done runs on the engine's goroutine
// that hands replies over, or on the caller's before OIPSubmit returns (a
// bad input, a request shed at the door); it must not block, nor submit,
// cancel or take the outcome: the engine's goroutine is one for all
// requests, and the outcome's work (the metrics, the response) belongs on
// the caller's own.
func (h *Handler) OIPSubmit(c Caller, m OIPModel, in OIPInput, timeout time.Duration, done func(*OIPCall)) *OIPCall {
	start := h.eng.Now()
	call := &OIPCall{engineCall: engineCall{h: h, start: start}}
	// One element, the common case, goes in the call's own array.
	reqs, aerr := h.oipRequests(call.req1[:0], c, m, in, timeout, start)
	if aerr != nil {
		call.err = aerr
		done(call)
		return call
	}
	call.submit(reqs, func() { done(call) })
	return call
}

// Cancel withdraws the call's elements still in the engine (the client
// went away, or ctx's deadline passed); Outcome counts them as OIPInfer
// counts the elements it withdraws when its ctx ends (499 cancelled, or
// 504). An element answered already is not withdrawn. done is called
// here if no other element is left. Cancel must not be called from done.
func (c *OIPCall) Cancel(ctx context.Context) {
	cause := ctx.Err()
	if cause == nil {
		cause = context.Canceled // the stream broke before its context ended
	}
	if c.err == nil && c.withdraw(cause) {
		c.done()
	}
}

// Outcome is what OIPInfer would have returned for the call: the version
// its elements ran on and their outputs in order, or the first failed
// element's error (or the input's refusal). It counts every element in
// /metrics as OIPInfer does; ctx is the call's, which tells a client's
// going from an engine failure. Call it once, after done.
func (c *OIPCall) Outcome(ctx context.Context) (string, []string, *CallError) {
	if c.taken.Swap(true) || c.left.Load() != 0 {
		panic("httpapi: an OIP call's outcome taken twice, or before its done")
	}
	if c.err != nil {
		return "", nil, callError(c.err)
	}
	var one [1]doResult
	results := one[:]
	if len(c.raw) > 1 {
		results = make([]doResult, len(c.raw))
	}
	c.settle(ctx, results)
	return oipOutcome(results)
}

// oipRequests checks an OIP input tensor (see OIPInfer) and makes the
// engine requests of its elements, one version for all.
func (h *Handler) oipRequests(dst []actors.Request, c Caller, m OIPModel, in OIPInput, timeout time.Duration, start time.Duration) ([]actors.Request, *apiError) {
	lim := h.limitsFor(m.mi)
	name := truncate(in.Name)
	n, aerr := tensorElements(name, in.Datatype, in.Shape, lim)
	if aerr != nil {
		return nil, aerr
	}
	var inputs []string
	switch {
	case in.HasRaw && len(in.Elements) > 0:
		return nil, badRequest("input %q: both contents and raw contents; send one", name)
	case in.HasRaw:
		if inputs, aerr = bytesTensor(in.Raw, int(n), in.Shape, name, lim); aerr != nil {
			return nil, aerr
		}
	default:
		if int64(len(in.Elements)) != n {
			return nil, badRequest("input %q: %d elements for shape %v", name, len(in.Elements), in.Shape)
		}
		inputs = make([]string, len(in.Elements))
		for i, e := range in.Elements {
			switch {
			case len(e) > lim.inputMaxBytes:
				return nil, badRequest("data[%d]: input of %d bytes, over the limit of %d", i, len(e), lim.inputMaxBytes)
			case !utf8.Valid(e):
				return nil, badRequest("input %q: element %d is not valid UTF-8 (batchd's inputs are text)", name, i)
			}
			inputs[i] = string(e)
		}
	}
	if timeout < 0 {
		return nil, badRequest("timeout %v: must be positive", timeout)
	}
	cm := common{version: m.version, timeout: min(timeout, h.cfg.TimeoutMax)}
	return v2Requests(dst, c.k, m.mi, m.name, cm, inputs, start), nil
}

// oipOutcome is what OIPInfer returns for its elements' results: the
// version they ran on and the outputs in order, or the first failed
// element's error.
func oipOutcome(results []doResult) (string, []string, *CallError) {
	if aerr := v2Failure(results); aerr != nil {
		return "", nil, callError(aerr)
	}
	outs := make([]string, len(results))
	for i, r := range results {
		outs[i] = r.rep.Output
	}
	return results[0].rep.Version, outs, nil
}

// GRPCResponse counts one gRPC response in /metrics
// (batchd_grpc_responses_total{method,code}), as every HTTP response is
// counted in batchd_http_responses_total. method is the RPC's short name,
// code the gRPC status code's name.
func (h *Handler) GRPCResponse(method, code string) { h.met.GRPCResponse(method, code) }
