package httpapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// decodeJSON decodes one JSON value from body into v. strict refuses
// unknown fields: the v1 API is ours, so a misspelt field ("timeout") is a
// client bug worth a 400 rather than a silently ignored setting; the OIP
// routes ignore unknown fields, since its clients send extensions
// ("parameters", "outputs") that batchd has no use for. Text after the
// value is refused. JSON must be UTF-8 (RFC 8259) and encoding/json would
// silently replace invalid bytes with U+FFFD, so the raw body is checked
// first and invalid UTF-8 is refused rather than served altered.
//
// encoding/json also matches keys case-insensitively ("INPUT" fills
// Input) and lets a repeated key overwrite the first: a client that sent
// either meant something the server would not do, so once decoded, the
// keys of every object v's types describe are checked (exactKeys): a
// repeated key, or one that only case-folds to a field's name, is a 400,
// on every route.
func decodeJSON(body []byte, v any, strict bool) *apiError {
	if !utf8.Valid(body) {
		return badRequest("body is not valid UTF-8")
	}
	t := reflect.TypeOf(v).Elem()
	if decodeFast(body, v, strict) {
		if strict && knownKeys(t).flat {
			return nil // keysKnown checked every key: exact and once
		}
		return exactKeys(body, t)
	}
	// Whatever decodeFast left in v goes: the Decoder starts afresh.
	reflect.ValueOf(v).Elem().SetZero()
	if err := decodeWithDecoder(body, v, strict); err != nil {
		return err
	}
	return exactKeys(body, t)
}

// decodeWithDecoder is decodeJSON's Decoder path: it words every error.
func decodeWithDecoder(body []byte, v any, strict bool) *apiError {
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

// decodeFast decodes body into v with json.Unmarshal, which needs no
// Decoder: json.NewDecoder and the buffer it copies the body into were
// about 0.85 KB of the 1.1 KB a /v1 infer body cost to decode. When strict,
// it does so only if every top-level key of body is, byte for byte, one of
// v's JSON names and v holds no struct below its top level (see
// knownKeys): Unmarshal then has nothing to ignore.
// It reports false when it cannot tell (an escaped key, a key in another
// case, anything but an object) or Unmarshal fails; decodeJSON then
// decodes with the Decoder, as before, which accepts any body this
// accepts with the same result, and words the errors.
func decodeFast(body []byte, v any, strict bool) bool {
	if strict {
		k := knownKeys(reflect.TypeOf(v).Elem())
		if !k.flat || !keysKnown(body, k.names) {
			return false
		}
	}
	return json.Unmarshal(body, v) == nil
}

// keysKnownMax bounds how many top-level keys keysKnown looks at; a body
// with more is left to the Decoder.
const keysKnownMax = 32

// keysKnown reports whether body is a JSON object whose top-level keys are
// all in known, each once, written without escapes. It reads no further
// than it must, skips values without decoding them, and answers false on
// anything it does not expect: it need not validate, since Unmarshal does
// after it.
func keysKnown(body []byte, known map[string]bool) bool {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return true
	}
	// The keys seen so far, as offsets into body: a repeated key is left
	// to the Decoder path (and exactKeys), which refuses it.
	var seen [keysKnownMax][2]int
	for n := range keysKnownMax {
		if i >= len(body) || body[i] != '"' {
			return false
		}
		end := i + 1
		for end < len(body) && body[end] != '"' && body[end] != '\\' {
			end++
		}
		if end >= len(body) || body[end] != '"' || !known[string(body[i+1:end])] {
			return false
		}
		for _, s := range seen[:n] {
			if string(body[s[0]:s[1]]) == string(body[i+1:end]) {
				return false
			}
		}
		seen[n] = [2]int{i + 1, end}
		i = skipSpace(body, end+1)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		if i = skipValue(body, skipSpace(body, i+1)); i < 0 {
			return false
		}
		i = skipSpace(body, i)
		switch {
		case i >= len(body):
			return false
		case body[i] == '}':
			return true
		case body[i] != ',':
			return false
		}
		i = skipSpace(body, i+1)
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index of the delimiter after the JSON value at
// b[i:] (a ',', '}' or ']' outside it), or -1 if there is none. Strings
// are skipped with their escapes, objects and arrays by their nesting.
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i++
			for i < len(b) && b[i] != '"' {
				if b[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(b) {
				return -1
			}
			i++
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object
			}
			depth--
			i++
		case ',':
			if depth == 0 {
				return i
			}
			i++
		default:
			i++
		}
	}
	return -1
}

// keys is what decodeFast knows of a body type.
type keys struct {
	// names are the JSON names of its fields, embedded structs' included,
	// as encoding/json decodes them.
	names map[string]bool
	// flat: no field holds a struct (directly, by pointer, or in a slice,
	// array or map), so a strict Decoder checks the top level's keys only.
	flat bool
}

// knownKeys returns struct type t's keys, cached per type.
func knownKeys(t reflect.Type) keys {
	if k, ok := knownKeysCache.Load(t); ok {
		return k.(keys)
	}
	k := keys{names: map[string]bool{}, flat: true}
	k.add(t)
	knownKeysCache.Store(t, k)
	return k
}

var knownKeysCache sync.Map // reflect.Type → keys

func (k *keys) add(t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			k.add(f.Type)
			continue
		case !f.IsExported():
			continue
		case name != "":
			k.names[name] = true
		default:
			k.names[f.Name] = true
		}
		if holdsStruct(f.Type) {
			k.flat = false
		}
	}
}

func holdsStruct(t reflect.Type) bool {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		case reflect.Struct, reflect.Interface:
			return true
		default:
			return false
		}
	}
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
	if t.Datatype != "BYTES" {
		return v2Req{}, badRequest("input %q: datatype %q, want BYTES", name, truncate(t.Datatype))
	}
	if len(t.Shape) > shapeRankMax {
		return v2Req{}, badRequest("input %q: shape of rank %d, over %d", name, len(t.Shape), shapeRankMax)
	}
	n := int64(1)
	for _, d := range t.Shape {
		if d < 0 || d > int64(lim.itemsMax) {
			return v2Req{}, badRequest("input %q: shape %v: each dimension must be 0 to %d", name, t.Shape, lim.itemsMax)
		}
		n *= d
		if n > int64(lim.itemsMax) {
			return v2Req{}, badRequest("input %q: shape %v: more than %d elements", name, t.Shape, lim.itemsMax)
		}
	}
	if len(t.Shape) == 0 || n == 0 {
		return v2Req{}, badRequest("input %q: shape %v: want 1 to %d elements", name, t.Shape, lim.itemsMax)
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

// flatData returns the n elements of a tensor's JSON data, flat or nested
// as its shape (see decodeV2Binary). A nested array must have the shape's
// length at every depth: a ragged one is refused even when its strings
// add up to n.
func flatData(data json.RawMessage, shape []int64, n int64, name string) ([]*string, *apiError) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return nil, badRequest("input %q: data must be an array of strings", name)
	}
	if j := skipSpace(data, i+1); j >= len(data) || data[j] != '[' {
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

// schema is what exactKeys knows of a body type: for a struct, its fields
// by exact JSON name, each with the schema of its value (nil: a value not
// checked further, such as a string or the free-form params); for a slice
// or array, its elements'.
type schema struct {
	fields map[string]*schema
	elem   *schema
}

// schemaOf returns t's schema, nil when no object in t's values has keys
// to check. Cached per type.
func schemaOf(t reflect.Type) *schema {
	if s, ok := schemaCache.Load(t); ok {
		return s.(*schema)
	}
	s := buildSchema(t)
	schemaCache.Store(t, s)
	return s
}

var schemaCache sync.Map // reflect.Type → *schema

func buildSchema(t reflect.Type) *schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		s := &schema{fields: map[string]*schema{}}
		addFields(s, t)
		return s
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return nil // json.RawMessage: free-form, not ours to check
		}
		if e := buildSchema(t.Elem()); e != nil {
			return &schema{elem: e}
		}
	}
	return nil // strings, numbers, maps, interfaces
}

func addFields(s *schema, t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			addFields(s, f.Type)
			continue
		case !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		s.fields[name] = buildSchema(f.Type)
	}
}

// exactKeys checks the keys of body, valid JSON that decoded into a value
// of type t: in every object that decoded into a struct, each key that
// names a field must name it exactly (encoding/json would take "INPUT"
// for "input") and at most once (it would keep the last). A key that
// names no field was refused by a strict decode already, or is an
// extension a lenient one ignores.
func exactKeys(body []byte, t reflect.Type) *apiError {
	s := schemaOf(t)
	if s == nil {
		return nil
	}
	_, err := checkValue(body, skipSpace(body, 0), s)
	return err
}

// checkValue checks the value at body[i:] against s and returns the index
// just after it. Only the schema's own levels recurse (a few, by the body
// types); what lies below them is skipped by skipValue, without recursion,
// however deep it nests.
func checkValue(body []byte, i int, s *schema) (int, *apiError) {
	if i >= len(body) {
		return i, nil
	}
	switch {
	case s.fields != nil && body[i] == '{':
		return checkObject(body, i, s)
	case s.elem != nil && body[i] == '[':
		i = skipSpace(body, i+1)
		if i < len(body) && body[i] == ']' {
			return i + 1, nil
		}
		for i < len(body) {
			var err *apiError
			if i, err = checkValue(body, i, s.elem); err != nil {
				return i, err
			}
			i = skipSpace(body, i)
			if i >= len(body) || body[i] != ',' {
				return i + 1, nil // the ']'
			}
			i = skipSpace(body, i+1)
		}
		return i, nil
	}
	return skipAny(body, i), nil
}

// checkObject checks the object at body[i:] against s (see exactKeys).
func checkObject(body []byte, i int, s *schema) (int, *apiError) {
	var seen []string // field names met, at most one per field
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return i + 1, nil
	}
	for i < len(body) && body[i] == '"' {
		end := skipString(body, i)
		raw := body[i+1 : end-1]
		key := string(raw)
		if bytes.IndexByte(raw, '\\') >= 0 {
			// encoding/json unescapes keys before it matches them.
			if json.Unmarshal(body[i:end], &key) != nil {
				return end, badRequest("bad JSON: key %q", truncate(string(raw)))
			}
		}
		i = skipSpace(body, skipSpace(body, end)+1) // past the ':'
		child, known := s.fields[key]
		if !known {
			for name := range s.fields {
				if strings.EqualFold(name, key) {
					return i, badRequest("key %q: keys are case-sensitive; did you mean %q?", truncate(key), name)
				}
			}
		} else {
			if slices.Contains(seen, key) {
				return i, badRequest("key %q given twice", truncate(key))
			}
			seen = append(seen, key)
		}
		var err *apiError
		if known && child != nil {
			i, err = checkValue(body, i, child)
		} else {
			i = skipAny(body, i)
		}
		if err != nil {
			return i, err
		}
		i = skipSpace(body, i)
		if i >= len(body) || body[i] != ',' {
			return i + 1, nil // the '}'
		}
		i = skipSpace(body, i+1)
	}
	return i, nil
}

// skipString returns the index just after the string that starts at
// body[i] (a '"').
func skipString(body []byte, i int) int {
	i++
	for i < len(body) && body[i] != '"' {
		if body[i] == '\\' {
			i++
		}
		i++
	}
	return min(i+1, len(body))
}

// skipAny returns the index just after the value at body[i:]: skipValue's
// delimiter, or the end of the body for a value that ends it.
func skipAny(body []byte, i int) int {
	if j := skipValue(body, i); j >= 0 {
		return j
	}
	return len(body)
}
