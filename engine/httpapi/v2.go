package httpapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

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

// v2Tensor is a response's output tensor: its data in JSON, or, as
// binary tensor data, its size in parameters and its bytes after the
// JSON.
type v2Tensor struct {
	Name       string          `json:"name"`
	Datatype   string          `json:"datatype"`
	Shape      []int64         `json:"shape"`
	Parameters *v2OutputParams `json:"parameters,omitempty"`
	Data       []string        `json:"data,omitempty"`
}

type v2OutputParams struct {
	BinaryDataSize int64 `json:"binary_data_size"`
}

// The binary tensor data extension's header: the length of the JSON that
// begins a body which binary tensor data follows.
const headerInferLen = "Inference-Header-Content-Length"

// contentTypeBinary is a binary tensor data reply's Content-Type.
var contentTypeBinary = []string{"application/octet-stream"}

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
	}{"batchd", "1", []string{"binary_tensor_data"}})
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
	version := pathValue(r, "version")
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
	header, bin, hasBinary, aerr := splitInferBody(r.Header, body)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	in, aerr := decodeV2Binary(header, bin, hasBinary, h.limitsFor(mi))
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	results, aerr := h.runV2(w, r, k, mi, model, common{version: version}, in.inputs, start)
	if aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	resp := v2InferResponse{
		ModelName:    model,
		ModelVersion: results[0].rep.Version,
		ID:           in.id,
		Outputs:      []v2Tensor{{Name: v2OutputName, Datatype: "BYTES", Shape: []int64{int64(len(results))}}},
	}
	if in.binaryOut {
		h.writeV2Binary(w, r, &resp, results)
		return
	}
	resp.Outputs[0].Data = make([]string, len(results))
	for i, res := range results {
		resp.Outputs[0].Data[i] = res.rep.Output
	}
	h.writeJSON(w, r, http.StatusOK, resp)
}

// runV2 runs the elements of an OIP input tensor through the engine
// together, on one version (c's, or one drawn by the routing weights),
// and returns their results in order, or the first failed element's
// error.
func (h *Handler) runV2(w http.ResponseWriter, r *http.Request, k *tenantKey, mi *modelInfo, model string, c common, inputs []string, start time.Duration) ([]doResult, *apiError) {
	results := h.runFor(w, r, v2Requests(nil, k, mi, model, c, inputs, start), start)
	if aerr := v2Failure(results); aerr != nil {
		return nil, aerr
	}
	return results, nil
}

// v2Requests makes the engine requests of an OIP input tensor's
// elements, all on one version: c's, or one drawn by the routing
// weights. They are appended to dst (a caller's array for one element,
// or nil).
func v2Requests(dst []actors.Request, k *tenantKey, mi *modelInfo, model string, c common, inputs []string, start time.Duration) []actors.Request {
	if c.version == "" && mi != nil {
		c.version = mi.pick()
	}
	reqs := slices.Grow(dst[:0], len(inputs))
	for _, input := range inputs {
		reqs = append(reqs, request(k, model, c, input, start))
	}
	return reqs
}

// v2Failure is the first failed element's error, naming the element, or
// nil.
func v2Failure(results []doResult) *apiError {
	for i, res := range results {
		if res.err != nil {
			e := *res.err
			e.msg = "data[" + strconv.Itoa(i) + "]: " + e.msg
			return &e
		}
	}
	return nil
}

// splitInferBody splits an OIP infer body at its
// Inference-Header-Content-Length, if it has one (hasBinary): the JSON
// header, then the binary tensor data. Without the header the body is
// JSON alone.
func splitInferBody(hdr http.Header, body []byte) (header, bin []byte, hasBinary bool, aerr *apiError) {
	vals := hdr[headerInferLen]
	if len(vals) == 0 {
		return body, nil, false, nil
	}
	if len(vals) > 1 {
		return nil, nil, false, badRequest("more than one %s header", headerInferLen)
	}
	v := strings.TrimSpace(vals[0])
	n, err := strconv.ParseUint(v, 10, 63)
	if err != nil {
		return nil, nil, false, badRequest("%s %q: want the length of the body's JSON header, in bytes", headerInferLen, truncate(vals[0]))
	}
	if n == 0 || n > uint64(len(body)) {
		return nil, nil, false, badRequest("%s %d: the JSON header must be 1 to %d bytes, the length of the body", headerInferLen, n, len(body))
	}
	return body[:n], body[n:], true, nil
}

// writeV2Binary writes an infer reply with its output as binary tensor
// data: the JSON header, with the output's binary_data_size in its
// parameters and no data, then the output's elements, each a 4-byte
// little-endian length and its bytes; Inference-Header-Content-Length is
// the JSON's length (no newline after it: the bytes follow at once).
func (h *Handler) writeV2Binary(w http.ResponseWriter, r *http.Request, resp *v2InferResponse, results []doResult) {
	size := 0
	for _, res := range results {
		if uint64(len(res.rep.Output)) > math.MaxUint32 {
			h.fail(w, r, &apiError{status: http.StatusInternalServerError, code: codeInternal, msg: "an output of 4 GiB or more has no binary length"})
			return
		}
		size += 4 + len(res.rep.Output)
	}
	resp.Outputs[0].Parameters = &v2OutputParams{BinaryDataSize: int64(size)}
	buf := encodeBuffers.Get().(*bytes.Buffer)
	defer putEncodeBuffer(buf)
	buf.Reset()
	if err := json.NewEncoder(buf).Encode(resp); err != nil {
		// Only strings and numbers: a bug.
		h.log.Error("httpapi: encode response", "err", err)
		h.fail(w, r, &apiError{status: http.StatusInternalServerError, code: codeInternal, msg: "encoding the response failed"})
		return
	}
	buf.Truncate(buf.Len() - 1) // the Encoder's newline
	headerLen := buf.Len()
	buf.Grow(size)
	for _, res := range results {
		buf.Write(binary.LittleEndian.AppendUint32(buf.AvailableBuffer(), uint32(len(res.rep.Output))))
		buf.WriteString(res.rep.Output)
	}
	hdr := w.Header()
	hdr["Content-Type"] = contentTypeBinary
	hdr.Set(headerInferLen, strconv.Itoa(headerLen))
	hdr.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
	h.met.Response(r.Pattern, http.StatusOK)
}
