package httpapi

import (
	"context"
	"crypto/rand"
	"net/http"
	"strings"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/jobs"
)

// v1Infer serves POST /v1/models/{model}/infer, synchronous or async.
func (h *Handler) v1Infer(w http.ResponseWriter, r *http.Request) {
	start := h.eng.Now()
	k, mi, model, aerr := h.admit(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	body, aerr := h.readBody(w, r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	in, aerr := decodeInfer(body, h.limitsFor(mi))
	if aerr == nil {
		aerr = mi.checkVersion(in.version)
	}
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	if (in.async || preferAsync(r)) && h.jobs != nil {
		h.submitJob(w, r, k, jobs.KindInfer, model, in.common, []string{in.input})
		return
	}
	req := request(k, model, in.common, in.input, start)
	if in.async || preferAsync(r) {
		h.submitAsync(w, r, req, start)
		return
	}
	// r.Context() ends when the client goes away: Do then withdraws the
	// queued request from the batcher. Do itself is bounded by the
	// request's deadline (see Handler).
	rep, aerr := h.do(r.Context(), req, start)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	h.writeJSON(w, r, http.StatusOK, newInferResponse(h.nextID(), model, rep))
}

// admit authenticates a request and checks its path's model.
func (h *Handler) admit(r *http.Request) (*tenantKey, *modelInfo, string, *apiError) {
	k, aerr := h.auth(r)
	if aerr != nil {
		return nil, nil, "", aerr
	}
	model := r.PathValue("model")
	mi, aerr := h.model(k, model)
	if aerr != nil {
		return nil, nil, "", aerr
	}
	return k, mi, model, nil
}

// preferAsync reports whether the request asks for an async answer with
// "Prefer: respond-async" (RFC 7240).
func preferAsync(r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(v, ",") {
			token, _, _ := strings.Cut(pref, ";")
			if strings.EqualFold(strings.TrimSpace(token), "respond-async") {
				return true
			}
		}
	}
	return false
}

// acceptedResponse is the 202 of an async request.
type acceptedResponse struct {
	ID        string `json:"id"`
	StatusURL string `json:"status_url"`
}

// submitAsync starts an async request on a goroutine of its own, tracked
// by the async store and bounded by AsyncInFlightMax, and answers 202.
func (h *Handler) submitAsync(w http.ResponseWriter, r *http.Request, req actors.Request, start time.Duration) {
	// The id is the only thing that guards a result from another client
	// of the same tenant, so it is unguessable: 128 random bits.
	id := rand.Text()
	// Not the request's context: the client leaves after the 202. cctx is
	// cancelled only by Shutdown.
	cctx, cancelAll := context.WithCancel(context.Background())
	e := &asyncEntry{id: id, tenant: req.Tenant, model: req.Model, cancel: cancelAll}
	if aerr := h.async.add(e, h.eng.Now()); aerr != nil {
		cancelAll()
		refusal := *aerr
		refusal.status, refusal.retryAfter = http.StatusServiceUnavailable, h.cfg.RetryAfterDefault
		h.fail(w, r, &refusal)
		return
	}
	go func() {
		defer h.async.wg.Done()
		defer cancelAll()
		h.async.start(id)
		rep, aerr := h.do(cctx, req, start)
		var res *inferResponse
		status := statusCompleted
		if aerr == nil {
			res = newInferResponse(id, req.Model, rep)
		} else {
			status = asyncStatus(outcomeOf(rep, aerr))
		}
		h.async.finish(id, status, res, aerr, h.eng.Now())
	}()
	url := "/v1/requests/" + id
	w.Header().Set("Location", url)
	w.Header().Set("Preference-Applied", "respond-async")
	h.writeJSON(w, r, http.StatusAccepted, acceptedResponse{ID: id, StatusURL: url})
}

// asyncStatus maps an outcome to the status an async request reports. A
// rejection is "failed": the request was accepted (202) and then could not
// be served; its error says why, with the retry hint.
func asyncStatus(outcome string) string {
	switch outcome {
	case actors.Expired.String():
		return statusExpired
	case actors.Cancelled.String():
		return statusCancelled
	case actors.Completed.String():
		return statusCompleted
	}
	return statusFailed
}

// statusResponse is GET /v1/requests/{id}: the status, and once finished
// the result of a completed request (its fields inline, as in the
// synchronous answer) or the error and the status code a synchronous call
// would have had.
type statusResponse struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Model  string `json:"model"`
	*inferResponse
	Error      *errorBody `json:"error,omitempty"`
	HTTPStatus int        `json:"http_status,omitempty"`
}

// v1Status serves GET /v1/requests/{id}. A request of another tenant, or
// one no longer kept, is 404: a 403 would confirm that the id exists.
func (h *Handler) v1Status(w http.ResponseWriter, r *http.Request) {
	k, aerr := h.auth(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	if h.jobs != nil {
		h.jobStatus(w, r, k)
		return
	}
	e, ok := h.async.get(r.PathValue("id"), k.tenant, h.eng.Now())
	if !ok {
		h.fail(w, r, notFoundRequest())
		return
	}
	resp := statusResponse{ID: e.id, Status: e.status, Model: e.model, inferResponse: e.result}
	if e.err != nil {
		resp.Error, resp.HTTPStatus = e.err.body(), e.err.status
	}
	h.writeJSON(w, r, http.StatusOK, resp)
}

// batchItemResponse is one item of a /v1 batch answer. Status is the
// item's outcome: completed, failed, rejected, expired or cancelled.
type batchItemResponse struct {
	Status  string     `json:"status"`
	Output  string     `json:"output,omitempty"`
	Version string     `json:"version,omitempty"`
	Error   *errorBody `json:"error,omitempty"`
	// HTTPStatus is the code the item would have had on its own, for a
	// failed item.
	HTTPStatus int `json:"http_status,omitempty"`
	// Attempts is the runs a durable job's item took, interrupted ones
	// included (absent in a synchronous batch).
	Attempts int `json:"attempts,omitempty"`
}

type batchResponse struct {
	Items []batchItemResponse `json:"items"`
}

// v1Batch serves POST /v1/models/{model}/batch: every item is one engine
// request, all submitted together, answered in input order with a status
// each. The request itself is 200 once it is valid, whatever its items'
// fates.
func (h *Handler) v1Batch(w http.ResponseWriter, r *http.Request) {
	start := h.eng.Now()
	k, mi, model, aerr := h.admit(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	var in batchReq
	if h.jobs != nil {
		// Read as a stream: a job goes to the store as it is read
		// (jobs.go).
		var handled bool
		if in, handled = h.v1BatchJobs(w, r, k, mi, model); handled {
			return
		}
	} else {
		body, aerr := h.readBody(w, r)
		if aerr != nil {
			h.fail(w, r, aerr)
			return
		}
		if in, aerr = decodeBatch(body, h.limitsFor(mi)); aerr == nil {
			aerr = mi.checkVersion(in.version)
		}
		if aerr != nil {
			h.fail(w, r, aerr)
			return
		}
		if in.async || preferAsync(r) {
			h.fail(w, r, badRequest("async batches need the durable job store, which this server does not have"))
			return
		}
	}
	reqs := make([]actors.Request, len(in.inputs))
	for i, input := range in.inputs {
		reqs[i] = request(k, model, in.common, input, start)
	}
	results := h.fanOut(r.Context(), reqs, start)
	if r.Context().Err() != nil {
		h.fail(w, r, &apiError{status: statusClientClosed, code: codeCancelled, msg: "client went away"})
		return
	}
	resp := batchResponse{Items: make([]batchItemResponse, len(results))}
	for i, res := range results {
		it := &resp.Items[i]
		it.Status = outcomeOf(res.rep, res.err)
		if res.err == nil {
			it.Output, it.Version = res.rep.Output, res.rep.Version
			continue
		}
		it.Error, it.HTTPStatus = res.err.body(), res.err.status
	}
	h.writeJSON(w, r, http.StatusOK, resp)
}
