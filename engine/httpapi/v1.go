package httpapi

import (
	"net/http"
	"strings"

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
	if in.async || preferAsync(r) {
		if h.jobs == nil {
			h.fail(w, r, badRequest("async requests need the durable job store, which this server does not have"))
			return
		}
		h.submitJob(w, r, k, jobs.KindInfer, model, in.common, []string{in.input})
		return
	}
	req := request(k, model, in.common, in.input, start)
	// r.Context() ends when the client goes away (or the lane's Await
	// sees it go): Do then withdraws the queued request from the
	// batcher. Do itself is bounded by the request's deadline (see
	// Handler).
	rep, aerr := h.doFor(w, r, req, start)
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
	model := pathValue(r, "model")
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

// v1Status serves GET /v1/requests/{id}: the status of a durable job. A
// job of another tenant, one no longer kept, or any id on a server without
// a job store is 404: a 403 would confirm that the id exists.
func (h *Handler) v1Status(w http.ResponseWriter, r *http.Request) {
	k, aerr := h.auth(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	if h.jobs == nil {
		h.fail(w, r, notFoundRequest())
		return
	}
	h.jobStatus(w, r, k)
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
