package httpapi_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/httpapi"
)

// The Open Inference Protocol's binary tensor data extension
// (Triton's docs/protocol/extension_binary_data.md, KServe's "Binary
// Tensor Data Extension"): an infer request whose
// Inference-Header-Content-Length is N has an N-byte JSON header, then
// the raw bytes of the inputs that say "binary_data_size", in input
// order; a BYTES element is a 4-byte little-endian length and its bytes.
// The reply does the same for outputs asked for with "binary_data" (or
// the request's "binary_data_output").

// le32 is n as 4 little-endian bytes, written out by hand (not with
// encoding/binary): what the extension says a BYTES element's length is.
func le32(n int) string {
	return string([]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)})
}

// TestV2BinaryByteForByte: a request built by hand, byte by byte, as the
// extension describes it, and the exact bytes and headers of the reply.
func TestV2BinaryByteForByte(t *testing.T) {
	f := &fakeDoer{}
	h := newHandler(t, f, httpapi.DefaultConfig())

	// Two BYTES elements, shape [2, 1]: "hello" and "hé" (3 bytes of
	// UTF-8), 4 + 5 + 4 + 3 = 16 bytes of tensor data.
	header := `{"id":"b1","inputs":[{"name":"INPUT0","shape":[2,1],"datatype":"BYTES","parameters":{"binary_data_size":16}}],` +
		`"outputs":[{"name":"output","parameters":{"binary_data":true}}]}`
	tensor := "\x05\x00\x00\x00hello" + "\x03\x00\x00\x00h\xc3\xa9"
	if len(tensor) != 16 {
		t.Fatalf("test bug: %d bytes of tensor data", len(tensor))
	}
	for _, ct := range []string{"application/octet-stream", "application/json", ""} {
		t.Run("Content-Type "+ct, func(t *testing.T) {
			hdr := []string{"Inference-Header-Content-Length", strconv.Itoa(len(header))}
			if ct != "" {
				hdr = append(hdr, "Content-Type", ct)
			}
			r := serve(h, "POST", "/v2/models/m/infer", header+tensor, hdr...)
			if r.status != 200 {
				t.Fatalf("status %d: %q", r.status, r.body)
			}
			out0, out1 := actors.EmulatedOutput("m", "v1", "hello"), actors.EmulatedOutput("m", "v1", "hé")
			size := 4 + len(out0) + 4 + len(out1)
			wantHeader := `{"model_name":"m","model_version":"v1","id":"b1","outputs":[{"name":"output","datatype":"BYTES","shape":[2],` +
				`"parameters":{"binary_data_size":` + strconv.Itoa(size) + `}}]}`
			want := wantHeader + le32(len(out0)) + out0 + le32(len(out1)) + out1
			if string(r.body) != want {
				t.Errorf("body\n got %q\nwant %q", r.body, want)
			}
			if got := r.header.Get("Inference-Header-Content-Length"); got != strconv.Itoa(len(wantHeader)) {
				t.Errorf("Inference-Header-Content-Length %q, want %d", got, len(wantHeader))
			}
			if got := r.header.Get("Content-Type"); got != "application/octet-stream" {
				t.Errorf("Content-Type %q", got)
			}
			if got := r.header.Get("Content-Length"); got != strconv.Itoa(len(want)) {
				t.Errorf("Content-Length %q, want %d", got, len(want))
			}
		})
	}
	// The engine got each element as one request (their order is the
	// engine's; the reply's order is checked above).
	count := map[string]int{}
	for _, q := range f.requests() {
		if q.Model != "m" {
			t.Errorf("engine request %+v", q)
		}
		count[q.Input]++
	}
	if len(count) != 2 || count["hello"] != 3 || count["hé"] != 3 {
		t.Errorf("engine inputs %v, want hello and hé 3 times each", count)
	}
}

// TestV2BinaryChoice: which replies are binary. The request's
// binary_data_output sets it for the output, the output's binary_data
// overrides it; a binary request does not make a binary reply by itself.
func TestV2BinaryChoice(t *testing.T) {
	h := newHandler(t, &fakeDoer{}, httpapi.DefaultConfig())
	jsonInput := `"inputs":[{"name":"t","shape":[1],"datatype":"BYTES","data":["x"]}]`
	for _, c := range []struct {
		name, header, tensor string
		binary               bool
	}{
		{"plain JSON", `{` + jsonInput + `}`, "", false},
		{"binary_data_output", `{"parameters":{"binary_data_output":true},` + jsonInput + `}`, "", true},
		{"binary_data_output false", `{"parameters":{"binary_data_output":false},` + jsonInput + `}`, "", false},
		{"output binary_data", `{` + jsonInput + `,"outputs":[{"name":"output","parameters":{"binary_data":true}}]}`, "", true},
		{"output overrides", `{"parameters":{"binary_data_output":true},` + jsonInput + `,"outputs":[{"name":"output","parameters":{"binary_data":false}}]}`, "", false},
		{"output without binary_data", `{"parameters":{"binary_data_output":true},` + jsonInput + `,"outputs":[{"name":"output"}]}`, "", true},
		{"binary input, JSON output", `{"inputs":[{"name":"t","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5}}]}`, le32(1) + "x", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var hdr []string
			if c.tensor != "" {
				hdr = []string{"Inference-Header-Content-Length", strconv.Itoa(len(c.header))}
			}
			r := serve(h, "POST", "/v2/models/m/infer", c.header+c.tensor, hdr...)
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			out := actors.EmulatedOutput("m", "v1", "x")
			if c.binary {
				n, err := strconv.Atoi(r.header.Get("Inference-Header-Content-Length"))
				if err != nil || n > len(r.body) || string(r.body[n:]) != le32(len(out))+out ||
					r.header.Get("Content-Type") != "application/octet-stream" {
					t.Errorf("binary reply: header %v, body %q", r.header, r.body)
				}
				return
			}
			if r.header.Get("Inference-Header-Content-Length") != "" || r.header.Get("Content-Type") != "application/json" {
				t.Errorf("JSON reply with headers %v", r.header)
			}
			want := `{"model_name":"m","model_version":"v1","outputs":[{"name":"output","datatype":"BYTES","shape":[1],"data":[` + strconv.Quote(out) + `]}]}` + "\n"
			if string(r.body) != want {
				t.Errorf("body\n got %q\nwant %q", r.body, want)
			}
		})
	}
}

// TestV2BinaryErrors: every way a binary request can be wrong is a 400
// that says what is wrong, before anything reaches the engine.
func TestV2BinaryErrors(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.InputMaxBytes = 16
	f := &fakeDoer{}
	h := newHandler(t, f, cfg)
	in := func(shape string, size int) string {
		return `{"inputs":[{"name":"t","shape":` + shape + `,"datatype":"BYTES","parameters":{"binary_data_size":` + strconv.Itoa(size) + `}}]}`
	}
	two := le32(1) + "a" + le32(2) + "bc" // two elements, 11 bytes
	for _, c := range []struct {
		name      string
		body      string
		headerLen string // "" sends the JSON header's length; "-" no header
		want      string
	}{
		{"length not a number", in("[2]", 11) + two, "abc", `Inference-Header-Content-Length "abc"`},
		{"length negative", in("[2]", 11) + two, "-5", `Inference-Header-Content-Length "-5"`},
		{"length signed", in("[2]", 11) + two, "+5", `Inference-Header-Content-Length "+5"`},
		{"length empty", in("[2]", 11) + two, " ", `Inference-Header-Content-Length " "`},
		{"length zero", in("[2]", 11) + two, "0", "must be 1 to"},
		{"length past the body", in("[2]", 11) + two, "1000", "Inference-Header-Content-Length 1000: the JSON header must be 1 to"},
		{"length cuts the JSON", in("[2]", 11) + two, "20", "bad JSON"},
		{"size short of the data", in("[2]", 10) + two, "", "binary_data_size 10, but 11 bytes follow the JSON header"},
		{"size past the data", in("[2]", 12) + two, "", "binary_data_size 12, but 11 bytes follow"},
		{"size negative", in("[2]", -1) + two, "", "binary_data_size -1"},
		{"size not a number", `{"inputs":[{"name":"t","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":"5"}}]}` + le32(1) + "a", "", "bad JSON"},
		{"bytes no input claims", `{"inputs":[{"name":"t","shape":[1],"datatype":"BYTES","data":["a"]}]}` + "xyz", "", "3 bytes after the JSON header"},
		{"size without the header", in("[1]", 5), "-", "binary_data_size without an Inference-Header-Content-Length header"},
		{"data and size", `{"inputs":[{"name":"t","shape":[1],"datatype":"BYTES","data":["a"],"parameters":{"binary_data_size":5}}]}` + le32(1) + "a", "", "both data and binary_data_size"},
		{"more elements than the shape", in("[1]", 11) + two, "", "more than the 1 elements of shape [1]"},
		{"fewer elements than the shape", in("[3]", 11) + two, "", "binary data holds 2 elements, shape [3] wants 3"},
		{"length prefix cut short", in("[2]", 7) + le32(1) + "a" + "\x02\x00", "", "binary element 1: 2 bytes at offset 5, too few for its 4-byte length"},
		{"element past the end", in("[1]", 6) + le32(9) + "ab", "", "binary element 0: length 9 at offset 0, past the end"},
		{"element length huge", in("[1]", 5) + "\xff\xff\xff\xff" + "a", "", "length 4294967295"},
		{"element over the input limit", in("[1]", 21) + le32(17) + strings.Repeat("a", 17), "", "input of 17 bytes, over the limit of 16"},
		{"element not UTF-8", in("[1]", 6) + le32(2) + "\xff\xfe", "", "binary element 0 is not valid UTF-8"},
		{"not BYTES", `{"inputs":[{"name":"t","shape":[1],"datatype":"INT32","parameters":{"binary_data_size":4}}]}` + "\x01\x00\x00\x00", "", `datatype "INT32", want BYTES`},
		{"two inputs", `{"inputs":[{"name":"a","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5}},{"name":"b","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5}}]}` + le32(1) + "a" + le32(1) + "b", "", "2 tensors, want exactly 1"},
		{"unknown output", `{"inputs":[{"name":"t","shape":[1],"datatype":"BYTES","data":["a"]}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`, "-", `no output "OUTPUT0"; the model has one output, "output"`},
		{"two outputs", `{"inputs":[{"name":"t","shape":[1],"datatype":"BYTES","data":["a"]}],"outputs":[{"name":"output"},{"name":"output"}]}`, "-", "outputs: 2 requested"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var hdr []string
			switch c.headerLen {
			case "":
				hdr = []string{"Inference-Header-Content-Length", strconv.Itoa(strings.Index(c.body, "}]}") + 3)}
			case "-":
			default:
				hdr = []string{"Inference-Header-Content-Length", c.headerLen}
			}
			hdr = append(hdr, "Content-Type", "application/octet-stream")
			r := serve(h, "POST", "/v2/models/m/infer", c.body, hdr...)
			var e struct{ Error string }
			if r.status != 400 || json.Unmarshal(r.body, &e) != nil || !strings.Contains(e.Error, c.want) {
				t.Errorf("got %d %s, want 400 saying %q", r.status, r.body, c.want)
			}
		})
	}
	// Two Inference-Header-Content-Length headers.
	body := in("[2]", 11) + two
	n := strconv.Itoa(len(in("[2]", 11)))
	if r := serve(h, "POST", "/v2/models/m/infer", body, "Inference-Header-Content-Length", n, "Inference-Header-Content-Length", n); r.status != 400 {
		t.Errorf("two headers: %d %s", r.status, r.body)
	}
	if len(f.requests()) != 0 {
		t.Errorf("%d refused requests reached the engine", len(f.requests()))
	}
	// A binary body on a route that is not OIP infer is refused unread.
	if r := serve(h, "POST", "/v1/models/m/infer", body, "Content-Type", "application/octet-stream"); r.status != 415 {
		t.Errorf("octet-stream on /v1: %d %s", r.status, r.body)
	}
}

// oipClient is a client of the extension written from its description,
// as Triton's Python client sends by default: inputs as binary, outputs
// asked for as binary.
type oipClient struct {
	url      string
	client   *http.Client
	compress string // "", "gzip" or "deflate"
}

func (c oipClient) infer(ctx context.Context, model string, inputs []string, shape []int64) (outputs []string, version string, err error) {
	var tensor []byte
	for _, s := range inputs {
		tensor = binary.LittleEndian.AppendUint32(tensor, uint32(len(s)))
		tensor = append(tensor, s...)
	}
	header, err := json.Marshal(map[string]any{
		"inputs": []any{map[string]any{"name": "INPUT0", "shape": shape, "datatype": "BYTES",
			"parameters": map[string]any{"binary_data_size": len(tensor)}}},
		"outputs": []any{map[string]any{"name": "output", "parameters": map[string]any{"binary_data": true}}},
	})
	if err != nil {
		return nil, "", err
	}
	body := append(header, tensor...)
	if c.compress != "" {
		var buf bytes.Buffer
		var w io.WriteCloser
		if c.compress == "gzip" {
			w = gzip.NewWriter(&buf)
		} else {
			w = zlib.NewWriter(&buf)
		}
		if _, err := w.Write(body); err != nil {
			return nil, "", err
		}
		if err := w.Close(); err != nil {
			return nil, "", err
		}
		body = buf.Bytes()
	}
	req, err := http.NewRequestWithContext(ctx, "POST", c.url+"/v2/models/"+model+"/infer", bytes.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(header)))
	req.Header.Set("Content-Type", "application/octet-stream")
	if c.compress != "" {
		req.Header.Set("Content-Encoding", c.compress)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != 200 {
		return nil, "", fmt.Errorf("status %d: %s", resp.StatusCode, reply)
	}
	n, err := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
	if err != nil || n > len(reply) {
		return nil, "", fmt.Errorf("Inference-Header-Content-Length %q for %d bytes", resp.Header.Get("Inference-Header-Content-Length"), len(reply))
	}
	var rh struct {
		ModelVersion string `json:"model_version"`
		Outputs      []struct {
			Name       string
			Shape      []int64
			Parameters struct {
				BinaryDataSize int `json:"binary_data_size"`
			}
		}
	}
	if err := json.Unmarshal(reply[:n], &rh); err != nil {
		return nil, "", err
	}
	data := reply[n:]
	if len(rh.Outputs) != 1 || rh.Outputs[0].Parameters.BinaryDataSize != len(data) {
		return nil, "", fmt.Errorf("reply header %s for %d bytes", reply[:n], len(data))
	}
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, "", fmt.Errorf("%d bytes left", len(data))
		}
		size := int(binary.LittleEndian.Uint32(data))
		if size > len(data)-4 {
			return nil, "", fmt.Errorf("element of %d bytes, %d left", size, len(data)-4)
		}
		outputs = append(outputs, string(data[4:4+size]))
		data = data[4+size:]
	}
	return outputs, rh.ModelVersion, nil
}

// TestV2BinaryRoundTrip: the client above, over real HTTP, to the real
// engine, plain and compressed: every output is its own input's.
func TestV2BinaryRoundTrip(t *testing.T) { bothServers(t, testV2BinaryRoundTrip) }

func testV2BinaryRoundTrip(t *testing.T, lane bool) {
	ec := engineConfig()
	ec.Batcher.Models = []actors.ModelConfig{{Name: "m", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}}}
	l := startLiveOn(t, ec, httpapi.DefaultConfig(), lane)
	inputs := []string{"", "a", "héllo wörld", strings.Repeat("z", 300), "\x00\x01 control bytes \u2028"}
	for _, compress := range []string{"", "gzip", "deflate"} {
		c := oipClient{url: l.srv.URL, client: l.srv.Client(), compress: compress}
		ctx, cancel := context.WithTimeout(context.Background(), waitMax)
		outs, version, err := c.infer(ctx, "m", inputs, []int64{int64(len(inputs)), 1})
		cancel()
		if err != nil {
			t.Fatalf("compress %q: %v", compress, err)
		}
		if len(outs) != len(inputs) {
			t.Fatalf("compress %q: %d outputs for %d inputs", compress, len(outs), len(inputs))
		}
		for i, in := range inputs {
			if outs[i] != actors.EmulatedOutput("m", version, in) {
				t.Errorf("compress %q: output %d = %q, not input %q's", compress, i, outs[i], in)
			}
		}
	}
}

// TestV2TrailingSlash: the OIP routes answer with a trailing slash too
// (some clients build URLs with one), and only those: what is below them
// is still 404.
func TestV2TrailingSlash(t *testing.T) {
	h := newHandler(t, &fakeDoer{}, httpapi.DefaultConfig())
	for path, want := range map[string]int{
		"/v2": 200, "/v2/": 200, "/v2/health/live/": 200, "/v2/health/ready/": 200,
		"/v2/models/m/": 200, "/v2/models/m/versions/v1/": 200, "/v2/models/m/ready/": 200, "/v2/models/m/versions/v1/ready/": 200,
		"/v2/x": 404, "/v2/x/": 404, "/v2/health/": 404, "/v2/health/live/x": 404, "/v2/models/m/ready/x": 404,
	} {
		r := serve(h, "GET", path, "")
		if r.status != want {
			t.Errorf("GET %s: %d %s, want %d", path, r.status, r.body, want)
		}
	}
	for _, path := range []string{"/v2", "/v2/"} {
		var meta struct {
			Name       string
			Extensions []string
		}
		r := serve(h, "GET", path, "")
		if err := json.Unmarshal(r.body, &meta); err != nil || meta.Name != "batchd" || len(meta.Extensions) != 1 || meta.Extensions[0] != "binary_tensor_data" {
			t.Errorf("GET %s: %s", path, r.body)
		}
	}
	for _, path := range []string{"/v2/models/m/infer/", "/v2/models/m/versions/v1/infer/"} {
		if r := serve(h, "POST", path, `{"inputs":[{"name":"t","shape":[1],"datatype":"BYTES","data":["x"]}]}`); r.status != 200 {
			t.Errorf("POST %s: %d %s", path, r.status, r.body)
		}
	}
}

// TestV2NestedData: data nested as its shape says, of any rank, is read
// row-major; nested otherwise, it is a 400.
func TestV2NestedData(t *testing.T) {
	f := &fakeDoer{}
	h := newHandler(t, f, httpapi.DefaultConfig())
	body := func(shape, data string) string {
		return `{"inputs":[{"name":"t","shape":` + shape + `,"datatype":"BYTES","data":` + data + `}]}`
	}
	ok := []struct{ shape, data string }{
		{"[2,1]", `[["a"],["b"]]`},
		{"[1,2]", `[["a","b"]]`},
		{"[2,2,1]", `[[["a"],["b"]],[["c"],["d"]]]`},
		{"[1,2,1,2]", `[[[["a","b"]],[["c","d"]]]]`},
		{"[2,2,1]", `["a","b","c","d"]`}, // flat, any rank
		{"[1,1,1,1,1,1,1,1]", `[[[[[[[["a"]]]]]]]]`},
	}
	for _, c := range ok {
		r := serve(h, "POST", "/v2/models/m/infer", body(c.shape, c.data))
		var out struct{ Outputs []struct{ Data []string } }
		if r.status != 200 || json.Unmarshal(r.body, &out) != nil || len(out.Outputs) != 1 {
			t.Errorf("shape %s, data %s: %d %s", c.shape, c.data, r.status, r.body)
			continue
		}
		// The outputs are in the order the elements were read: row-major
		// is a, b, c, d.
		var want []string
		for _, in := range strings.Split("abcd"[:strings.Count(c.data, `"`)/2], "") {
			want = append(want, actors.EmulatedOutput("m", "v1", in))
		}
		if strings.Join(out.Outputs[0].Data, ",") != strings.Join(want, ",") {
			t.Errorf("shape %s, data %s: outputs %q, want %q", c.shape, c.data, out.Outputs[0].Data, want)
		}
	}
	for _, c := range []struct{ shape, data, want string }{
		{"[2,2,1]", `[[["a"],["b"]],[["c"]]]`, "data[1] has 1 elements, shape [2 2 1] wants 2"},
		{"[2,2,1]", `[[["a"],["b"]],[["c"],["d","e"]]]`, "data[1][1] has 2 elements"},
		{"[2,2,1]", `[["a","b"],["c","d"]]`, "data[0][0] must be an array of strings"},
		{"[2,2]", `[[["a"],["b"]],[["c"],["d"]]]`, "data[0] must be an array of strings"},
		{"[4]", `[["a","b"],["c","d"]]`, "nested data for shape [4]"},
		{"[2,1]", `[["a"],"b"]`, "data[1] must be an array of strings"},
		{"[2,1]", `[["a"],[null]]`, "missing input"},
		{"[" + strings.Repeat("1,", 32) + "1]", `["a"]`, "shape of rank 33, over 32"},
	} {
		r := serve(h, "POST", "/v2/models/m/infer", body(c.shape, c.data))
		var e struct{ Error string }
		if r.status != 400 || json.Unmarshal(r.body, &e) != nil || !strings.Contains(e.Error, c.want) {
			t.Errorf("shape %s, data %s: %d %s, want 400 saying %q", c.shape, c.data, r.status, r.body, c.want)
		}
	}
}

// TestContentEncoding: gzip and deflate bodies (zlib, as HTTP defines
// deflate, or raw) decode to what they compress, on /v2 and /v1 alike;
// one that decompresses past the body limit is 413 however small it is;
// an unknown coding is 415 naming the ones taken; a corrupt one is 400.
func TestContentEncoding(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.BodyMaxBytes = 64 << 10
	f := &fakeDoer{}
	h := newHandler(t, f, cfg)
	const v2Body = `{"inputs":[{"name":"t","shape":[2],"datatype":"BYTES","data":["x","y"]}]}`
	const v1Body = `{"input": "x"}`
	coders := map[string]func(io.Writer) io.WriteCloser{
		"gzip":   func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) },
		"x-gzip": func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) },
		"deflate": func(w io.Writer) io.WriteCloser {
			return zlib.NewWriter(w)
		},
		"Deflate (raw)": func(w io.Writer) io.WriteCloser {
			fw, _ := flate.NewWriter(w, flate.BestSpeed)
			return fw
		},
	}
	compress := func(enc, s string) string {
		var b bytes.Buffer
		w := coders[enc](&b)
		if _, err := io.WriteString(w, s); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for enc := range coders {
		header, _, _ := strings.Cut(enc, " ")
		r := serve(h, "POST", "/v2/models/m/infer", compress(enc, v2Body), "Content-Encoding", header)
		if r.status != 200 || !strings.Contains(string(r.body), actors.EmulatedOutput("m", "v1", "y")) {
			t.Errorf("%s on /v2: %d %s", enc, r.status, r.body)
		}
		r = serve(h, "POST", "/v1/models/m/infer", compress(enc, v1Body), "Content-Encoding", header)
		if r.status != 200 || !strings.Contains(string(r.body), actors.EmulatedOutput("m", "v1", "x")) {
			t.Errorf("%s on /v1: %d %s", enc, r.status, r.body)
		}
	}
	if r := serve(h, "POST", "/v1/models/m/infer", v1Body, "Content-Encoding", "identity"); r.status != 200 {
		t.Errorf("identity: %d %s", r.status, r.body)
	}

	// The limit applies to the decompressed body: exactly at it is taken,
	// one byte past it is 413, and so is a bomb, however small.
	padded := func(n int) string { // a /v1 body of exactly n bytes
		return `{"input": "x"}` + strings.Repeat(" ", n-len(`{"input": "x"}`))
	}
	if r := serve(h, "POST", "/v1/models/m/infer", compress("gzip", padded(64<<10)), "Content-Encoding", "gzip"); r.status != 200 {
		t.Errorf("decompressed to the limit: %d %s", r.status, r.body)
	}
	if r := serve(h, "POST", "/v1/models/m/infer", compress("gzip", padded(64<<10+1)), "Content-Encoding", "gzip"); r.status != 413 {
		t.Errorf("decompressed one byte past the limit: %d %s", r.status, r.body)
	}
	bomb := compress("deflate", `{"input": "`+strings.Repeat("a", 64<<20)) // 64 MiB in about 64 KiB
	if len(bomb) > 128<<10 {
		t.Fatalf("test bug: a bomb of %d bytes", len(bomb))
	}
	for _, path := range []string{"/v1/models/m/infer", "/v2/models/m/infer"} {
		r := serve(h, "POST", path, bomb, "Content-Encoding", "deflate")
		if r.status != 413 || r.header.Get("Connection") != "close" {
			t.Errorf("bomb on %s: %d %v %s", path, r.status, r.header, r.body)
		}
	}

	for _, c := range []struct {
		name   string
		hdr    []string
		body   string
		status int
		want   string
	}{
		{"br", []string{"Content-Encoding", "br"}, v1Body, 415, `Content-Encoding "br": send gzip, deflate, or none`},
		{"two codings", []string{"Content-Encoding", "gzip", "Content-Encoding", "gzip"}, compress("gzip", compress("gzip", v1Body)), 415, "more than one Content-Encoding"},
		{"coding list", []string{"Content-Encoding", "gzip, deflate"}, v1Body, 415, `Content-Encoding "gzip, deflate"`},
		{"not gzip", []string{"Content-Encoding", "gzip"}, v1Body, 400, "Content-Encoding gzip: the body does not decompress: gzip: invalid header"},
		{"gzip cut short", []string{"Content-Encoding", "gzip"}, compress("gzip", v1Body)[:20], 400, "unexpected EOF"},
		{"gzip then garbage", []string{"Content-Encoding", "gzip"}, compress("gzip", v1Body) + "not another gzip member", 400, "gzip: invalid header"},
		{"zlib then garbage", []string{"Content-Encoding", "deflate"}, compress("deflate", v1Body) + "xyz", 400, "bytes after the end of the compressed stream"},
		{"not deflate", []string{"Content-Encoding", "deflate"}, "\xff\xff\xff", 400, "Content-Encoding deflate: the body does not decompress"},
	} {
		r := serve(h, "POST", "/v1/models/m/infer", c.body, c.hdr...)
		var e struct{ Error struct{ Message string } }
		if r.status != c.status || json.Unmarshal(r.body, &e) != nil || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, r.status, r.body, c.status, c.want)
		}
		if c.status == 415 && r.header.Get("Accept-Encoding") != "gzip, deflate" {
			t.Errorf("%s: 415 with Accept-Encoding %q", c.name, r.header.Get("Accept-Encoding"))
		}
	}
}
