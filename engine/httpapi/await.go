package httpapi

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/batchd/batchd/actors"
)

// awaiter is a ResponseWriter whose connection waits for the engine's
// answers itself, watching its client meanwhile (engine/fastlane's):
// Await calls submit once, which hands the requests over with a done to
// call once they are all answered; when the client goes first, Await
// calls cancel, which withdraws what it can and reports true when done
// will not be called. Await returns once done is called, or cancel
// reported true (gone).
type awaiter interface {
	Await(submit func(done func()), cancel func() bool) (gone bool)
}

// doFor runs one request for r, through w's Await when it has one.
func (h *Handler) doFor(w http.ResponseWriter, r *http.Request, req actors.Request, start time.Duration) (actors.Reply, *apiError) {
	a, ok := w.(awaiter)
	if !ok {
		return h.do(r.Context(), req, start)
	}
	c := &engineCall{h: h, start: start}
	c.req1[0] = req
	var out [1]doResult
	c.await(a, c.req1[:], out[:])
	return out[0].rep, out[0].err
}

// runFor runs reqs together for r, through w's Await when it has one
// (else fanOut on r's context), and returns their results in order.
func (h *Handler) runFor(w http.ResponseWriter, r *http.Request, reqs []actors.Request, start time.Duration) []doResult {
	a, ok := w.(awaiter)
	if !ok {
		return h.fanOut(r.Context(), reqs, start)
	}
	out := make([]doResult, len(reqs))
	(&engineCall{h: h, start: start}).await(a, reqs, out)
	return out
}

// await runs reqs through a's Await and fills out with their results: a
// request withdrawn because the client went is its 499.
func (c *engineCall) await(a awaiter, reqs []actors.Request, out []doResult) {
	a.Await(func(done func()) { c.submit(reqs, done) }, func() bool { return c.withdraw(context.Canceled) })
	c.settle(context.Background(), out)
}

// FastRoute reports whether engine/fastlane may serve a request to method
// and path: an infer POST (/v1/models/{m}/infer, /v2/models/{m}/infer,
// /v2/models/{m}/versions/{v}/infer) at a canonical path. The handler
// answers it the same whoever serves it.
func (h *Handler) FastRoute(method, path string) bool {
	if method != http.MethodPost || canonicalPath(path) != path {
		return false
	}
	pattern, _, _ := inferPath(path)
	return pattern != ""
}

// The infer routes' patterns, which inferRoute matches itself.
const (
	v1InferPattern        = "/v1/models/{model}/infer"
	v2InferPattern        = "/v2/models/{model}/infer"
	v2VersionInferPattern = "/v2/models/{model}/versions/{version}/infer"
)

// keepInferRoute keeps fn when path is an infer route's pattern, and
// returns it.
func (h *Handler) keepInferRoute(path string, fn http.HandlerFunc) http.HandlerFunc {
	switch path {
	case v1InferPattern, v2InferPattern, v2VersionInferPattern:
		if h.inferRoutes == nil {
			h.inferRoutes = map[string]http.HandlerFunc{}
		}
		h.inferRoutes[path] = fn
	}
	return fn
}

// inferRoute is the handler of an infer route r's path matches, with the
// request's Pattern set as the mux sets it; nil for any other path, or
// one with escapes (the mux's then). The mux's matching was 6.8% of a
// saturated server's CPU (1.7 µs a request). The path values are not set
// (SetPathValue allocates a map, a request's largest allocation but
// two): pathValue reads them from the path.
func (h *Handler) inferRoute(r *http.Request) http.HandlerFunc {
	if r.URL.RawPath != "" {
		return nil
	}
	pattern, _, _ := inferPath(r.URL.Path)
	fn := h.inferRoutes[pattern]
	if fn == nil {
		return nil
	}
	r.Pattern = pattern
	return fn
}

// pathValue is r's path value name ("model", "version"): the mux's, or,
// for a request inferRoute routed, the one its path holds.
func pathValue(r *http.Request, name string) string {
	if v := r.PathValue(name); v != "" {
		return v
	}
	switch r.Pattern {
	case v1InferPattern, v2InferPattern, v2VersionInferPattern:
		_, model, version := inferPath(r.URL.Path)
		switch name {
		case "model":
			return model
		case "version":
			return version
		}
	}
	return ""
}

// inferPath matches an infer route's path (/v1/models/{m}/infer,
// /v2/models/{m}/infer, /v2/models/{m}/versions/{v}/infer): its pattern,
// model and version; pattern "" for any other path.
func inferPath(path string) (pattern, model, version string) {
	if rest, found := strings.CutPrefix(path, "/v1/models/"); found {
		m, tail, _ := strings.Cut(rest, "/")
		if m == "" || tail != "infer" {
			return "", "", ""
		}
		return v1InferPattern, m, ""
	}
	rest, found := strings.CutPrefix(path, "/v2/models/")
	if !found {
		return "", "", ""
	}
	m, tail, _ := strings.Cut(rest, "/")
	switch {
	case m == "":
		return "", "", ""
	case tail == "infer":
		return v2InferPattern, m, ""
	}
	v, found := strings.CutPrefix(tail, "versions/")
	version, tail, _ = strings.Cut(v, "/")
	if !found || version == "" || tail != "infer" {
		return "", "", ""
	}
	return v2VersionInferPattern, m, version
}
