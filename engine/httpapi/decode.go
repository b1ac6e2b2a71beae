package httpapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/httpapi/strictjson"
)

// limits are what the decoders check, from Config.
type limits struct {
	inputMaxBytes int
	itemsMax      int
	timeoutMax    time.Duration
}

// common holds the fields shared by /v1 infer and batch bodies, decoded.
type common struct {
	version  string
	priority int8
	// prioritySet: the body named a priority (a durable job's items
	// default to low instead of normal).
	prioritySet bool
	// timeout is the request's own, capped at TimeoutMax; zero when it
	// set none (the batcher's SLO applies).
	timeout time.Duration
	params  string
}

// inferReq is a decoded /v1 infer body.
type inferReq struct {
	common
	input string
	async bool
}

// batchReq is a decoded /v1 batch body.
type batchReq struct {
	common
	inputs []string
	async  bool
}

// v2Req is a decoded OIP infer body.
type v2Req struct {
	id     *string
	inputs []string
	// binaryOut: the reply's output goes as binary tensor data (the
	// request's binary_data_output, or its output's binary_data).
	binaryOut bool
}

type commonBody struct {
	Version   string          `json:"version"`
	Priority  string          `json:"priority"`
	TimeoutMs *int64          `json:"timeout_ms"`
	Params    json.RawMessage `json:"params"`
}

type inferBody struct {
	commonBody
	Input *string `json:"input"`
	Async bool    `json:"async"`
}

type batchBody struct {
	commonBody
	Async bool `json:"async"`
	Items []struct {
		Input *string `json:"input"`
	} `json:"items"`
}

// v2Body is an OIP infer body (the JSON header, with the binary tensor
// data extension). Of the "parameters" objects, only the extension's are
// read; the others' keys are ignored.
type v2Body struct {
	ID         *string `json:"id"`
	Parameters *struct {
		BinaryDataOutput *bool `json:"binary_data_output"`
	} `json:"parameters"`
	Inputs []struct {
		Name       string          `json:"name"`
		Shape      []int64         `json:"shape"`
		Datatype   string          `json:"datatype"`
		Data       json.RawMessage `json:"data"`
		Parameters *struct {
			BinaryDataSize *int64 `json:"binary_data_size"`
		} `json:"parameters"`
	} `json:"inputs"`
	Outputs []struct {
		Name       string `json:"name"`
		Parameters *struct {
			BinaryData *bool `json:"binary_data"`
		} `json:"parameters"`
	} `json:"outputs"`
}

// v2OutputName is the one output tensor of every model batchd serves.
const v2OutputName = "output"

// shapeRankMax bounds a tensor's rank (NumPy's own bound was 32 for
// years): nested data is walked once per dimension.
const shapeRankMax = 32

func (b *commonBody) decode(lim limits) (common, *apiError) {
	var c common
	if len(b.Version) > nameMaxBytes {
		return c, badRequest("version longer than %d bytes", nameMaxBytes)
	}
	c.version = b.Version
	c.prioritySet = b.Priority != ""
	switch b.Priority {
	case "", "normal":
		c.priority = actors.PriorityNormal
	case "low":
		c.priority = actors.PriorityLow
	case "high":
		c.priority = actors.PriorityHigh
	default:
		return c, badRequest("priority %q: want low, normal or high", truncate(b.Priority))
	}
	if b.TimeoutMs != nil {
		ms := *b.TimeoutMs
		if ms <= 0 {
			return c, badRequest("timeout_ms %d: must be positive", ms)
		}
		// Capped before converting, so a huge value cannot overflow.
		c.timeout = lim.timeoutMax
		if ms < lim.timeoutMax.Milliseconds() {
			c.timeout = time.Duration(ms) * time.Millisecond
		}
	}
	p, err := canonicalParams(b.Params)
	if err != nil {
		return c, badRequest("params: %v", err)
	}
	c.params = p
	return c, nil
}

// canonicalParams turns a params object into a stable string, so that
// requests whose params are equal as JSON (keys in another order, other
// spacing) share a batch: encoding/json writes map keys sorted, at every
// depth. Numbers keep their text (json.Number), so 1 and 1.0 are different
// params: that may split a batch, but never merges different ones. Absent,
// null and {} are no params.
func canonicalParams(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return "", errors.New("want a JSON object")
	}
	if len(m) == 0 {
		return "", nil
	}
	out, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("canonicalise: %w", err)
	}
	if len(out) > paramsMaxBytes {
		return "", fmt.Errorf("longer than %d bytes", paramsMaxBytes)
	}
	return string(out), nil
}

func checkInput(in *string, lim limits, what string) *apiError {
	if in == nil {
		return badRequest("%s: missing input", what)
	}
	if len(*in) > lim.inputMaxBytes {
		return badRequest("%s: input of %d bytes, over the limit of %d", what, len(*in), lim.inputMaxBytes)
	}
	return nil
}

// decodeInfer decodes and checks a /v1 infer body. Whatever it returns as
// an error is a 4xx.
func decodeInfer(body []byte, lim limits) (inferReq, *apiError) {
	var b inferBody
	if !fastInferBody(body, &b) {
		b = inferBody{}
		if err := decodeJSON(body, &b, true); err != nil {
			return inferReq{}, err
		}
	}
	c, err := b.commonBody.decode(lim)
	if err != nil {
		return inferReq{}, err
	}
	if err := checkInput(b.Input, lim, "input"); err != nil {
		return inferReq{}, err
	}
	return inferReq{common: c, input: *b.Input, async: b.Async}, nil
}

// decodeBatch decodes and checks a /v1 batch body: every item is checked
// before any reaches the engine, and one bad item refuses the whole batch.
func decodeBatch(body []byte, lim limits) (batchReq, *apiError) {
	var b batchBody
	if err := decodeJSON(body, &b, true); err != nil {
		return batchReq{}, err
	}
	c, err := b.commonBody.decode(lim)
	if err != nil {
		return batchReq{}, err
	}
	if len(b.Items) == 0 || len(b.Items) > lim.itemsMax {
		return batchReq{}, badRequest("items: %d, want 1 to %d", len(b.Items), lim.itemsMax)
	}
	r := batchReq{common: c, inputs: make([]string, len(b.Items)), async: b.Async}
	for i, it := range b.Items {
		if err := checkInput(it.Input, lim, fmt.Sprintf("items[%d]", i)); err != nil {
			return batchReq{}, err
		}
		r.inputs[i] = *it.Input
	}
	return r, nil
}

// decodeV2 decodes and checks an OIP infer body that is JSON alone (no
// Inference-Header-Content-Length).
func decodeV2(body []byte, lim limits) (v2Req, *apiError) {
	return decodeV2Binary(body, nil, false, lim)
}

// decodeV2Binary decodes and checks an OIP infer request: header, its JSON,
// and, when hasBinary (the request had Inference-Header-Content-Length),
// bin, the raw tensor data after it. batchd takes exactly one input tensor
// of datatype BYTES, its elements each a request. The tensor's elements
// are either its "data", flat (as many strings as the shape's product) or
// nested as its shape is, row-major (shape [2, 1] as [["a"], ["b"]]), or,
// with "parameters": {"binary_data_size": S}, the next S bytes of bin,
// each element a 4-byte little-endian length and its bytes; the sizes the
// inputs claim must add up to bin's length exactly. Elements are text
// (valid UTF-8), as every input batchd takes is. An "outputs" list may
// name the one output, "output", and nothing else.
func decodeV2Binary(header, bin []byte, hasBinary bool, lim limits) (v2Req, *apiError) {
	var b v2Body
	if err := decodeJSON(header, &b, false); err != nil {
		return v2Req{}, err
	}
	if len(b.Inputs) != 1 {
		return v2Req{}, badRequest("inputs: %d tensors, want exactly 1", len(b.Inputs))
	}
	r := v2Req{id: b.ID}
	if b.Parameters != nil && b.Parameters.BinaryDataOutput != nil {
		r.binaryOut = *b.Parameters.BinaryDataOutput
	}
	if len(b.Outputs) > 1 {
		return v2Req{}, badRequest("outputs: %d requested; the model has one output, %q", len(b.Outputs), v2OutputName)
	}
	for _, o := range b.Outputs {
		if o.Name != v2OutputName {
			return v2Req{}, badRequest("outputs: no output %q; the model has one output, %q", truncate(o.Name), v2OutputName)
		}
		if o.Parameters != nil && o.Parameters.BinaryData != nil {
			r.binaryOut = *o.Parameters.BinaryData
		}
	}
	t := b.Inputs[0]
	name := truncate(t.Name)
	n, aerr := tensorElements(name, t.Datatype, t.Shape, lim)
	if aerr != nil {
		return v2Req{}, aerr
	}
	var size *int64
	if t.Parameters != nil {
		size = t.Parameters.BinaryDataSize
	}
	if size == nil {
		if len(bin) > 0 {
			return v2Req{}, badRequest("%d bytes after the JSON header (Inference-Header-Content-Length), but no input has a binary_data_size", len(bin))
		}
		flat, aerr := flatData(t.Data, t.Shape, n, name)
		if aerr != nil {
			return v2Req{}, aerr
		}
		r.inputs = make([]string, len(flat))
		for i, s := range flat {
			if err := checkInput(s, lim, fmt.Sprintf("data[%d]", i)); err != nil {
				return v2Req{}, err
			}
			r.inputs[i] = *s
		}
		return r, nil
	}
	switch {
	case !hasBinary:
		return v2Req{}, badRequest("input %q: binary_data_size without an Inference-Header-Content-Length header: the body is JSON alone", name)
	case len(t.Data) > 0 && string(t.Data) != "null":
		return v2Req{}, badRequest("input %q: both data and binary_data_size; send one", name)
	case *size < 0 || *size != int64(len(bin)):
		return v2Req{}, badRequest("input %q: binary_data_size %d, but %d bytes follow the JSON header: the inputs' sizes must add up to them", name, *size, len(bin))
	}
	inputs, aerr := bytesTensor(bin, int(n), t.Shape, name, lim)
	if aerr != nil {
		return v2Req{}, aerr
	}
	r.inputs = inputs
	return r, nil
}

// tensorElements checks an OIP input tensor's datatype and shape (name is
// already truncated for messages) and returns its number of elements: the
// one input batchd takes is BYTES, of rank 1 to shapeRankMax, with 1 to
// itemsMax elements.
func tensorElements(name, datatype string, shape []int64, lim limits) (int64, *apiError) {
	if datatype != "BYTES" {
		return 0, badRequest("input %q: datatype %q, want BYTES", name, truncate(datatype))
	}
	if len(shape) > shapeRankMax {
		return 0, badRequest("input %q: shape of rank %d, over %d", name, len(shape), shapeRankMax)
	}
	n := int64(1)
	for _, d := range shape {
		if d < 0 || d > int64(lim.itemsMax) {
			return 0, badRequest("input %q: shape %v: each dimension must be 0 to %d", name, shape, lim.itemsMax)
		}
		n *= d
		if n > int64(lim.itemsMax) {
			return 0, badRequest("input %q: shape %v: more than %d elements", name, shape, lim.itemsMax)
		}
	}
	if len(shape) == 0 || n == 0 {
		return 0, badRequest("input %q: shape %v: want 1 to %d elements", name, shape, lim.itemsMax)
	}
	return n, nil
}

// flatData returns the n elements of a tensor's JSON data, flat or nested
// as its shape (see decodeV2Binary). A nested array must have the shape's
// length at every depth: a ragged one is refused even when its strings
// add up to n.
func flatData(data json.RawMessage, shape []int64, n int64, name string) ([]*string, *apiError) {
	i := strictjson.SkipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return nil, badRequest("input %q: data must be an array of strings", name)
	}
	if j := strictjson.SkipSpace(data, i+1); j >= len(data) || data[j] != '[' {
		var flat []*string
		if json.Unmarshal(data, &flat) != nil {
			return nil, badRequest("input %q: data must be an array of strings", name)
		}
		if int64(len(flat)) != n {
			return nil, badRequest("input %q: %d elements for shape %v", name, len(flat), shape)
		}
		return flat, nil
	}
	if len(shape) < 2 {
		return nil, badRequest("input %q: nested data for shape %v: nest it as the shape does, or send it flat", name, shape)
	}
	flat := make([]*string, 0, n)
	if aerr := nestedData(data, shape, 0, "data", name, &flat); aerr != nil {
		return nil, aerr
	}
	return flat, nil
}

// nestedData appends to flat, row-major, the strings of data, the
// sub-array at where of a tensor of the given shape, at depth dim.
func nestedData(data json.RawMessage, shape []int64, dim int, where, name string, flat *[]*string) *apiError {
	if dim == len(shape)-1 {
		var row []*string
		if json.Unmarshal(data, &row) != nil {
			return badRequest("input %q: %s must be an array of strings (shape %v has %d dimensions)", name, where, shape, len(shape))
		}
		if int64(len(row)) != shape[dim] {
			return badRequest("input %q: %s has %d elements, shape %v wants %d", name, where, len(row), shape, shape[dim])
		}
		*flat = append(*flat, row...)
		return nil
	}
	var rows []json.RawMessage
	if json.Unmarshal(data, &rows) != nil {
		return badRequest("input %q: %s must be an array (shape %v has %d dimensions)", name, where, shape, len(shape))
	}
	if int64(len(rows)) != shape[dim] {
		return badRequest("input %q: %s has %d elements, shape %v wants %d", name, where, len(rows), shape, shape[dim])
	}
	for i, row := range rows {
		if aerr := nestedData(row, shape, dim+1, where+"["+strconv.Itoa(i)+"]", name, flat); aerr != nil {
			return aerr
		}
	}
	return nil
}

// bytesTensor decodes a BYTES tensor of n elements from its binary data:
// each element is a 4-byte little-endian length, then that many bytes;
// the elements fill b exactly.
func bytesTensor(b []byte, n int, shape []int64, name string, lim limits) ([]string, *apiError) {
	out := make([]string, 0, n)
	total := len(b)
	for len(b) > 0 {
		at := total - len(b)
		if len(out) == n {
			return nil, badRequest("input %q: binary data has more than the %d elements of shape %v: %d bytes left at offset %d", name, n, shape, len(b), at)
		}
		if len(b) < 4 {
			return nil, badRequest("input %q: binary element %d: %d bytes at offset %d, too few for its 4-byte length", name, len(out), len(b), at)
		}
		size := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(size) > uint64(len(b)) {
			return nil, badRequest("input %q: binary element %d: length %d at offset %d, past the end of the data (%d bytes left)", name, len(out), size, at, len(b))
		}
		if uint64(size) > uint64(lim.inputMaxBytes) {
			return nil, badRequest("data[%d]: input of %d bytes, over the limit of %d", len(out), size, lim.inputMaxBytes)
		}
		if !utf8.Valid(b[:size]) {
			return nil, badRequest("input %q: binary element %d is not valid UTF-8 (batchd's inputs are text)", name, len(out))
		}
		out = append(out, string(b[:size]))
		b = b[size:]
	}
	if len(out) != n {
		return nil, badRequest("input %q: binary data holds %d elements, shape %v wants %d", name, len(out), shape, n)
	}
	return out, nil
}

// truncate shortens client text quoted back in an error message.
func truncate(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// decodeJSON is strictjson.Decode with its refusal as a 400.
func decodeJSON(body []byte, v any, strict bool) *apiError {
	if err := strictjson.Decode(body, v, strict); err != nil {
		return badRequest("%s", err)
	}
	return nil
}
