package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/batchd/batchd/actors"
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

type v2Body struct {
	ID     *string `json:"id"`
	Inputs []struct {
		Name     string          `json:"name"`
		Shape    []int64         `json:"shape"`
		Datatype string          `json:"datatype"`
		Data     json.RawMessage `json:"data"`
	} `json:"inputs"`
}

// decodeJSON decodes one JSON value from body into v. strict refuses
// unknown fields: the v1 API is ours, so a misspelt field ("timeout") is a
// client bug worth a 400 rather than a silently ignored setting; the OIP
// routes ignore unknown fields, since its clients send extensions
// ("parameters", "outputs") that batchd has no use for. Text after the
// value is refused. JSON must be UTF-8 (RFC 8259) and encoding/json would
// silently replace invalid bytes with U+FFFD, so the raw body is checked
// first and invalid UTF-8 is refused rather than served altered.
func decodeJSON(body []byte, v any, strict bool) *apiError {
	if !utf8.Valid(body) {
		return badRequest("body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return badRequest("empty body")
		}
		return badRequest("bad JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("bad JSON: more than one value")
	}
	return nil
}

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
	if err := decodeJSON(body, &b, true); err != nil {
		return inferReq{}, err
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

// decodeV2 decodes and checks an OIP infer body: exactly one input tensor
// of datatype BYTES whose data is a flat array of strings (or, as some
// clients send a [n, 1] tensor, an array of one-string arrays), its
// length the product of its shape.
func decodeV2(body []byte, lim limits) (v2Req, *apiError) {
	var b v2Body
	if err := decodeJSON(body, &b, false); err != nil {
		return v2Req{}, err
	}
	if len(b.Inputs) != 1 {
		return v2Req{}, badRequest("inputs: %d tensors, want exactly 1", len(b.Inputs))
	}
	t := b.Inputs[0]
	if t.Datatype != "BYTES" {
		return v2Req{}, badRequest("input %q: datatype %q, want BYTES", truncate(t.Name), truncate(t.Datatype))
	}
	n := int64(1)
	for _, d := range t.Shape {
		if d < 0 || d > int64(lim.itemsMax) {
			return v2Req{}, badRequest("input %q: shape %v: each dimension must be 0 to %d", truncate(t.Name), t.Shape, lim.itemsMax)
		}
		n *= d
		if n > int64(lim.itemsMax) {
			return v2Req{}, badRequest("input %q: shape %v: more than %d elements", truncate(t.Name), t.Shape, lim.itemsMax)
		}
	}
	if len(t.Shape) == 0 || n == 0 {
		return v2Req{}, badRequest("input %q: shape %v: want 1 to %d elements", truncate(t.Name), t.Shape, lim.itemsMax)
	}
	var flat []*string
	if err := json.Unmarshal(t.Data, &flat); err != nil {
		var nested [][]*string
		if json.Unmarshal(t.Data, &nested) != nil {
			return v2Req{}, badRequest("input %q: data must be an array of strings", truncate(t.Name))
		}
		flat = flat[:0]
		for _, row := range nested {
			flat = append(flat, row...)
		}
	}
	if int64(len(flat)) != n {
		return v2Req{}, badRequest("input %q: %d elements for shape %v", truncate(t.Name), len(flat), t.Shape)
	}
	r := v2Req{id: b.ID, inputs: make([]string, len(flat))}
	for i, s := range flat {
		if err := checkInput(s, lim, fmt.Sprintf("data[%d]", i)); err != nil {
			return v2Req{}, err
		}
		r.inputs[i] = *s
	}
	return r, nil
}

// truncate shortens client text quoted back in an error message.
func truncate(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
