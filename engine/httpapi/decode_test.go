package httpapi

import (
	"github.com/batchd/batchd/engine/httpapi/strictjson"

	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"
)

var fuzzLimits = limits{inputMaxBytes: 32, itemsMax: 8, timeoutMax: time.Minute}

// FuzzDecodeInfer feeds the same bytes to every request decoder: none may
// panic, every refusal is a 4xx, and whatever is accepted respects the
// limits, so nothing out of bounds can reach the engine. It is seeded with
// the bodies of the malformed-input corpus (testdata/malformed) too.
//
//	go test ./engine/httpapi -run '^$' -fuzz FuzzDecodeInfer -fuzztime 30s
func FuzzDecodeInfer(f *testing.F) {
	for _, s := range []string{
		`{"input": "hello"}`,
		`{"input": "x", "version": "v1", "priority": "high", "timeout_ms": 250, "params": {"b": [1, {"z": 1}], "a": "x"}, "async": true}`,
		`{"input": "x", "params": {"n": 1e999}}`,
		`{"input": "x", "timeout_ms": 9223372036854775807}`,
		`{"input": "\ud800"}`,
		"{\"input\": \"\xff\"}",
		`{"items": [{"input": "a"}, {"input": "b"}], "priority": "low"}`,
		`{"items": [{"input": null}]}`,
		`{"id": "r1", "inputs": [{"name": "t", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]}]}`,
		`{"inputs": [{"name": "t", "shape": [2, 1], "datatype": "BYTES", "data": [["a"], ["b"]]}]}`,
		`{"inputs": [{"name": "t", "shape": [4294967296, 4294967296], "datatype": "BYTES", "data": []}]}`,
		`{"inputs": [{"name": "t", "shape": [], "datatype": "BYTES", "data": "a"}]}`,
		`[]`, `null`, ``, `{`, `{"input": "a"} x`,
	} {
		f.Add([]byte(s))
	}
	addCorpusSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(name string, err *apiError) {
			if err != nil && (err.status < 400 || err.status > 499 || err.code == "" || err.msg == "") {
				t.Fatalf("%s: refusal %+v is not a 4xx with a code and message", name, err)
			}
		}
		in, err := decodeInfer(body, fuzzLimits)
		check("infer", err)
		if err == nil {
			checkCommon(t, in.common)
			checkInputs(t, in.input)
		}
		b, err := decodeBatch(body, fuzzLimits)
		check("batch", err)
		if err == nil {
			checkCommon(t, b.common)
			if len(b.inputs) < 1 || len(b.inputs) > fuzzLimits.itemsMax {
				t.Fatalf("batch of %d items accepted", len(b.inputs))
			}
			checkInputs(t, b.inputs...)
		}
		v, err := decodeV2(body, fuzzLimits)
		check("v2", err)
		if err == nil {
			if len(v.inputs) < 1 || len(v.inputs) > fuzzLimits.itemsMax {
				t.Fatalf("tensor of %d elements accepted", len(v.inputs))
			}
			checkInputs(t, v.inputs...)
		}
	})
}

// addCorpusSeeds adds every body of the malformed-input corpus to f's
// seeds, so `go test` runs the decoders on them and a fuzz run starts
// from them.
func addCorpusSeeds(f *testing.F) {
	cases, err := LoadCorpus("testdata/malformed")
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		f.Add(c.Body)
	}
}

func checkCommon(t *testing.T, c common) {
	t.Helper()
	if c.timeout < 0 || c.timeout > fuzzLimits.timeoutMax {
		t.Fatalf("timeout %v accepted", c.timeout)
	}
	if c.priority < -1 || c.priority > 1 || len(c.version) > nameMaxBytes || len(c.params) > paramsMaxBytes {
		t.Fatalf("common fields out of bounds: %+v", c)
	}
	if c.params != "" {
		// Canonical params are a fixed point: canonicalising them again
		// changes nothing, or equal params could land on different keys.
		again, err := canonicalParams([]byte(c.params))
		if err != nil || again != c.params {
			t.Fatalf("params %q not canonical: %q, %v", c.params, again, err)
		}
	}
}

func checkInputs(t *testing.T, inputs ...string) {
	t.Helper()
	for _, in := range inputs {
		if len(in) > fuzzLimits.inputMaxBytes || !utf8.ValidString(in) {
			t.Fatalf("input %q accepted", in)
		}
	}
}

// TestReadAll: the body reader returns what io.ReadAll does, for bodies
// shorter than, equal to and longer than their first buffer, whether their
// length is declared or not, and with one allocation when it is.
func TestReadAll(t *testing.T) {
	for _, size := range []int{0, 1, 40, bodyReadInitial - 1, bodyReadInitial, bodyReadInitial + 1, 5000} {
		body := strings.Repeat("a", size)
		for _, declared := range []int64{int64(size), -1} {
			// iotest.OneByteReader: a body that arrives in pieces.
			for name, r := range map[string]func() io.Reader{
				"whole":    func() io.Reader { return strings.NewReader(body) },
				"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) },
			} {
				got, err := readAll(r(), declared, 1<<20)
				if err != nil || string(got) != body {
					t.Errorf("%d bytes, declared %d, %s: got %d bytes, %v", size, declared, name, len(got), err)
				}
			}
		}
		if size > 0 {
			r := strings.NewReader(body)
			allocs := testing.AllocsPerRun(10, func() {
				r.Reset(body)
				_, _ = readAll(r, int64(size), 1<<20)
			})
			if allocs > 1 {
				t.Errorf("%d bytes declared: %v allocations, want 1", size, allocs)
			}
		}
	}
	if _, err := readAll(iotest.ErrReader(io.ErrUnexpectedEOF), 10, 1<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a failing body: got %v", err)
	}
}

// FuzzDecodeFast: decodeJSON, which tries json.Unmarshal first, accepts
// and refuses exactly what the Decoder and the key check do, with the same
// values and the same words, for each body type, strict and not.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range []string{
		`{"input": "hello"}`,
		`{"input": "x", "version": "v1", "priority": "high", "timeout_ms": 250, "params": {"b": [1, {"z": 1}], "a": "x"}, "async": true}`,
		`{"input": "x", "extra": 1}`, `{"INPUT": "x"}`, `{"in\u0070ut": "x"}`, `{"input": "a\"}, \"evil\": {\"", "async": true}`,
		`{"params": {"input": "x", "evil": [}]}, "input": "x"}`, `{"input": "x",}`, `{"input": "x"} {}`, `{"input": "x"}` + "\n",
		`{"items": [{"input": "a"}, {"input": "b", "x": 1}]}`, `{"timeout_ms": 1e3, "input": "x"}`, `{"async": "yes", "input": "x"}`,
		`{"id": "r1", "inputs": [{"name": "t", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]}], "outputs": []}`,
		`[]`, `null`, ``, `{`, `{}`, ` { } `, `{"input" "x"}`, `{"input": tru}`,
		`{"input": "a", "input": "b"}`, `{"items": [{"input": "a", "Input": "b"}]}`, `{"Inputs": []}`,
		`{"input":"x","timeout_ms":0}`, `{"input":"x","timeout_ms":-5}`, `{"input":"x","timeout_ms":012}`,
		`{"input":"x","timeout_ms":1234567890123456789}`, `{"input":"x","async":truex}`, `{"input":"x","async":null}`,
		`{"input":"h\u00e9","version":"v1"}`, "{\"input\":\"a\tb\"}", `{"input":"é ü","priority":"low","async":false}`,
	} {
		f.Add([]byte(s))
	}
	addCorpusSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return // refused before either path
		}
		same := func(name string, fresh func() any, strict bool) {
			got, want := fresh(), fresh()
			wantErr := strictjson.DecodeReference(body, want, strict)
			gotErr := decodeJSON(body, got, strict)
			if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.msg != wantErr.Error()) {
				t.Fatalf("%s, strict %v: %q: got error %v, the Decoder alone %v", name, strict, body, gotErr, wantErr)
			}
			if gotErr == nil && wantErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, strict %v: %q: got %+v, the Decoder alone %+v", name, strict, body, got, want)
			}
		}
		// The /v1 infer fast path: what it takes, the Decoder takes too,
		// with the same values.
		var fast inferBody
		if fastInferBody(body, &fast) {
			var ref inferBody
			if err := strictjson.DecodeReference(body, &ref, true); err != nil {
				t.Fatalf("fast path: %q: taken, but the Decoder alone refuses it: %v", body, err)
			}
			if !reflect.DeepEqual(fast, ref) {
				t.Fatalf("fast path: %q: got %+v, the Decoder alone %+v", body, fast, ref)
			}
		}
		for _, strict := range []bool{true, false} {
			same("infer", func() any { return new(inferBody) }, strict)
			same("batch", func() any { return new(batchBody) }, strict)
			same("v2", func() any { return new(v2Body) }, strict)
		}
	})
}

// TestExactKeys: encoding/json matches keys case-insensitively and keeps
// the last of a repeated key; the decoders refuse both, on /v1 (strict)
// and /v2 (which still ignores keys that name no field), at every level
// the body types describe, escaped keys included, but not inside the
// free-form params.
func TestExactKeys(t *testing.T) {
	lim := limits{inputMaxBytes: 64, itemsMax: 8, timeoutMax: time.Minute}
	v2 := func(inner string) string {
		return `{"inputs": [{"name": "t", "shape": [1], "datatype": "BYTES", "data": ["a"]` + inner + `}]}`
	}
	for _, c := range []struct {
		name, body string
		decode     func([]byte, limits) *apiError
		want       string // "" accepts
	}{
		{"infer", `{"input": "a"}`, inferErr, ""},
		{"infer upper", `{"INPUT": "a"}`, inferErr, `key "INPUT": keys are case-sensitive; did you mean "input"?`},
		{"infer title", `{"Input": "a", "timeout_ms": 5}`, inferErr, `key "Input"`},
		{"infer folded", `{"input": "a", "aſync": true}`, inferErr, `key "aſync": keys are case-sensitive; did you mean "async"?`},
		{"infer upper second", `{"input": "a", "Priority": "high"}`, inferErr, `key "Priority"`},
		{"infer twice", `{"input": "a", "input": "b"}`, inferErr, `key "input" given twice`},
		{"infer twice escaped", `{"input": "a", "inp\u0075t": "b"}`, inferErr, `key "input" given twice`},
		{"infer params free-form", `{"input": "a", "params": {"k": 1, "K": 2, "Input": 3}}`, inferErr, ""},
		{"batch", `{"items": [{"input": "a"}, {"input": "b"}]}`, batchErr, ""},
		{"batch item upper", `{"items": [{"input": "a"}, {"INPUT": "b"}]}`, batchErr, `key "INPUT"`},
		{"batch item twice", `{"items": [{"input": "a", "input": "b"}]}`, batchErr, `key "input" given twice`},
		{"batch items twice", `{"items": [{"input": "a"}], "items": [{"input": "b"}]}`, batchErr, `key "items" given twice`},
		{"v2", v2(""), v2Err, ""},
		{"v2 extensions ignored", `{"parameters": {"x": 1}, "outputs": [{"name": "output", "parameters": {"y": 2}}], "inputs": [{"name": "t", "shape": [1], "datatype": "BYTES", "data": ["a"], "parameters": {"content_type": "str"}}]}`, v2Err, ""},
		{"v2 parameter upper", v2(`, "parameters": {"Binary_Data_Size": 4}`), v2Err, `key "Binary_Data_Size": keys are case-sensitive; did you mean "binary_data_size"?`},
		{"v2 parameter twice", `{"parameters": {"binary_data_output": true, "binary_data_output": false}, "inputs": [{"name": "t", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`, v2Err, `key "binary_data_output" given twice`},
		{"v2 upper", `{"INPUTS": [{"name": "t", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`, v2Err, `key "INPUTS": keys are case-sensitive; did you mean "inputs"?`},
		{"v2 tensor upper", v2(`, "Data": ["b"]`), v2Err, `key "Data"`},
		{"v2 tensor twice", v2(`, "data": ["b"]`), v2Err, `key "data" given twice`},
	} {
		err := c.decode([]byte(c.body), lim)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %s: refused: %v", c.name, c.body, err)
		case c.want != "" && (err == nil || err.status != 400 || !strings.Contains(err.msg, c.want)):
			t.Errorf("%s: %s: got %v, want 400 saying %q", c.name, c.body, err, c.want)
		}
	}
}

func inferErr(b []byte, lim limits) *apiError { _, err := decodeInfer(b, lim); return err }
func batchErr(b []byte, lim limits) *apiError { _, err := decodeBatch(b, lim); return err }
func v2Err(b []byte, lim limits) *apiError    { _, err := decodeV2(b, lim); return err }

// TestV2Ragged: nested data must have the shape's rows and columns, not
// merely as many strings as its product.
func TestV2Ragged(t *testing.T) {
	lim := limits{inputMaxBytes: 64, itemsMax: 8, timeoutMax: time.Minute}
	for data, shape := range map[string]string{
		`[["a", "b", "c"], ["d"]]`: "[2, 2]",
		`[["a"], ["b", "c"]]`:      "[3, 1]",
		`[["a", "b"]]`:             "[2]",
		`[["a"], ["b"]]`:           "[1, 2]",
		`[["a"], ["b"], []]`:       "[2, 1, 1]",
	} {
		body := `{"inputs": [{"name": "t", "shape": ` + shape + `, "datatype": "BYTES", "data": ` + data + `}]}`
		if _, err := decodeV2([]byte(body), lim); err == nil || err.status != 400 {
			t.Errorf("shape %s, data %s: %v, want 400", shape, data, err)
		}
	}
	for data, shape := range map[string]string{
		`[["a", "b"], ["c", "d"]]`: "[2, 2]",
		`["a", "b", "c", "d"]`:     "[2, 2]",
		`[["a"], ["b"], ["c"]]`:    "[3, 1]",
	} {
		body := `{"inputs": [{"name": "t", "shape": ` + shape + `, "datatype": "BYTES", "data": ` + data + `}]}`
		if r, err := decodeV2([]byte(body), lim); err != nil || len(r.inputs) == 0 || r.inputs[0] != "a" {
			t.Errorf("shape %s, data %s: %+v, %v", shape, data, r, err)
		}
	}
}

func BenchmarkDecodeInfer(b *testing.B) {
	body := []byte(`{"input": "the quick brown fox", "priority": "high", "timeout_ms": 200}`)
	lim := limits{inputMaxBytes: 1 << 16, itemsMax: 8, timeoutMax: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeInfer(body, lim); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeV2Binary: an OIP request in the binary tensor data extension
// (a JSON header, then the tensor bytes) is refused with a worded 4xx or
// decodes to elements within the limits, each valid UTF-8, as many as
// its shape says, each one of the length-prefixed elements of bin.
func FuzzDecodeV2Binary(f *testing.F) {
	le := func(parts ...string) []byte {
		var b []byte
		for _, p := range parts {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
			b = append(b, p...)
		}
		return b
	}
	in := func(shape string, size int) []byte {
		return []byte(`{"inputs":[{"name":"t","shape":` + shape + `,"datatype":"BYTES","parameters":{"binary_data_size":` + strconv.Itoa(size) + `}}]}`)
	}
	f.Add(in("[2]", 11), le("a", "bc"))
	f.Add(in("[2,1]", 8), le("", ""))
	f.Add(in("[1]", 5), []byte("\xff\xff\xff\xffa"))
	f.Add(in("[1]", 6), le("\xff\xfe"))
	f.Add(in("[3]", 11), le("a", "bc"))
	f.Add([]byte(`{"inputs":[{"name":"t","shape":[1],"datatype":"BYTES","data":["a"]}],"parameters":{"binary_data_output":true}}`), []byte{})
	f.Fuzz(func(t *testing.T, header, bin []byte) {
		v, err := decodeV2Binary(header, bin, true, fuzzLimits)
		if err != nil {
			if err.status != 400 || err.msg == "" {
				t.Fatalf("refusal %+v is not a worded 400", err)
			}
			return
		}
		if len(v.inputs) < 1 || len(v.inputs) > fuzzLimits.itemsMax {
			t.Fatalf("tensor of %d elements accepted", len(v.inputs))
		}
		checkInputs(t, v.inputs...)
		if len(bin) > 0 {
			// Every byte of bin is one element's length or its bytes.
			if want := len(v.inputs) * 4; len(bin) != want+len(strings.Join(v.inputs, "")) {
				t.Fatalf("%d bytes of binary data for elements %q", len(bin), v.inputs)
			}
		}
	})
}

// TestFastInferBody: the bodies batchd load and most clients send take the
// fast path, with the values the Decoder would give; anything it does not
// know is left to the Decoder (FuzzDecodeFast checks the values on every
// body it takes).
func TestFastInferBody(t *testing.T) {
	ms := int64(200)
	for _, tc := range []struct {
		body string
		want *inferBody // nil: not taken
	}{
		{`{"input":"abc"}`, &inferBody{Input: ptr("abc")}},
		{`{"input":"abc","version":"v1","timeout_ms":200}`, &inferBody{commonBody: commonBody{Version: "v1", TimeoutMs: &ms}, Input: ptr("abc")}},
		{` { "input" : "the quick brown fox", "priority": "high", "timeout_ms": 200, "async": true } ` + "\n",
			&inferBody{commonBody: commonBody{Priority: "high", TimeoutMs: &ms}, Input: ptr("the quick brown fox"), Async: true}},
		{`{}`, &inferBody{}},
		{`{"input":"x","params":{"a":1}}`, nil},
		{`{"input":"a\"b"}`, nil},
		{`{"input":"x","input":"y"}`, nil},
		{`{"input":"x","timeout_ms":1.5}`, nil},
		{`{"input":"x","timeout_ms":-1}`, nil},
		{`{"input":"x","extra":1}`, nil},
		{`{"Input":"x"}`, nil},
		{`{"input":"x"} {}`, nil},
		{`{"input":"x",}`, nil},
		{`{"input":null}`, nil},
		{"{\"input\":\"\xff\"}", nil},
	} {
		var got inferBody
		taken := fastInferBody([]byte(tc.body), &got)
		if taken != (tc.want != nil) {
			t.Errorf("%q: fast path taken %v, want %v", tc.body, taken, tc.want != nil)
			continue
		}
		if taken && !reflect.DeepEqual(got, *tc.want) {
			t.Errorf("%q: got %+v, want %+v", tc.body, got, *tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
