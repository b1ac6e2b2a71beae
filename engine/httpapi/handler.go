package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"mime"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/httpapi/metrics"
	"github.com/batchd/batchd/engine/jobs"
)

// Handler is the HTTP adapter: an http.Handler over the engine's front
// door (engine.FrontDoor: *engine.Engine, or a recorder in front of it).
// The handler does not bound a request's wait itself (a timer per request
// cost ~2 µs of CPU): the front door answers every request by its
// deadline (when zero, Arrival plus TimeoutMax) plus ReplyGrace, Expired
// (504) at the latest. Make it with New; its methods are safe for
// concurrent use.
type Handler struct {
	eng engine.FrontDoor
	cfg Config
	lim limits
	mux *http.ServeMux
	// inferRoutes are the infer routes' handlers by pattern, which
	// ServeHTTP calls without the mux (inferRoute).
	inferRoutes map[string]http.HandlerFunc
	met         *metrics.Metrics
	jobs        JobStore // nil: no durable jobs, and async requests are refused
	log         *slog.Logger
	keys        map[[sha256.Size]byte]*tenantKey // nil: open API
	// metricsKeyHash is Config.MetricsKey's SHA-256, compared in constant
	// time; metricsKeyed says there is one. Neither the metrics key nor a
	// tenant's is kept in clear: New drops them from its copy of cfg.
	metricsKeyHash [sha256.Size]byte
	metricsKeyed   bool
	failLog        logLimiter            // failed requests' log lines
	models         map[string]*modelInfo // nil: any model

	// writeWindow bounds the time from a request's start to the end of its
	// response: reading the body, the longest wait for the engine, and
	// some slack for writing. It is set per connection write, so a client
	// that does not read its response cannot hold the handler.
	writeWindow time.Duration

	draining atomic.Bool
	idPrefix string
	idSeq    atomic.Uint64
}

// tenantKey is what a bearer token grants: a tenant, and the models it may
// use (nil: all).
type tenantKey struct {
	tenant string
	models map[string]bool
}

// openKey is every request's key when no API keys are configured.
var openKey = &tenantKey{tenant: DefaultTenant}

// modelInfo is a model of the registry, resolved.
type modelInfo struct {
	cfg         actors.ModelConfig
	versions    map[string]bool
	totalWeight int
}

var _ http.Handler = (*Handler)(nil)

// New returns the HTTP adapter over eng, or an error naming the bad
// setting. The handler starts no goroutine of its own: a batch or OIP
// request submits all its items at once through the front door's Submit.
func New(eng engine.FrontDoor, cfg Config) (*Handler, error) {
	if eng == nil {
		return nil, errors.New("httpapi: no engine")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var prefix [6]byte
	_, _ = rand.Read(prefix[:]) // never fails (crypto/rand since Go 1.24)
	h := &Handler{
		eng: eng,
		cfg: cfg,
		lim: limits{
			inputMaxBytes: cfg.InputMaxBytes,
			itemsMax:      cfg.BatchItemsMax,
			timeoutMax:    cfg.TimeoutMax,
		},
		mux:         http.NewServeMux(),
		met:         newMetrics(cfg),
		jobs:        cfg.Jobs,
		log:         cfg.Logger,
		writeWindow: cfg.BodyReadTimeout + cfg.TimeoutMax + cfg.ReplyGrace + writeSlack,
		idPrefix:    hex.EncodeToString(prefix[:]) + "-",
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	// The job items the runner hands to the engine count in the request
	// metrics as the synchronous requests do.
	if o, ok := cfg.Jobs.(interface{ Observe(jobs.Observer) }); ok {
		o.Observe(h.observeJobItem)
	}
	h.metricsKeyHash, h.metricsKeyed = sha256.Sum256([]byte(cfg.MetricsKey)), cfg.MetricsKey != ""
	if len(cfg.APIKeys) > 0 {
		h.keys = make(map[[sha256.Size]byte]*tenantKey, len(cfg.APIKeys))
		for _, k := range cfg.APIKeys {
			tk := &tenantKey{tenant: k.Tenant}
			if len(k.Models) > 0 {
				tk.models = make(map[string]bool, len(k.Models))
				for _, m := range k.Models {
					tk.models[m] = true
				}
			}
			h.keys[sha256.Sum256([]byte(k.Key))] = tk
		}
	}
	// The hashes are all the handler needs of the keys from here on.
	h.cfg.APIKeys, h.cfg.MetricsKey = nil, ""
	if len(cfg.Models) > 0 {
		h.models = make(map[string]*modelInfo, len(cfg.Models))
		for _, m := range cfg.Models {
			mi := &modelInfo{cfg: m, versions: make(map[string]bool, len(m.Versions))}
			for _, v := range m.Versions {
				mi.versions[v.Name] = true
				mi.totalWeight += max(v.Weight, 0)
			}
			h.models[m.Name] = mi
		}
	}
	h.routes()
	return h, nil
}

// writeSlack is the time a response may take to write once its reply is in.
const writeSlack = 10 * time.Second

func (h *Handler) routes() {
	h.route(http.MethodPost, "/v1/models/{model}/infer", h.v1Infer)
	h.route(http.MethodPost, "/v1/models/{model}/batch", h.v1Batch)
	h.routeMethods("/v1/requests/{id}", map[string]http.HandlerFunc{
		http.MethodGet:    h.v1Status,
		http.MethodDelete: h.jobCancel,
	})
	// The OIP routes answer with a trailing slash as well ("/v2/"): some
	// clients build their URLs with one. {$} matches the slash alone, not
	// the subtree below it.
	for _, p := range []string{"/v2", "/v2/{$}"} {
		h.route(http.MethodGet, p, h.v2Server)
	}
	for _, suffix := range []string{"", "/{$}"} {
		h.route(http.MethodGet, "/v2/health/live"+suffix, h.v2Live)
		h.route(http.MethodGet, "/v2/health/ready"+suffix, h.v2Ready)
		h.route(http.MethodGet, "/v2/models/{model}"+suffix, h.v2Metadata)
		h.route(http.MethodGet, "/v2/models/{model}/versions/{version}"+suffix, h.v2Metadata)
		h.route(http.MethodGet, "/v2/models/{model}/ready"+suffix, h.v2ModelReady)
		h.route(http.MethodGet, "/v2/models/{model}/versions/{version}/ready"+suffix, h.v2ModelReady)
		// An OIP infer body may be the binary tensor data extension's
		// (application/octet-stream).
		h.routeBody("/v2/models/{model}/infer"+suffix, true, h.v2Infer)
		h.routeBody("/v2/models/{model}/versions/{version}/infer"+suffix, true, h.v2Infer)
	}
	metricsHandler := h.met.Handler()
	h.route(http.MethodGet, "/metrics", func(w http.ResponseWriter, r *http.Request) {
		if aerr := h.metricsAuth(r); aerr != nil {
			h.fail(w, r, aerr)
			return
		}
		metricsHandler.ServeHTTP(w, r)
	})
	h.route(http.MethodGet, "/v1/cluster", h.v1Cluster)
	h.route(http.MethodGet, "/v1/stats", h.stats)
	h.route(http.MethodGet, "/{$}", h.status)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, &apiError{status: http.StatusNotFound, code: codeNotFound, msg: "no such route: " + truncate(r.URL.Path)})
	})
}

// v1Cluster is GET /v1/cluster: the node's view of its cluster, behind
// the metrics key (it names the nodes and their addresses).
func (h *Handler) v1Cluster(w http.ResponseWriter, r *http.Request) {
	if aerr := h.metricsAuth(r); aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	if h.cfg.Cluster == nil {
		h.fail(w, r, &apiError{status: http.StatusNotFound, code: codeNotFound, msg: "not a cluster: this server is a single node (set cluster.node, or serve --node)"})
		return
	}
	h.writeJSON(w, r, http.StatusOK, h.cfg.Cluster())
}

// route registers a path for one method. The method is checked here rather
// than in the mux pattern so that a wrong method gets a JSON 405, like
// every other error, not the mux's plain text. Every POST route takes a
// JSON body, so its Content-Type and Content-Encoding are checked here
// too, once for all of them (jobs' included).
func (h *Handler) route(method, path string, fn http.HandlerFunc) {
	if method == http.MethodPost {
		h.routeBody(path, false, fn)
		return
	}
	h.handle(method, path, false, fn)
}

// routeBody registers a POST route; binaryOK: its body may also be
// application/octet-stream (the OIP binary tensor data extension).
func (h *Handler) routeBody(path string, binaryOK bool, fn http.HandlerFunc) {
	h.handle(http.MethodPost, path, binaryOK, fn)
}

func (h *Handler) handle(method, path string, binaryOK bool, fn http.HandlerFunc) {
	h.mux.HandleFunc(path, h.keepInferRoute(path, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			h.fail(w, r, &apiError{status: http.StatusMethodNotAllowed, code: codeMethod, msg: r.Method + " not allowed; use " + method})
			return
		}
		if method == http.MethodPost {
			if aerr := checkContentType(r.Header, binaryOK); aerr != nil {
				h.fail(w, r, aerr)
				return
			}
			if _, aerr := contentEncoding(r.Header); aerr != nil {
				// RFC 7694: a 415 for a content coding says which it takes.
				w.Header().Set("Accept-Encoding", acceptedEncodings)
				h.fail(w, r, aerr)
				return
			}
		}
		fn(w, r)
	}))
}

// checkContentType refuses, with 415, a body declared as anything but
// JSON: a client that sends text/plain or XML is not sending what it
// thinks the server reads, and a JSON body in another charset would not
// decode as its sender meant. Accepted: no Content-Type (JSON is assumed),
// application/json and application/*+json, with charset utf-8 if any; and
// application/x-www-form-urlencoded, which is what `curl -d` (the README's
// and `batchd serve`'s own examples) declares for the JSON it sends; the
// body is decoded as JSON all the same. binaryOK also accepts
// application/octet-stream, the type of an OIP infer body in the binary
// tensor data extension (a JSON header, then raw tensor bytes).
func checkContentType(hdr http.Header, binaryOK bool) *apiError {
	vals := hdr.Values("Content-Type")
	if len(vals) == 0 || (len(vals) == 1 && (vals[0] == "application/json" || strings.TrimSpace(vals[0]) == "")) {
		// The type nearly every client sends, taken as it is: the parse
		// below makes a map of parameters a request.
		return nil
	}
	unsupported := func(format string, args ...any) *apiError {
		return &apiError{status: http.StatusUnsupportedMediaType, code: codeMediaType, msg: fmt.Sprintf(format, args...)}
	}
	if len(vals) > 1 {
		return unsupported("more than one Content-Type")
	}
	mt, params, err := mime.ParseMediaType(vals[0])
	if err != nil {
		return unsupported("Content-Type %q: %v; send application/json", truncate(vals[0]), err)
	}
	switch {
	case mt == "application/json", mt == "application/x-www-form-urlencoded":
	case strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
	case binaryOK && mt == "application/octet-stream":
		return nil // bytes: no charset to check
	default:
		return unsupported("Content-Type %q: the body must be JSON (application/json)", truncate(mt))
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return unsupported("charset %q: JSON bodies are UTF-8", truncate(cs))
	}
	return nil
}

// canonicalPath is p as net/http's ServeMux cleans it: no "." or ".."
// segments, no empty ones, its trailing slash kept.
func canonicalPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	c := path.Clean(p)
	if p[len(p)-1] == '/' && c != "/" {
		c += "/"
	}
	return c
}

// routeMethods registers a path for several methods, each with its own
// function; another method gets a JSON 405 listing them.
func (h *Handler) routeMethods(path string, fns map[string]http.HandlerFunc) {
	allowed := make([]string, 0, len(fns))
	for m := range fns {
		allowed = append(allowed, m)
	}
	slices.Sort(allowed)
	allow := strings.Join(allowed, ", ")
	h.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		m := r.Method
		if m == http.MethodHead {
			m = http.MethodGet
		}
		fn := fns[m]
		if fn == nil {
			w.Header().Set("Allow", allow)
			h.fail(w, r, &apiError{status: http.StatusMethodNotAllowed, code: codeMethod, msg: r.Method + " not allowed; use " + allow})
			return
		}
		fn(w, r)
	})
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Errors mean the writer cannot set deadlines (a test recorder); the
	// server's own timeouts are all there is then.
	rc := http.NewResponseController(w)
	now := time.Now()
	_ = rc.SetWriteDeadline(now.Add(h.writeWindow))
	if r.ContentLength != 0 {
		// Set here, not only where a route reads the body: a request
		// refused before its body is read (401, 404) still has the body
		// drained by net/http before the answer goes out, and a client
		// that trickles it must not hold the connection. readBody clears
		// it once the body is in.
		_ = rc.SetReadDeadline(now.Add(h.cfg.BodyReadTimeout))
	}
	// ServeMux answers a path with "..", "." or "//" with a redirect to its
	// clean form, in HTML: an API client has no use for either, and a
	// redirect of a POST is followed differently by every client. No
	// route is at such a path, so it is a JSON 404 like any other.
	if r.Method != http.MethodConnect && canonicalPath(r.URL.Path) != r.URL.Path {
		h.fail(w, r, &apiError{status: http.StatusNotFound, code: codeNotFound, msg: "no such route: " + truncate(r.URL.Path) + " is not in canonical form (no '.', '..' or empty segments)"})
		return
	}
	if fn := h.inferRoute(r); fn != nil {
		fn(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// Shutdown marks the handler draining and not ready (so load balancers
// stop sending, and new job intake is refused with 503). It does not wait:
// synchronous requests are the http.Server's to wait for (its Shutdown), and
// durable jobs the job runner's. See the package doc for the order of a
// graceful stop. ctx is for the caller's bound, kept so the stop order reads
// the same for every part.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.draining.Store(true)
	return nil
}

// --- helpers shared by the routes ---

func (h *Handler) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	buf := encodeBuffers.Get().(*bytes.Buffer)
	defer putEncodeBuffer(buf)
	buf.Reset()
	// The body ends with a newline, as json.Encoder writes one.
	if ir, ok := v.(*inferResponse); ok && ir != nil {
		b := appendInferResponse(buf.AvailableBuffer(), ir)
		buf.Write(append(b, '\n'))
	} else if err := json.NewEncoder(buf).Encode(v); err != nil {
		// Only plain structs of strings and numbers are written: a bug.
		h.log.Error("httpapi: encode response", "err", err)
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"encoding the response failed"}}` + "\n")
	}
	hdr := w.Header()
	if status == http.StatusServiceUnavailable && h.draining.Load() {
		// A stopping server's 503 ends the connection: a client (or load
		// balancer) that kept it alive would only get more of them, and
		// http.Server.Shutdown waits for it to go idle.
		hdr.Set("Connection", "close")
	}
	hdr["Content-Type"] = contentTypeJSON
	hdr.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
	h.met.Response(r.Pattern, status)
}

// contentTypeJSON is every JSON response's Content-Type, shared: net/http
// only reads a header's values, and copies them when the header is sent.
var contentTypeJSON = []string{"application/json"}

// encodeBuffers holds the buffers responses are encoded into: a response
// is written with one Write, and its buffer is reused by the next.
var encodeBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// encodeBufferKeptMax is the largest buffer put back for reuse: a large
// batch's response is not kept for a thousand small ones.
const encodeBufferKeptMax = 64 << 10

func putEncodeBuffer(b *bytes.Buffer) {
	if b.Cap() <= encodeBufferKeptMax {
		encodeBuffers.Put(b)
	}
}

// fail writes e in the error format of the route: {"error": {...}} on v1
// (and any other route), {"error": "..."} on the OIP /v2 routes, as
// KServe and Triton clients expect.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, e *apiError) {
	e.setRetryAfter(w)
	if e.code == codeDraining {
		// The engine may be draining before this handler is told to
		// (writeJSON closes on its own draining): either way, the next
		// request belongs on a new connection, to another server.
		w.Header().Set("Connection", "close")
	}
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="batchd"`)
	}
	if strings.HasPrefix(r.URL.Path, "/v2") {
		h.writeJSON(w, r, e.status, v2Error{Error: e.msg})
		return
	}
	h.writeJSON(w, r, e.status, struct {
		Error *errorBody `json:"error"`
	}{e.body()})
}

// auth returns the key a request authenticates with.
func (h *Handler) auth(r *http.Request) (*tenantKey, *apiError) {
	if h.keys == nil {
		return openKey, nil
	}
	return h.authBearer(r.Header.Get("Authorization"))
}

// authBearer returns the key an Authorization value ("Bearer KEY")
// authenticates with: the header's, or gRPC's authorization metadata.
func (h *Handler) authBearer(a string) (*tenantKey, *apiError) {
	if h.keys == nil {
		return openKey, nil
	}
	const scheme = "Bearer "
	if len(a) <= len(scheme) || !strings.EqualFold(a[:len(scheme)], scheme) {
		return nil, &apiError{status: http.StatusUnauthorized, code: codeUnauthorized, msg: "missing bearer token"}
	}
	// Looked up by hash: the lookup's timing then says nothing useful
	// about how close a guess came to a real key.
	k := h.keys[sha256.Sum256([]byte(strings.TrimSpace(a[len(scheme):])))]
	if k == nil {
		return nil, &apiError{status: http.StatusUnauthorized, code: codeUnauthorized, msg: "unknown bearer token"}
	}
	return k, nil
}

// metricsAuth decides who may read /metrics (see Config.MetricsKey): its
// series name every tenant and every model served, so once tenants have
// keys, it is not for any of them.
func (h *Handler) metricsAuth(r *http.Request) *apiError {
	switch {
	case h.cfg.MetricsOpen:
		return nil
	case h.metricsKeyed:
		const scheme = "Bearer "
		a := r.Header.Get("Authorization")
		if len(a) <= len(scheme) || !strings.EqualFold(a[:len(scheme)], scheme) {
			return &apiError{status: http.StatusUnauthorized, code: codeUnauthorized, msg: "missing bearer token (the metrics key)"}
		}
		got := sha256.Sum256([]byte(strings.TrimSpace(a[len(scheme):])))
		if subtle.ConstantTimeCompare(got[:], h.metricsKeyHash[:]) != 1 {
			return &apiError{status: http.StatusUnauthorized, code: codeUnauthorized, msg: "not the metrics key"}
		}
		return nil
	case h.keys != nil:
		return &apiError{status: http.StatusForbidden, code: codeForbidden,
			msg: "metrics name every tenant and model: with API keys, scraping them needs a metrics key of its own (or metrics open, on purpose)"}
	}
	return nil
}

// validName reports whether a model or version name taken from a path is
// one batchd can key and label by.
func validName(s string) bool {
	if s == "" || len(s) > nameMaxBytes || !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}

// model checks that k may use the named model and that it exists. The
// result is nil when there is no registry (any model is served).
func (h *Handler) model(k *tenantKey, name string) (*modelInfo, *apiError) {
	if !validName(name) {
		return nil, badRequest("model name must be 1 to %d bytes of printable UTF-8", nameMaxBytes)
	}
	// Checked before the registry, so a restricted key learns nothing of
	// models it may not use.
	if k.models != nil && !k.models[name] {
		return nil, &apiError{status: http.StatusForbidden, code: codeForbidden, msg: "this key may not use model " + truncate(name)}
	}
	if h.models == nil {
		return nil, nil
	}
	mi := h.models[name]
	if mi == nil {
		return nil, &apiError{status: http.StatusNotFound, code: codeUnknownModel, msg: "unknown model " + truncate(name)}
	}
	return mi, nil
}

// checkVersion refuses a version the registry does not list.
func (mi *modelInfo) checkVersion(v string) *apiError {
	if v != "" && !validName(v) {
		return badRequest("version must be at most %d bytes of printable UTF-8", nameMaxBytes)
	}
	if mi == nil || v == "" || mi.versions[v] {
		return nil
	}
	return &apiError{status: http.StatusNotFound, code: codeUnknownModel, msg: "model " + truncate(mi.cfg.Name) + " has no version " + truncate(v)}
}

// pick draws a version by the routing weights, for a request that must run
// whole on one version.
func (mi *modelInfo) pick() string {
	if mi.totalWeight <= 0 {
		return mi.cfg.Versions[0].Name
	}
	n := mrand.IntN(mi.totalWeight)
	for _, v := range mi.cfg.Versions {
		if n < v.Weight {
			return v.Name
		}
		n -= max(v.Weight, 0)
	}
	return mi.cfg.Versions[0].Name
}

// limitsFor is the decoders' limits for a model: its InputLenMax, when
// smaller, replaces the global input cap, so an input the batcher would
// refuse is refused here, before it reaches the engine.
func (h *Handler) limitsFor(mi *modelInfo) limits {
	lim := h.lim
	if mi != nil && mi.cfg.InputLenMax > 0 && mi.cfg.InputLenMax < lim.inputMaxBytes {
		lim.inputMaxBytes = mi.cfg.InputLenMax
	}
	return lim
}

// readBody reads a request body within BodyMaxBytes and BodyReadTimeout
// (a read deadline set by ServeHTTP).
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	return h.readBodyMax(w, r, h.cfg.BodyMaxBytes)
}

// readBodyMax is readBody with its own size bound (a durable batch's is
// larger).
func (h *Handler) readBodyMax(w http.ResponseWriter, r *http.Request, bodyMax int64) ([]byte, *apiError) {
	if r.ContentLength > bodyMax {
		// Refused on the client's own word, before reading any of it: a
		// client that declares a gigabyte and trickles it would otherwise
		// hold the connection until bodyMax bytes or the read deadline.
		w.Header().Set("Connection", "close")
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: codeTooLarge, msg: fmt.Sprintf("body of %d bytes declared, over %d", r.ContentLength, bodyMax)}
	}
	rc := http.NewResponseController(w)
	var body []byte
	var err error
	src := http.MaxBytesReader(w, r.Body, bodyMax)
	if enc, _ := contentEncoding(r.Header); enc == "" {
		body, err = readAll(src, r.ContentLength, bodyMax)
	} else {
		// The compressed body is bounded by bodyMax as it arrives, and so
		// is what it decompresses to: a zip bomb stops at bodyMax+1 bytes.
		body, err = readAll(decompress(enc, src, bodyMax), -1, bodyMax)
	}
	if err == nil {
		// Cleared once read: net/http watches the connection for the
		// client going away while the handler waits, and a deadline left
		// in place would end that watch, and the request's context with
		// it.
		_ = rc.SetReadDeadline(time.Time{})
		return body, nil
	}
	// On failure the deadline stays, and the connection is not reused:
	// net/http would otherwise try to read the rest of the body before
	// answering, and wait for ever on the client that stopped sending it.
	w.Header().Set("Connection", "close")
	var tooBig *http.MaxBytesError
	var netErr net.Error
	var bad *decompressError
	switch {
	case errors.As(err, &tooBig):
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: codeTooLarge, msg: fmt.Sprintf("body over %d bytes", bodyMax)}
	case errors.As(err, &netErr) && netErr.Timeout():
		return nil, &apiError{status: http.StatusRequestTimeout, code: codeTimeout, msg: "body not received in time"}
	case errors.As(err, &bad):
		return nil, badRequest("%v", bad)
	}
	return nil, badRequest("reading body: %v", err)
}

// readAll reads body to its end. A body of a declared length within
// bodyMax is read into one buffer of exactly that size, plus one byte to
// see the end (bytes.Buffer.ReadFrom and io.ReadAll both grow past a small
// body: 512 bytes and a copy for a 40-byte request); an undeclared one
// grows as io.ReadAll does. bodyMax is enforced by the caller's
// MaxBytesReader.
func readAll(body io.Reader, declared, bodyMax int64) ([]byte, error) {
	size := int64(bodyReadInitial)
	if declared >= 0 && declared <= bodyMax {
		size = declared + 1
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// bodyReadInitial is the first buffer for a body of undeclared length.
const bodyReadInitial = 512

// request builds the engine request for one input.
func request(k *tenantKey, model string, c common, input string, start time.Duration) actors.Request {
	req := actors.Request{
		Tenant:   k.tenant,
		Model:    model,
		Version:  c.version,
		Params:   c.params,
		Priority: c.priority,
		Input:    input,
	}
	if c.timeout > 0 {
		req.Deadline = start + c.timeout
	}
	return req
}

// do runs one request through the engine and records it. ctx is the
// context the caller came with (see doError).
func (h *Handler) do(ctx context.Context, req actors.Request, start time.Duration) (actors.Reply, *apiError) {
	rep, err := h.eng.Do(ctx, req)
	return h.settle(ctx, req, rep, err, start)
}

// settle maps one engine answer to the API's, and records it.
func (h *Handler) settle(ctx context.Context, req actors.Request, rep actors.Reply, err error, start time.Duration) (actors.Reply, *apiError) {
	var aerr *apiError
	if err != nil {
		aerr = h.doError(ctx, err)
	} else {
		aerr = h.replyError(rep)
	}
	h.met.Observe(req.Model, req.Tenant, outcomeOf(rep, aerr), reasonOf(rep, aerr), rep, h.eng.Now()-start)
	if aerr != nil && aerr.status == http.StatusInternalServerError {
		if ok, suppressed := h.failLog.allow(h.eng.Now()); ok {
			h.log.Warn("httpapi: request failed", "model", req.Model, "tenant", req.Tenant, "code", aerr.code, "err", aerr.msg,
				"suppressed", suppressed)
		}
	}
	return rep, aerr
}

// failLogEvery is the most often a failed request is logged: a client
// retrying a poison input, or a failing backend, fails requests at the
// load's rate, and the log must not grow at it. The line says how many
// failures went unlogged since the last.
const failLogEvery = time.Second

// logLimiter lets one log line through per failLogEvery and counts the
// rest. Safe for concurrent use, without a lock.
type logLimiter struct {
	next    atomic.Int64 // engine time of the next line allowed
	dropped atomic.Int64 // lines not written since the last one
}

// allow reports whether a line may be written at now, and how many were
// not written since the last one.
func (l *logLimiter) allow(now time.Duration) (bool, int64) {
	n := l.next.Load()
	if int64(now) < n || !l.next.CompareAndSwap(n, int64(now+failLogEvery)) {
		l.dropped.Add(1)
		return false, 0
	}
	return true, l.dropped.Swap(0)
}

// newMetrics makes the handler's Prometheus series from its config.
func newMetrics(cfg Config) *metrics.Metrics {
	names := make([]string, 0, len(cfg.Models))
	for _, m := range cfg.Models {
		names = append(names, m.Name)
	}
	js, _ := cfg.Jobs.(metrics.JobStats)
	return metrics.New(metrics.Config{
		Models:         names,
		ModelLabelsMax: cfg.ModelLabelsMax,
		Signals:        cfg.Signals,
		ScrapeTimeout:  cfg.ScrapeTimeout,
		Devices:        cfg.Devices,
		Jobs:           js,
		Collectors:     cfg.Collectors,
		Autoscale:      cfg.Autoscale,
	})
}

// observeJobItem records one engine call of the job runner (a
// jobs.Observer) as do records a synchronous one; an item the runner
// withdrew counts as one whose client went away.
func (h *Handler) observeJobItem(req actors.Request, rep actors.Reply, err error, elapsed time.Duration) {
	var aerr *apiError
	switch {
	case errors.Is(err, jobs.ErrWithdrawn):
		aerr = &apiError{status: statusClientClosed, code: codeCancelled, msg: "job item withdrawn"}
	case err != nil:
		aerr = h.doError(context.Background(), err)
	default:
		aerr = h.replyError(rep)
	}
	h.met.Observe(req.Model, req.Tenant, outcomeOf(rep, aerr), reasonOf(rep, aerr), rep, elapsed)
}

type doResult struct {
	rep actors.Reply
	err *apiError
}

// fanOut runs reqs through the engine together and returns their results
// in input order. Submitting them together is what lets them share an
// engine batch. It takes no goroutine a request but one for the whole
// call: every request is answered into out by the engine's callback; if
// ctx ends first, those not answered yet are withdrawn and answered as Do
// would have been.
func (h *Handler) fanOut(ctx context.Context, reqs []actors.Request, start time.Duration) []doResult {
	out := make([]doResult, len(reqs))
	if len(reqs) == 1 {
		out[0].rep, out[0].err = h.do(ctx, reqs[0], start)
		return out
	}
	var wg sync.WaitGroup
	wg.Add(len(reqs))
	ids := make([]uint64, len(reqs))
	for i, req := range reqs {
		ids[i] = h.eng.Submit(req, func(rep actors.Reply, err error) {
			out[i].rep, out[i].err = h.settle(ctx, req, rep, err, start)
			wg.Done()
		})
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
		return out
	case <-ctx.Done():
	}
	for i, id := range ids {
		if h.eng.Cancel(id) {
			out[i].rep, out[i].err = h.settle(ctx, reqs[i], actors.Reply{}, ctx.Err(), start)
			wg.Done()
		}
	}
	<-all
	return out
}

// nextID is a request id for a synchronous request: unique in this process
// (a random prefix per handler and a counter), cheap, and not secret.
func (h *Handler) nextID() string {
	return h.idPrefix + strconv.FormatUint(h.idSeq.Add(1), 36)
}

// ready reports whether the engine can serve a request for model now (""
// for any model).
func (h *Handler) ready(ctx context.Context, model string) bool {
	if h.draining.Load() {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.ScrapeTimeout)
	defer cancel()
	switch {
	case h.cfg.Ready != nil:
		return h.cfg.Ready(ctx, model)
	case h.cfg.Signals != nil:
		s, err := h.cfg.Signals(ctx)
		return err == nil && s.DevicesHealthy > 0
	}
	return true
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 {
	return math.Round(float64(d)/1e3) / 1e3
}

// inferResponse is the answer to a completed request.
type inferResponse struct {
	ID        string  `json:"id"`
	Output    string  `json:"output"`
	Model     string  `json:"model"`
	Version   string  `json:"version"`
	LatencyMs float64 `json:"latency_ms"`
	QueueMs   float64 `json:"queue_ms"`
	ComputeMs float64 `json:"compute_ms"`
	BatchSize int     `json:"batch_size"`
	Attempts  int     `json:"attempts"`
}

func newInferResponse(id, model string, rep actors.Reply) *inferResponse {
	r := &inferResponse{
		ID:        id,
		Output:    rep.Output,
		Model:     model,
		Version:   rep.Version,
		BatchSize: rep.BatchSize,
		Attempts:  rep.Attempts,
	}
	if rep.Done > 0 {
		r.LatencyMs = millis(rep.Done - rep.Arrival)
	}
	if rep.Dispatch > 0 {
		r.QueueMs = millis(rep.Dispatch - rep.Arrival)
		if rep.Done > 0 {
			r.ComputeMs = millis(rep.Done - rep.Dispatch)
		}
	}
	return r
}
