package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
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
	c := &awaitCall{h: h}
	c.req1[0] = req
	var out [1]doResult
	c.run(a, c.req1[:], start, out[:])
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
	(&awaitCall{h: h}).run(a, reqs, start, out)
	return out
}

// awaitCall is one await's requests in the engine: fanOut for an
// awaiter. The engine's callbacks only keep the answers; they are
// settled and counted on the request's own goroutine once all are in
// (the engine hands every reply over on one goroutine, which must do no
// more than that).
type awaitCall struct {
	h    *Handler
	reqs []actors.Request
	ids  []uint64
	raw  []rawResult
	left atomic.Int64
	done func()
	// one request's, the common case, without allocations of their own
	req1 [1]actors.Request
	id1  [1]uint64
	raw1 [1]rawResult
}

// run runs reqs and fills out with their results.
func (c *awaitCall) run(a awaiter, reqs []actors.Request, start time.Duration, out []doResult) {
	c.reqs, c.ids, c.raw = reqs, c.id1[:], c.raw1[:]
	if n := len(reqs); n > 1 {
		c.ids, c.raw = make([]uint64, n), make([]rawResult, n)
	}
	c.left.Store(int64(len(reqs)))
	a.Await(c.submit, c.cancel)
	for i, r := range c.raw {
		ctx := context.Background()
		if errors.Is(r.err, context.Canceled) {
			ctx = goneCtx // withdrawn: the client went
		}
		out[i].rep, out[i].err = c.h.settle(ctx, reqs[i], r.rep, r.err, start)
	}
}

func (c *awaitCall) submit(done func()) {
	c.done = done
	for i := range c.reqs {
		c.ids[i] = c.h.eng.Submit(c.reqs[i], func(rep actors.Reply, err error) {
			c.raw[i] = rawResult{rep: rep, err: err}
			c.answered()
		})
	}
}

func (c *awaitCall) cancel() bool {
	last := false
	for i, id := range c.ids {
		if c.h.eng.Cancel(id) {
			c.raw[i] = rawResult{err: context.Canceled}
			last = c.left.Add(-1) == 0
		}
	}
	return last
}

func (c *awaitCall) answered() {
	left := c.left.Add(-1)
	if left < 0 {
		panic("httpapi: a request answered twice")
	}
	if left == 0 {
		c.done()
	}
}

// goneCtx is the context of a request whose client went.
var goneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// FastRoute reports whether engine/fastlane may serve a request to method
// and path: an infer POST (/v1/models/{m}/infer, /v2/models/{m}/infer,
// /v2/models/{m}/versions/{v}/infer) at a canonical path. The handler
// answers it the same whoever serves it.
func (h *Handler) FastRoute(method, path string) bool {
	if method != http.MethodPost || canonicalPath(path) != path {
		return false
	}
	_, _, ok := inferPath(path)
	return ok
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
// request's Pattern and path values set as the mux sets them; nil for
// any other path, or one with escapes (the mux's then). The mux's
// matching was 6.8% of a saturated server's CPU (1.7 µs a request).
func (h *Handler) inferRoute(r *http.Request) http.HandlerFunc {
	if r.URL.RawPath != "" {
		return nil
	}
	model, version, ok := inferPath(r.URL.Path)
	if !ok {
		return nil
	}
	pattern := v1InferPattern
	switch {
	case version != "":
		pattern = v2VersionInferPattern
	case strings.HasPrefix(r.URL.Path, "/v2/"):
		pattern = v2InferPattern
	}
	fn := h.inferRoutes[pattern]
	if fn == nil {
		return nil
	}
	r.Pattern = pattern
	r.SetPathValue("model", model)
	if version != "" {
		r.SetPathValue("version", version)
	}
	return fn
}

// inferPath splits an infer route's path (/v1/models/{m}/infer,
// /v2/models/{m}/infer, /v2/models/{m}/versions/{v}/infer) into its model
// and version; ok false for any other path.
func inferPath(path string) (model, version string, ok bool) {
	if rest, found := strings.CutPrefix(path, "/v1/models/"); found {
		m, tail, _ := strings.Cut(rest, "/")
		return m, "", m != "" && tail == "infer"
	}
	rest, found := strings.CutPrefix(path, "/v2/models/")
	if !found {
		return "", "", false
	}
	m, tail, _ := strings.Cut(rest, "/")
	if m == "" {
		return "", "", false
	}
	if tail == "infer" {
		return m, "", true
	}
	v, found := strings.CutPrefix(tail, "versions/")
	version, tail, _ = strings.Cut(v, "/")
	return m, version, found && version != "" && tail == "infer"
}
