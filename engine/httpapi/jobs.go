package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
		return vs[0], nil
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

// jobStats is what /metrics reads of the job runner, when Config.Jobs has
// it (*jobs.Runner does).
type jobStats interface {
	Stats() jobs.Stats
}

// registerJobMetrics exports the runner's counters, read at scrape time:
//
//	batchd_job_items_total{outcome}   items the runner wrote finished (completed, failed,
//	                                  cancelled, expired; queued items a DELETE cancels
//	                                  in the store are not counted)
//	batchd_job_item_retries_total     runs refused for load or past the SLO, queued again
//	batchd_job_items_held             items in the engine or waiting to retry now
//	batchd_jobs_active                unfinished jobs the runner tracks
func registerJobMetrics(reg *prometheus.Registry, js jobStats) {
	for _, o := range []struct {
		outcome string
		get     func(jobs.Stats) uint64
	}{
		{"completed", func(s jobs.Stats) uint64 { return s.Completed }},
		{"failed", func(s jobs.Stats) uint64 { return s.Failed }},
		{"cancelled", func(s jobs.Stats) uint64 { return s.Cancelled }},
		{"expired", func(s jobs.Stats) uint64 { return s.Expired }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "batchd_job_items_total",
			Help:        "Durable job items the runner wrote finished, by outcome.",
			ConstLabels: prometheus.Labels{"outcome": o.outcome},
		}, func() float64 { return float64(o.get(js.Stats())) }))
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "batchd_job_item_retries_total",
			Help: "Durable job item runs refused for load or past the SLO, queued to run again.",
		}, func() float64 { return float64(js.Stats().Retries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "batchd_job_items_held",
			Help: "Durable job items in the engine or waiting to retry.",
		}, func() float64 { return float64(js.Stats().Held) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "batchd_jobs_active",
			Help: "Unfinished durable jobs the runner tracks.",
		}, func() float64 { return float64(js.Stats().Jobs) }),
	)
}
