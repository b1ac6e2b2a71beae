package httpapi

import (
	"net/http"
	"strconv"

	"github.com/batchd/batchd/actors"
)

// The Open Inference Protocol (KServe v2) REST endpoints, as Triton and
// KServe clients call them. batchd serves each model as one BYTES input
// tensor "input" and one BYTES output tensor "output", element by element:
// every element of the input is one request in the batcher.

// v2Error is the OIP error body.
type v2Error struct {
	Error string `json:"error"`
}

type v2TensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

type v2ModelMeta struct {
	Name     string         `json:"name"`
	Versions []string       `json:"versions"`
	Platform string         `json:"platform"`
	Inputs   []v2TensorMeta `json:"inputs"`
	Outputs  []v2TensorMeta `json:"outputs"`
}

type v2Tensor struct {
	Name     string   `json:"name"`
	Datatype string   `json:"datatype"`
	Shape    []int64  `json:"shape"`
	Data     []string `json:"data"`
}

type v2InferResponse struct {
	ModelName    string     `json:"model_name"`
	ModelVersion string     `json:"model_version"`
	ID           *string    `json:"id,omitempty"`
	Outputs      []v2Tensor `json:"outputs"`
}

// v2Server serves GET /v2, the server metadata.
func (h *Handler) v2Server(w http.ResponseWriter, r *http.Request) {
	h.writeJSON(w, r, http.StatusOK, struct {
		Name       string   `json:"name"`
		Version    string   `json:"version"`
		Extensions []string `json:"extensions"`
	}{"batchd", "1", []string{}})
}

// v2Live serves GET /v2/health/live: the process answers, so it is live.
func (h *Handler) v2Live(w http.ResponseWriter, r *http.Request) {
	h.writeJSON(w, r, http.StatusOK, struct {
		Live bool `json:"live"`
	}{true})
}

// v2Ready serves GET /v2/health/ready: 200 while the engine can serve (see
// Config.Ready), else 503. The protocol only asks for a non-200; 503 is
// what load balancers and Kubernetes probes read as "not now".
func (h *Handler) v2Ready(w http.ResponseWriter, r *http.Request) {
	ready := h.ready(r.Context(), "")
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	h.writeJSON(w, r, status, struct {
		Ready bool `json:"ready"`
	}{ready})
}

// v2Model authenticates and resolves the model and version of an OIP
// model route.
func (h *Handler) v2Model(r *http.Request) (*tenantKey, *modelInfo, string, string, *apiError) {
	k, mi, model, aerr := h.admit(r)
	if aerr != nil {
		return nil, nil, "", "", aerr
	}
	version := r.PathValue("version")
	if aerr := mi.checkVersion(version); aerr != nil {
		return nil, nil, "", "", aerr
	}
	return k, mi, model, version, nil
}

// v2Metadata serves GET /v2/models/{model}[/versions/{version}]. Without a
// registry any model exists, with the version asked for, or none listed.
func (h *Handler) v2Metadata(w http.ResponseWriter, r *http.Request) {
	_, mi, model, version, aerr := h.v2Model(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	meta := v2ModelMeta{
		Name:     model,
		Versions: []string{},
		Platform: "batchd",
		Inputs:   []v2TensorMeta{{Name: "input", Datatype: "BYTES", Shape: []int64{-1}}},
		Outputs:  []v2TensorMeta{{Name: "output", Datatype: "BYTES", Shape: []int64{-1}}},
	}
	switch {
	case mi != nil:
		for _, v := range mi.cfg.Versions {
			meta.Versions = append(meta.Versions, v.Name)
		}
	case version != "":
		meta.Versions = append(meta.Versions, version)
	}
	h.writeJSON(w, r, http.StatusOK, meta)
}

// v2ModelReady serves GET /v2/models/{model}[/versions/{version}]/ready: a
// known model is ready when the engine can serve a request for it now
// (Config.Ready asked with its name).
func (h *Handler) v2ModelReady(w http.ResponseWriter, r *http.Request) {
	_, _, model, _, aerr := h.v2Model(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	ready := h.ready(r.Context(), model)
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	h.writeJSON(w, r, status, struct {
		Name  string `json:"name"`
		Ready bool   `json:"ready"`
	}{model, ready})
}

// v2Infer serves POST /v2/models/{model}[/versions/{version}]/infer. All
// elements run on one version (the one in the path, or one drawn by the
// routing weights), so the output tensor has one model_version. The
// protocol has no per-element errors: if any element fails, the request
// fails with the first failed element's status and message.
func (h *Handler) v2Infer(w http.ResponseWriter, r *http.Request) {
	start := h.eng.Now()
	k, mi, model, version, aerr := h.v2Model(r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	body, aerr := h.readBody(w, r)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	in, aerr := decodeV2(body, h.limitsFor(mi))
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	if version == "" && mi != nil {
		version = mi.pick()
	}
	c := common{version: version}
	reqs := make([]actors.Request, len(in.inputs))
	for i, input := range in.inputs {
		reqs[i] = request(k, model, c, input, start)
	}
	results := h.fanOut(r.Context(), reqs, start)
	out := v2Tensor{Name: "output", Datatype: "BYTES", Shape: []int64{int64(len(results))}, Data: make([]string, len(results))}
	for i, res := range results {
		if res.err != nil {
			e := *res.err
			e.msg = "data[" + strconv.Itoa(i) + "]: " + e.msg
			h.fail(w, r, &e)
			return
		}
		out.Data[i] = res.rep.Output
	}
	h.writeJSON(w, r, http.StatusOK, v2InferResponse{
		ModelName:    model,
		ModelVersion: results[0].rep.Version,
		ID:           in.id,
		Outputs:      []v2Tensor{out},
	})
}
