package httpapi

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/jobs"
)

// JobStore is what the handler needs of the durable job store;
// *jobs.Runner implements it. Its methods must be safe for concurrent use.
type JobStore interface {
	// Submit stores a job (synced before it returns) and reports whether
	// it is new: a resubmission with a known idempotency key returns the
	// original (jobs.ErrConflict if its body differs).
	Submit(sp jobs.Spec) (jobs.Job, bool, error)
	// Items returns tenant's job and a page of its items (jobs.ErrNotFound
	// for another tenant's).
	Items(tenant, id string, offset, limit int) (jobs.Job, []jobs.Item, error)
	// Cancel cancels tenant's job; idempotent.
	Cancel(tenant, id string) (jobs.Job, error)
	// Begin opens a batch job written in parts as its body is read
	// (jobs.ErrBusy when too many are open).
	Begin(sp jobs.Spec) (*jobs.Submission, error)
}

// IdempotencyKeyHeader names the header that makes a submission
// idempotent per tenant.
const IdempotencyKeyHeader = "Idempotency-Key"

// itemsPageDefault is the items a status answer holds when the client
// names no limit.
const itemsPageDefault = 1_000

// codeConflict is a reused idempotency key with another body; codeFull a
// job store at its bounds.
const (
	codeConflict = "idempotency_conflict"
	codeFull     = "store_full"
)

// canonicalJob is what a job's body hash covers: the decoded request, so
// that spacing, key order and an absent field versus its default do not
// make a retry look like another request.
type canonicalJob struct {
	Kind      string   `json:"kind"`
	Model     string   `json:"model"`
	Version   string   `json:"version"`
	Params    string   `json:"params"`
	Priority  int8     `json:"priority"`
	TimeoutNs int64    `json:"timeout_ns"`
	Inputs    []string `json:"inputs"`
}

func bodyHash(c canonicalJob) string {
	b, err := json.Marshal(c)
	if err != nil {
		// Strings and numbers only: cannot fail.
		panic("httpapi: canonical job: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// submitJob stores a durable job and answers 202 with its id; a retry
// with the same Idempotency-Key answers the same, with
// Idempotent-Replayed: true.
func (h *Handler) submitJob(w http.ResponseWriter, r *http.Request, k *tenantKey, kind, model string, c common, inputs []string) {
	if h.draining.Load() {
		h.fail(w, r, &apiError{status: http.StatusServiceUnavailable, code: codeDraining, msg: "shutting down: not accepting jobs", retryAfter: h.cfg.RetryAfterDefault})
		return
	}
	// A job is patient: unless it says otherwise, its items run at low
	// priority, behind the synchronous requests that wait on a
	// connection (priority aging keeps them from starving).
	if !c.prioritySet {
		c.priority = actors.PriorityLow
	}
	key, aerr := idempotencyKey(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	sp := jobs.Spec{
		Kind: kind, Tenant: k.tenant, Model: model, Version: c.version, Params: c.params,
		Priority: c.priority, Timeout: c.timeout, IdempotencyKey: key, Inputs: inputs,
		BodyHash: bodyHash(canonicalJob{Kind: kind, Model: model, Version: c.version, Params: c.params,
			Priority: c.priority, TimeoutNs: int64(c.timeout), Inputs: inputs}),
	}
	j, created, err := h.jobs.Submit(sp)
	if err != nil {
		h.fail(w, r, h.jobError(err))
		return
	}
	h.accepted(w, r, kind, j, created)
}

// accepted answers 202 for job j (created, or found by its idempotency
// key).
func (h *Handler) accepted(w http.ResponseWriter, r *http.Request, kind string, j jobs.Job, created bool) {
	url := "/v1/requests/" + j.ID
	w.Header().Set("Location", url)
	if kind == jobs.KindInfer && preferAsync(r) {
		w.Header().Set("Preference-Applied", "respond-async")
	}
	if !created {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	h.writeJSON(w, r, http.StatusAccepted, acceptedJob{ID: j.ID, StatusURL: url, Status: string(j.Status()), Total: j.Counts.Total})
}

// idempotencyKey returns the request's Idempotency-Key, "" when it has
// none. A header sent empty is refused (400 bad_request) rather than taken
// as no key: the client meant its retries to be recognised, and they
// would each make a new job.
func idempotencyKey(r *http.Request) (string, *apiError) {
	vs := r.Header.Values(IdempotencyKeyHeader)
	switch {
	case len(vs) > 1:
		return "", badRequest("more than one %s header", IdempotencyKeyHeader)
	case len(vs) == 1 && vs[0] == "":
		return "", badRequest("%s header is empty: send a key of 1 to 256 printable characters, or no header", IdempotencyKeyHeader)
	case len(vs) == 1:
		// A copy: the job keeps it, and the fast lane's values share
		// their head's memory.
		return strings.Clone(vs[0]), nil
	}
	return "", nil
}

// acceptedJob is the 202 of a durable job.
type acceptedJob struct {
	ID        string `json:"id"`
	StatusURL string `json:"status_url"`
	Status    string `json:"status"`
	Total     int    `json:"total"`
}

// jobError maps the store's refusals.
func (h *Handler) jobError(err error) *apiError {
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return notFoundRequest()
	case errors.Is(err, jobs.ErrConflict):
		return &apiError{status: http.StatusConflict, code: codeConflict,
			msg: IdempotencyKeyHeader + " was already used with a different request; use a new key for a new request"}
	case errors.Is(err, jobs.ErrTooManyItems), errors.Is(err, jobs.ErrInvalid):
		return badRequest("%v", err)
	case errors.Is(err, jobs.ErrFull):
		return &apiError{status: http.StatusServiceUnavailable, code: codeFull, msg: err.Error(), retryAfter: h.cfg.RetryAfterDefault}
	case errors.Is(err, jobs.ErrBusy):
		return &apiError{status: http.StatusServiceUnavailable, code: codeOverloaded, msg: err.Error() + "; try again shortly", retryAfter: h.cfg.RetryAfterDefault}
	}
	h.log.Error("httpapi: job store", "err", err)
	return &apiError{status: http.StatusInternalServerError, code: codeInternal, msg: "job store: " + err.Error()}
}

func notFoundRequest() *apiError {
	return &apiError{status: http.StatusNotFound, code: codeNotFound, msg: "no such request (unknown, another tenant's, or no longer kept)"}
}

// progress is a job's items by outcome.
type progress struct {
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Expired   int `json:"expired"`
	Total     int `json:"total"`
}

// jobResponse is GET (and DELETE) /v1/requests/{id} for a durable job. An
// infer job carries its result inline, as the synchronous answer does; a
// batch carries a page of its items, in input order, once finished (or
// whenever offset or limit is given).
type jobResponse struct {
	ID       string    `json:"id"`
	Kind     string    `json:"kind"`
	Status   string    `json:"status"`
	Model    string    `json:"model"`
	Progress progress  `json:"progress"`
	Created  time.Time `json:"created"`
	Finished time.Time `json:"finished,omitzero"`
	*inferResponse
	Error      *errorBody          `json:"error,omitempty"`
	HTTPStatus int                 `json:"http_status,omitempty"`
	Offset     *int                `json:"offset,omitempty"`
	Items      []batchItemResponse `json:"items,omitempty"`
	// NextOffset is where the next page starts, when there is one.
	NextOffset *int `json:"next_offset,omitempty"`
}

// pageOf reads ?offset= and ?limit=; given reports whether either was.
func pageOf(r *http.Request) (offset, limit int, given bool, aerr *apiError) {
	q := r.URL.Query()
	offset, limit = 0, itemsPageDefault
	for _, f := range []struct {
		name string
		dst  *int
	}{{"offset", &offset}, {"limit", &limit}} {
		name, dst := f.name, f.dst
		v := q.Get(name)
		if v == "" {
			continue
		}
		given = true
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || (name == "limit" && n > jobs.ItemsPageMax) {
			return 0, 0, false, badRequest("%s %q: want a whole number (limit at most %d)", name, truncate(v), jobs.ItemsPageMax)
		}
		*dst = n
	}
	return offset, limit, given, nil
}

// jobStatus serves GET /v1/requests/{id} from the job store.
func (h *Handler) jobStatus(w http.ResponseWriter, r *http.Request, k *tenantKey) {
	offset, limit, paged, aerr := pageOf(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	id := r.PathValue("id")
	j, _, err := h.jobs.Items(k.tenant, id, 0, 0)
	if err != nil {
		h.fail(w, r, h.jobError(err))
		return
	}
	var items []jobs.Item
	if j.Kind == jobs.KindInfer {
		if j.Done() {
			if j, items, err = h.jobs.Items(k.tenant, id, 0, 1); err != nil {
				h.fail(w, r, h.jobError(err))
				return
			}
		}
	} else if j.Done() || paged {
		if j, items, err = h.jobs.Items(k.tenant, id, offset, limit); err != nil {
			h.fail(w, r, h.jobError(err))
			return
		}
	}
	h.writeJSON(w, r, http.StatusOK, newJobResponse(j, items, offset, j.Kind == jobs.KindBatch && (j.Done() || paged)))
}

// jobCancel serves DELETE /v1/requests/{id}.
func (h *Handler) jobCancel(w http.ResponseWriter, r *http.Request) {
	k, aerr := h.auth(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	if h.jobs == nil {
		h.fail(w, r, &apiError{status: http.StatusMethodNotAllowed, code: codeMethod, msg: "cancelling needs the durable job store, which this server does not have"})
		return
	}
	j, err := h.jobs.Cancel(k.tenant, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, h.jobError(err))
		return
	}
	h.writeJSON(w, r, http.StatusOK, newJobResponse(j, nil, 0, false))
}

func newJobResponse(j jobs.Job, items []jobs.Item, offset int, withItems bool) jobResponse {
	c := j.Counts
	resp := jobResponse{
		ID: j.ID, Kind: j.Kind, Status: string(j.Status()), Model: j.Model,
		Progress: progress{Completed: c.Completed, Failed: c.Failed, Cancelled: c.Cancelled, Expired: c.Expired, Total: c.Total},
		Created:  j.Created.UTC(),
	}
	if !j.Finished.IsZero() {
		resp.Finished = j.Finished.UTC()
	}
	if j.Kind == jobs.KindInfer {
		if len(items) == 1 && items[0].Status.Terminal() {
			it := items[0]
			if it.Status == jobs.Completed {
				resp.inferResponse = &inferResponse{
					ID: j.ID, Output: it.Output, Model: j.Model, Version: it.Version,
					LatencyMs: millis(it.Latency), QueueMs: millis(it.Queue), ComputeMs: millis(it.Compute),
					BatchSize: it.BatchSize, Attempts: it.Attempts,
				}
			} else if it.Error != nil {
				resp.Error = &errorBody{Code: it.Error.Code, Message: it.Error.Message}
				resp.HTTPStatus = it.Error.HTTPStatus
			}
		}
		return resp
	}
	if !withItems {
		return resp
	}
	resp.Offset = &offset
	resp.Items = make([]batchItemResponse, len(items))
	for i, it := range items {
		out := &resp.Items[i]
		out.Status, out.Attempts = string(it.Status), it.Attempts
		if it.Status == jobs.Completed {
			out.Output, out.Version = it.Output, it.Version
		} else if it.Error != nil && it.Status.Terminal() {
			out.Error = &errorBody{Code: it.Error.Code, Message: it.Error.Message}
			out.HTTPStatus = it.Error.HTTPStatus
		}
	}
	if next := offset + len(items); len(items) > 0 && next < c.Total {
		resp.NextOffset = &next
	}
	return resp
}

// streamAboveBytes: a /v1 batch known to be a job is written to the store
// in parts once its inputs pass this size; a smaller one is submitted
// whole, without taking one of the store's StreamsMax places.
const streamAboveBytes = 1 << 20

// errBodyUTF8 is utf8Reader's refusal.
var errBodyUTF8 = errors.New("body is not valid UTF-8")

// utf8Reader passes r's bytes on, failing with errBodyUTF8 at the first
// invalid UTF-8: a streamed body is never whole in memory for
// utf8.Valid, and encoding/json would quietly replace invalid bytes with
// U+FFFD. A rune cut between two reads is held over and checked whole.
type utf8Reader struct {
	r io.Reader
	// carry holds the start of a rune the last read cut, nc its length.
	carry [utf8.UTFMax]byte
	nc    int
}

func (u *utf8Reader) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	b := p[:n]
	for u.nc > 0 && len(b) > 0 {
		u.carry[u.nc] = b[0]
		u.nc++
		b = b[1:]
		if utf8.FullRune(u.carry[:u.nc]) {
			if !utf8.Valid(u.carry[:u.nc]) {
				return 0, errBodyUTF8
			}
			u.nc = 0
		}
	}
	// A rune cut at the end waits for the next read.
	cut := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	if !utf8.Valid(b[:cut]) {
		return 0, errBodyUTF8
	}
	u.nc += copy(u.carry[u.nc:], b[cut:])
	if errors.Is(err, io.EOF) && u.nc > 0 {
		return 0, errBodyUTF8
	}
	return n, err
}

// batchStream is a /v1 batch body being read by decodeBatchStream.
type batchStream struct {
	h      *Handler
	r      *http.Request
	k      *tenantKey
	model  string
	lim    limits
	dec    *json.Decoder
	async  bool
	inputs []string
	// held is the bytes of inputs; n counts every item read.
	held int
	n    int
	// sum hashes the inputs, each length-prefixed, for the body hash.
	sum interface {
		io.Writer
		Sum([]byte) []byte
	}
	sub *jobs.Submission
}

// v1BatchJobs is v1Batch on a server with a job store. The body is read
// as a stream of JSON tokens: a batch that is a job (async, or more than
// BatchAsyncAbove items) goes to the store in parts as it is read, so its
// size in memory is one part, not the body several times over. Only
// StreamsMax such batches are read at once; one more is 503 at once. A
// batch that is not a job is returned (handled false) for v1Batch to run.
func (h *Handler) v1BatchJobs(w http.ResponseWriter, r *http.Request, k *tenantKey, mi *modelInfo, model string) (in batchReq, handled bool) {
	lim := h.limitsFor(mi)
	lim.itemsMax = max(lim.itemsMax, h.cfg.JobItemsMax)
	bodyMax := max(h.cfg.BodyMaxBytes, h.cfg.JobBodyMaxBytes)
	var src io.Reader = http.MaxBytesReader(w, r.Body, bodyMax)
	if enc, _ := contentEncoding(r.Header); enc != "" {
		src = decompress(enc, src, bodyMax) // bounded once decompressed too
	}
	bs := &batchStream{h: h, r: r, k: k, model: model, lim: lim, async: preferAsync(r), sum: sha256.New(),
		dec: json.NewDecoder(&utf8Reader{r: src})}
	defer func() {
		if bs.sub != nil {
			bs.sub.Abort() // no-op once committed
		}
	}()
	var aerr *apiError
	in, aerr = bs.decode()
	if aerr == nil {
		aerr = mi.checkVersion(in.version)
	}
	if aerr != nil {
		// The rest of the body may be unread: the connection goes.
		w.Header().Set("Connection", "close")
		h.fail(w, r, aerr)
		return in, true
	}
	// As readBodyMax does: net/http watches the connection for the client
	// going away only once the deadline is cleared.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if !(in.async || bs.async || bs.n > min(h.cfg.BatchAsyncAbove, h.cfg.BatchItemsMax)) {
		return in, false
	}
	if bs.sub == nil {
		h.submitJob(w, r, k, jobs.KindBatch, model, in.common, in.inputs)
		return in, true
	}
	if h.draining.Load() {
		h.fail(w, r, &apiError{status: http.StatusServiceUnavailable, code: codeDraining, msg: "shutting down: not accepting jobs", retryAfter: h.cfg.RetryAfterDefault})
		return in, true
	}
	c := in.common
	if !c.prioritySet {
		c.priority = actors.PriorityLow
	}
	key, aerr := idempotencyKey(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return in, true
	}
	j, created, err := bs.sub.Commit(jobs.Spec{
		Version: c.version, Params: c.params, Priority: c.priority, Timeout: c.timeout, IdempotencyKey: key,
		BodyHash: batchHash(c, model, bs.sum.Sum(nil)),
	})
	if err != nil {
		h.fail(w, r, h.jobError(err))
		return in, true
	}
	h.accepted(w, r, jobs.KindBatch, j, created)
	return in, true
}

// batchHash is the body hash of a batch written in parts: the canonical
// request without its inputs, then the hash of the inputs. The same
// request hashes the same however it is sent (and is a different request
// from an infer of the same input).
func batchHash(c common, model string, inputsSum []byte) string {
	head, err := json.Marshal(canonicalJob{Kind: jobs.KindBatch, Model: model, Version: c.version, Params: c.params,
		Priority: c.priority, TimeoutNs: int64(c.timeout)})
	if err != nil {
		panic("httpapi: canonical job: " + err.Error())
	}
	sum := sha256.Sum256(append(head, inputsSum...))
	return hex.EncodeToString(sum[:])
}

// batchKeys are the keys of a /v1 batch body (batchBody's).
var batchKeys = []string{"version", "priority", "timeout_ms", "params", "async", "items"}

// decode reads the body to its end.
func (bs *batchStream) decode() (batchReq, *apiError) {
	var b commonBody
	var in batchReq
	if aerr := bs.delim('{', "the body must be a JSON object"); aerr != nil {
		return in, aerr
	}
	seen := map[string]bool{}
	for bs.dec.More() {
		tok, err := bs.dec.Token()
		if err != nil {
			return in, bs.readError(err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return in, badRequest("key %q given twice", truncate(key))
		}
		seen[key] = true
		var dst any
		switch key {
		case "version":
			dst = &b.Version
		case "priority":
			dst = &b.Priority
		case "timeout_ms":
			dst = &b.TimeoutMs
		case "params":
			dst = &b.Params
		case "async":
			dst = &in.async
		case "items":
			if aerr := bs.items(&in); aerr != nil {
				return in, aerr
			}
			continue
		default:
			for _, name := range batchKeys {
				if strings.EqualFold(key, name) {
					return in, badRequest("key %q: keys are case-sensitive; did you mean %q?", truncate(key), name)
				}
			}
			return in, badRequest("bad JSON: json: unknown field %q", truncate(key))
		}
		if err := bs.dec.Decode(dst); err != nil {
			return in, bs.readError(err)
		}
		if in.async {
			bs.async = true
		}
	}
	if aerr := bs.delim('}', "the body must be one JSON object"); aerr != nil {
		return in, aerr
	}
	if _, err := bs.dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil && !isSyntax(err) {
			return in, bs.readError(err)
		}
		return in, badRequest("bad JSON: more than one value")
	}
	c, aerr := b.decode(bs.lim)
	if aerr != nil {
		return in, aerr
	}
	if bs.n == 0 {
		return in, badRequest("items: 0, want 1 to %d", bs.lim.itemsMax)
	}
	in.common, in.inputs = c, bs.inputs
	return in, nil
}

func isSyntax(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}

// delim reads the delimiter want, or refuses the body with msg.
func (bs *batchStream) delim(want json.Delim, msg string) *apiError {
	tok, err := bs.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return badRequest("empty body")
		}
		return bs.readError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return badRequest("bad JSON: %s", msg)
	}
	return nil
}

// items reads the items array, each {"input": "..."}, checking each as it
// comes, and hands them to the store in parts once the batch is known to
// be a job and large.
func (bs *batchStream) items(in *batchReq) *apiError {
	tok, err := bs.dec.Token()
	if err != nil {
		return bs.readError(err)
	}
	if tok == nil {
		return nil // null: no items
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return badRequest("bad JSON: items must be an array")
	}
	for bs.dec.More() {
		what := fmt.Sprintf("items[%d]", bs.n)
		input, aerr := bs.item(what)
		if aerr != nil {
			return aerr
		}
		if bs.n >= bs.lim.itemsMax {
			return badRequest("items: more than %d, want 1 to %d", bs.lim.itemsMax, bs.lim.itemsMax)
		}
		if aerr := checkInput(input, bs.lim, what); aerr != nil {
			return aerr
		}
		bs.n++
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(*input)))
		_, _ = bs.sum.Write(n[:])
		_, _ = io.WriteString(bs.sum, *input)
		if aerr := bs.keep(*input, in); aerr != nil {
			return aerr
		}
	}
	return bs.delim(']', "items must be an array")
}

// item reads one {"input": "..."}; a missing or null input is nil.
func (bs *batchStream) item(what string) (*string, *apiError) {
	if aerr := bs.delim('{', what+" must be an object"); aerr != nil {
		return nil, aerr
	}
	var input *string
	seen := false
	for bs.dec.More() {
		tok, err := bs.dec.Token()
		if err != nil {
			return nil, bs.readError(err)
		}
		key, _ := tok.(string)
		switch {
		case key == "input" && seen:
			return nil, badRequest("key %q given twice", key)
		case key == "input":
			seen = true
		case strings.EqualFold(key, "input"):
			return nil, badRequest("key %q: keys are case-sensitive; did you mean %q?", truncate(key), "input")
		default:
			return nil, badRequest("bad JSON: json: unknown field %q", truncate(key))
		}
		if err := bs.dec.Decode(&input); err != nil {
			return nil, bs.readError(err)
		}
	}
	return input, bs.delim('}', what+" must be an object")
}

// keep holds an input, or writes it to the store: once the batch is known
// to be a job and its inputs pass streamAboveBytes, a submission in parts
// starts with what is held.
func (bs *batchStream) keep(input string, in *batchReq) *apiError {
	if in.async {
		bs.async = true
	}
	h := bs.h
	if bs.sub == nil {
		bs.inputs = append(bs.inputs, input)
		bs.held += len(input)
		job := bs.async || bs.n > min(h.cfg.BatchAsyncAbove, h.cfg.BatchItemsMax)
		if !job || bs.held < streamAboveBytes {
			return nil
		}
		if h.draining.Load() {
			return &apiError{status: http.StatusServiceUnavailable, code: codeDraining, msg: "shutting down: not accepting jobs", retryAfter: h.cfg.RetryAfterDefault}
		}
		sub, err := h.jobs.Begin(jobs.Spec{Kind: jobs.KindBatch, Tenant: bs.k.tenant, Model: bs.model})
		if err != nil {
			return h.jobError(err)
		}
		bs.sub = sub
		for _, held := range bs.inputs {
			if err := sub.Add(held); err != nil {
				return h.jobError(err)
			}
		}
		clear(bs.inputs)
		bs.inputs, bs.held = nil, 0
		return nil
	}
	if err := bs.sub.Add(input); err != nil {
		return h.jobError(err)
	}
	return nil
}

// readError words a failure to read or parse the body.
func (bs *batchStream) readError(err error) *apiError {
	var tooBig *http.MaxBytesError
	var netErr net.Error
	var bad *decompressError
	switch {
	case errors.As(err, &bad):
		return badRequest("%v", bad)
	case errors.Is(err, errBodyUTF8):
		return badRequest("body is not valid UTF-8")
	case errors.As(err, &tooBig):
		return &apiError{status: http.StatusRequestEntityTooLarge, code: codeTooLarge, msg: fmt.Sprintf("body over %d bytes", tooBig.Limit)}
	case errors.As(err, &netErr) && netErr.Timeout():
		return &apiError{status: http.StatusRequestTimeout, code: codeTimeout, msg: "body not received in time"}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("bad JSON: unexpected end of JSON input")
	}
	return badRequest("bad JSON: %v", err)
}
