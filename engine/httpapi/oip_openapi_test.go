package httpapi_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/httpapi"
)

// The Open Inference Protocol's own OpenAPI document
// (testdata/oip/open_inference_rest.yaml, verbatim from
// kserve/open-inference-protocol; see testdata/oip/README.md) checks every
// /v2 exchange the REST tests make: newHandler and startLive put
// oipRecorder in front of the handler, which records each request and
// response and validates them with kin-openapi's openapi3filter. A
// deviation fails the test that made the exchange.
//
// What is checked, and what is not:
//   - A route the document does not have (HEAD, a wrong method, a path
//     below or beside the routes) is outside it: counted, not checked. The
//     unversioned model routes are in it, as aliases of the versioned ones
//     (see loadOIPSpec).
//   - A request is validated (path parameters, body against
//     inference_request). An invalid request is what many tests send on
//     purpose (the malformed corpus, the 400 tests), so it fails a test
//     only if batchd answered it 2xx.
//   - A response is validated where the document describes its status
//     for that route: 200 everywhere, 400 for GET /v2/ and infer. Every
//     other status batchd answers (401, 404, 405, 413, 415, 429, 5xx; a
//     400 of model metadata or ready) the document does not describe, and
//     such responses are counted as such, not checked. Health's and
//     ready's 200 have no content in the document: their status is all
//     there is to check.
//   - The binary tensor data extension (a body of Inference-Header-Content-
//     Length bytes of JSON, then raw tensor bytes) is outside the document,
//     whose bodies are application/json only. Its JSON header is validated
//     against the same schema (inference_request, inference_response) on
//     its own, with the one difference the extension makes: a tensor whose
//     parameters have binary_data_size has no "data", which the schema
//     requires. Only that "required" error, at that tensor, is forgiven.
//     The raw bytes are the byte-for-byte tests' (v2binary_test.go).
//   - A compressed request body (Content-Encoding gzip or deflate) is
//     validated decompressed. A body the handler did not read to its end
//     (refused first) is not validated; the rest of the request is.
//   - A request with a body and no Content-Type (most tests send none),
//     or one of the other types batchd reads as JSON (application/*+json,
//     application/x-www-form-urlencoded: see checkContentType), has its
//     body validated as application/json, the document's only type, and
//     is counted.
//   - A body nested past oipDepthMax levels is not validated (kin-openapi
//     would take 2^depth steps), and is counted; answered 2xx, it fails.

// oipSpecPath is the document, verbatim.
const oipSpecPath = "testdata/oip/open_inference_rest.yaml"

// oipSpec is the loaded document and its router.
type oipSpec struct {
	doc    *openapi3.T
	router routers.Router
}

// oipTemplate is the document's path templating, ${MODEL_NAME}: not
// OpenAPI's, which is {MODEL_NAME}, and which routers match.
var oipTemplate = regexp.MustCompile(`\$\{(\w+)\}`)

var loadOIPSpec = sync.OnceValues(func() (*oipSpec, error) {
	raw, err := os.ReadFile(oipSpecPath)
	if err != nil {
		return nil, err
	}
	// In memory only: ${X} becomes {X}, in the paths (the only place the
	// document has it).
	raw = oipTemplate.ReplaceAll(raw, []byte("{$1}"))
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("the document: %w", err)
	}
	// The protocol's prose (inference_rest.md, "HTTP/REST") gives every
	// model route with its version optional,
	// "v2/models/<model_name>[/versions/<model_version>]/infer"; the
	// document has the versioned routes only. The unversioned ones are
	// added here as aliases of those (same operations, same schemas,
	// without the MODEL_VERSION parameter), in memory. (The prose's
	// "GET v2" and the document's "/v2/" need no alias: the legacy router
	// matches a path with or without its trailing slash, so "/v2" and
	// "/v2/" both reach the document's "/v2/", and batchd's trailing-slash
	// forms of the other routes reach their operations.)
	alias := func(from, to, drop string) error {
		pi := doc.Paths.Value(to)
		if pi == nil {
			return fmt.Errorf("the document has no path %s", to)
		}
		cp := *pi
		// Operation ids are unique in a document: the alias's gets a
		// suffix.
		for method, op := range pi.Operations() {
			opCopy := *op
			opCopy.OperationID += "-alias-" + from
			cp.SetOperation(method, &opCopy)
		}
		cp.Parameters = nil
		for _, p := range pi.Parameters {
			if p.Value == nil || p.Value.Name != drop {
				cp.Parameters = append(cp.Parameters, p)
			}
		}
		doc.Paths.Set(from, &cp)
		return nil
	}
	for _, suffix := range []string{"", "/ready", "/infer"} {
		if err := alias("/v2/models/{MODEL_NAME}"+suffix, "/v2/models/{MODEL_NAME}/versions/{MODEL_VERSION}"+suffix, "MODEL_VERSION"); err != nil {
			return nil, err
		}
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &oipSpec{doc: doc, router: router}, nil
})

func mustOIPSpec(t testing.TB) *oipSpec {
	t.Helper()
	s, err := loadOIPSpec()
	if err != nil {
		t.Fatalf("%s: %v", oipSpecPath, err)
	}
	return s
}

// oipExchange is one recorded request and its response.
type oipExchange struct {
	req *http.Request // method, URL and header; its body is reqBody
	// reqBody is what the handler read of the body; reqWhole: all of it.
	reqBody    []byte
	reqWhole   bool
	status     int
	respHeader http.Header
	respBody   []byte
}

// oipResult is what the document says of an exchange.
type oipResult struct {
	op          string // "POST /v2/models/{MODEL_NAME}/infer"; "" when the document has no such route
	reqErr      error  // the request does not validate
	respChecked bool   // the document describes this status for this route
	respErr     error  // the response does not validate
	binary      int    // JSON headers of binary bodies validated (0 to 2)
	assumedJSON bool   // a body of another Content-Type validated as application/json (readAsJSON)
	tooDeep     bool   // a body nested past oipDepthMax, not validated
}

// oipDepthMax bounds the nesting of a body the validator is given. The
// document's tensor_data is recursive (an array of anyOf tensor_data,
// number, string, boolean), and kin-openapi validates the anyOf branch
// that matched a second time (to set defaults), so nested data costs
// 2^depth visits: the malformed corpus's data nested 5000 deep would
// never end. A body nested deeper (data of rank 13 or more; batchd
// refuses data nested past its shape's rank, at most 32) is not validated,
// and is counted; if batchd answered it 2xx, the test fails.
const oipDepthMax = 16

// jsonPart is the JSON of a body: all of it, or the part its
// Inference-Header-Content-Length says.
func jsonPart(body []byte, hdr http.Header) []byte {
	if v := hdr.Get(oipHeaderLen); v != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 && n <= len(body) {
			return body[:n]
		}
	}
	return body
}

// jsonDepth is the deepest nesting of arrays and objects in b, JSON or
// not.
func jsonDepth(b []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// oipHeaderLen is the binary tensor data extension's header: the length
// of the JSON that begins the body.
const oipHeaderLen = "Inference-Header-Content-Length"

// check validates ex against the document.
func (s *oipSpec) check(ctx context.Context, ex oipExchange) oipResult {
	var res oipResult
	req := ex.req.Clone(ctx)
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		return res
	}
	res.op = req.Method + " " + route.Path
	in := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      route,
		Options:    &openapi3filter.Options{MultiError: true},
	}
	body, bodyErr := oipDecoded(ex)
	var headerErr error
	switch {
	case !ex.reqWhole:
		in.Options.ExcludeRequestBody = true
	case bodyErr != nil:
		in.Options.ExcludeRequestBody = true
		headerErr = bodyErr
	case jsonDepth(jsonPart(body, req.Header)) > oipDepthMax:
		in.Options.ExcludeRequestBody = true
		res.tooDeep = true
	case req.Header.Get(oipHeaderLen) != "":
		in.Options.ExcludeRequestBody = true
		headerErr = s.checkBinary(body, req.Header.Get(oipHeaderLen), route.Operation.RequestBody)
		res.binary++
	default:
		if len(body) > 0 && readAsJSON(req.Header.Get("Content-Type")) {
			req.Header.Set("Content-Type", "application/json")
			res.assumedJSON = true
		}
		req.Header.Del("Content-Encoding")
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	res.reqErr = errors.Join(openapi3filter.ValidateRequest(ctx, in), headerErr)

	ref := route.Operation.Responses.Status(ex.status)
	if ref == nil {
		return res
	}
	res.respChecked = true
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 ex.status,
		Header:                 ex.respHeader,
		Body:                   io.NopCloser(bytes.NewReader(ex.respBody)),
		Options:                &openapi3filter.Options{MultiError: true},
	}
	if n := ex.respHeader.Get(oipHeaderLen); n != "" {
		rin.Options.ExcludeResponseBody = true
		var desc *openapi3.Response
		if ref.Value != nil {
			desc = ref.Value
		}
		headerErr = s.checkBinaryResponse(ex.respBody, n, desc)
		res.binary++
		res.respErr = errors.Join(openapi3filter.ValidateResponse(ctx, rin), headerErr)
		return res
	}
	res.respErr = openapi3filter.ValidateResponse(ctx, rin)
	return res
}

// readAsJSON: a Content-Type other than application/json that batchd
// reads as JSON (checkContentType): none, application/*+json, and
// application/x-www-form-urlencoded (what `curl -d` declares). The
// document's request body is application/json alone; such a request's
// body is validated as application/json, and counted.
func readAsJSON(ct string) bool {
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case strings.TrimSpace(ct) == "":
		return true
	case mt == "application/x-www-form-urlencoded":
		return true
	case strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return true
	}
	return false
}

// oipDecoded is the request's body as its Content-Encoding says to read it.
func oipDecoded(ex oipExchange) ([]byte, error) {
	var r io.ReadCloser
	var err error
	switch enc := strings.ToLower(strings.TrimSpace(ex.req.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return ex.reqBody, nil
	case "gzip", "x-gzip":
		r, err = gzip.NewReader(bytes.NewReader(ex.reqBody))
	case "deflate":
		// zlib (RFC 9110's "deflate"), or the raw deflate some clients
		// send under that name; batchd takes both.
		if r, err = zlib.NewReader(bytes.NewReader(ex.reqBody)); err != nil {
			r, err = flate.NewReader(bytes.NewReader(ex.reqBody)), nil
		}
	default:
		return nil, fmt.Errorf("Content-Encoding %q", enc)
	}
	if err != nil {
		return nil, fmt.Errorf("Content-Encoding: %w", err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("Content-Encoding: %w", err)
	}
	return b, nil
}

// checkBinary validates the JSON header of a binary tensor data request
// body against the request's application/json schema.
func (s *oipSpec) checkBinary(body []byte, headerLen string, rb *openapi3.RequestBodyRef) error {
	if rb == nil || rb.Value == nil {
		return errors.New("binary body: the document has no request body here")
	}
	return checkBinaryHeader(body, headerLen, rb.Value.Content.Get("application/json"), "inputs")
}

// checkBinaryResponse is checkBinary for a response.
func (s *oipSpec) checkBinaryResponse(body []byte, headerLen string, desc *openapi3.Response) error {
	if desc == nil {
		return errors.New("binary body: the response is not resolved")
	}
	return checkBinaryHeader(body, headerLen, desc.Content.Get("application/json"), "outputs")
}

// checkBinaryHeader validates the first headerLen bytes of body, JSON,
// against mt's schema, forgiving only a missing "data" of a tensor (in
// the array tensors) whose parameters have binary_data_size: the binary
// tensor data extension's tensors have their data after the JSON.
func checkBinaryHeader(body []byte, headerLen string, mt *openapi3.MediaType, tensors string) error {
	if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
		return errors.New("binary body: the document has no application/json schema here")
	}
	n, err := strconv.Atoi(strings.TrimSpace(headerLen))
	if err != nil || n <= 0 || n > len(body) {
		return fmt.Errorf("binary body: %s %q for a body of %d bytes", oipHeaderLen, headerLen, len(body))
	}
	var v any
	if err := json.Unmarshal(body[:n], &v); err != nil {
		return fmt.Errorf("binary body: its JSON header: %w", err)
	}
	err = mt.Schema.Value.VisitJSON(v, openapi3.MultiErrors())
	if err == nil {
		return nil
	}
	var kept []error
	for _, e := range flattenSchemaErrors(err) {
		var se *openapi3.SchemaError
		if errors.As(e, &se) && binaryDataOmitted(v, tensors, se) {
			continue
		}
		kept = append(kept, e)
	}
	if len(kept) == 0 {
		return nil
	}
	return fmt.Errorf("binary body's JSON header: %w", openapi3.MultiError(kept))
}

func flattenSchemaErrors(err error) []error {
	var me openapi3.MultiError
	if !errors.As(err, &me) {
		return []error{err}
	}
	var out []error
	for _, e := range me {
		out = append(out, flattenSchemaErrors(e)...)
	}
	return out
}

// binaryDataOmitted: se is "data" missing from tensors[i], and tensors[i]
// has parameters.binary_data_size.
func binaryDataOmitted(v any, tensors string, se *openapi3.SchemaError) bool {
	p := se.JSONPointer()
	if se.SchemaField != "required" || len(p) != 3 || p[0] != tensors || p[2] != "data" {
		return false
	}
	i, err := strconv.Atoi(p[1])
	if err != nil {
		return false
	}
	top, _ := v.(map[string]any)
	list, _ := top[tensors].([]any)
	if i < 0 || i >= len(list) {
		return false
	}
	tensor, _ := list[i].(map[string]any)
	params, _ := tensor["parameters"].(map[string]any)
	_, ok := params["binary_data_size"].(float64)
	return ok
}

// oipCounts counts exchanges by what the document says of them.
type oipCounts struct {
	exchanges   atomic.Int64 // /v2 exchanges recorded
	outside     atomic.Int64 // on no route of the document
	requests    atomic.Int64 // requests that validate
	invalidReqs atomic.Int64 // requests that do not (answered 4xx)
	responses   atomic.Int64 // responses that validate
	undescribed atomic.Int64 // responses of a status the document does not describe
	binary      atomic.Int64 // binary JSON headers validated
	assumedJSON atomic.Int64 // bodies of another Content-Type validated as JSON (readAsJSON)
	tooDeep     atomic.Int64 // bodies nested past oipDepthMax, not validated
}

func (c *oipCounts) String() string {
	return fmt.Sprintf("%d /v2 exchanges: %d outside the document's routes; requests: %d valid, %d invalid (answered 4xx); responses: %d valid, %d of a status the document does not describe; %d binary JSON headers validated; %d bodies without Content-Type (or +json, or form-urlencoded) validated as application/json; %d bodies nested past %d levels not validated",
		c.exchanges.Load(), c.outside.Load(), c.requests.Load(), c.invalidReqs.Load(), c.responses.Load(), c.undescribed.Load(), c.binary.Load(), c.assumedJSON.Load(), c.tooDeep.Load(), oipDepthMax)
}

// oipTotal counts the whole run's exchanges (TestMain reads it).
var oipTotal oipCounts

// oipRecorder is the middleware: it records each /v2 exchange through it
// and fails t where the exchange deviates from the document.
type oipRecorder struct {
	t      testing.TB
	spec   *oipSpec
	counts oipCounts
}

func newOIPRecorder(t testing.TB) *oipRecorder {
	return &oipRecorder{t: t, spec: mustOIPSpec(t)}
}

func (o *oipRecorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { o.serve(next, w, r) })
}

func (o *oipRecorder) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v2" && !strings.HasPrefix(r.URL.Path, "/v2/") {
		next.ServeHTTP(w, r)
		return
	}
	tee := &teeBody{rc: r.Body}
	if r.Body == nil || r.Body == http.NoBody {
		tee.eof = true
	} else {
		r.Body = tee
	}
	rec := &recordingWriter{ResponseWriter: w}
	next.ServeHTTP(rec, r)
	if rec.header == nil {
		rec.snapshot(http.StatusOK)
	}
	o.record(oipExchange{
		req:        r,
		reqBody:    tee.buf.Bytes(),
		reqWhole:   tee.eof,
		status:     rec.status,
		respHeader: rec.header,
		respBody:   rec.body.Bytes(),
	})
}

// record checks ex and counts it, in o and in oipTotal.
func (o *oipRecorder) record(ex oipExchange) {
	res := o.spec.check(context.Background(), ex)
	what := ex.req.Method + " " + ex.req.URL.Path
	for _, c := range []*oipCounts{&o.counts, &oipTotal} {
		c.exchanges.Add(1)
		if res.op == "" {
			c.outside.Add(1)
			continue
		}
		switch {
		case res.reqErr != nil:
			c.invalidReqs.Add(1)
		case res.tooDeep:
			c.tooDeep.Add(1)
		default:
			c.requests.Add(1)
		}
		switch {
		case !res.respChecked:
			c.undescribed.Add(1)
		case res.respErr == nil:
			c.responses.Add(1)
		}
		c.binary.Add(int64(res.binary))
		if res.assumedJSON {
			c.assumedJSON.Add(1)
		}
	}
	if res.op == "" {
		return
	}
	if res.tooDeep && ex.status/100 == 2 {
		o.t.Errorf("OIP document: %s (%s) answered %d, but its body, nested past %d levels, was not validated", what, res.op, ex.status, oipDepthMax)
	}
	if res.reqErr != nil && ex.status/100 == 2 {
		o.t.Errorf("OIP document: %s (%s) answered %d, but the request does not validate: %v\nrequest body: %.500q", what, res.op, ex.status, res.reqErr, ex.reqBody)
	}
	if res.respErr != nil {
		o.t.Errorf("OIP document: %s (%s): the %d response does not validate: %v\nresponse body: %.500q", what, res.op, ex.status, res.respErr, ex.respBody)
	}
}

// teeBody keeps what is read of a request body, and whether it was read
// to its end.
type teeBody struct {
	rc  io.ReadCloser
	buf bytes.Buffer
	eof bool
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.buf.Write(p[:n])
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *teeBody) Close() error { return b.rc.Close() }

// recordingWriter keeps the status, the header as sent and the body of a
// response. Unwrap lets http.ResponseController reach the real writer
// (the handler sets deadlines through it).
type recordingWriter struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (w *recordingWriter) snapshot(status int) {
	if w.header == nil {
		w.status = status
		w.header = w.ResponseWriter.Header().Clone()
	}
}

func (w *recordingWriter) WriteHeader(code int) {
	if code >= 200 {
		w.snapshot(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.snapshot(http.StatusOK)
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// checkedHandler is a Handler whose /v2 exchanges are checked against
// the document (newHandler makes every test's handler one).
type checkedHandler struct {
	*httpapi.Handler
	oip *oipRecorder
}

func (c *checkedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.oip.serve(c.Handler, w, r)
}

// checkOIPTotal fails a whole, unfiltered run of the package that
// validated no response against the document: the check would be
// vacuous.
func checkOIPTotal() int {
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		return 0
	}
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
		return 0
	}
	if oipTotal.responses.Load() == 0 || oipTotal.requests.Load() == 0 {
		fmt.Fprintf(os.Stderr, "FAIL: no /v2 exchange validated against %s (%s)\n", oipSpecPath, &oipTotal)
		return 1
	}
	if testing.Verbose() {
		fmt.Printf("OIP document: %s\n", &oipTotal)
	}
	return 0
}

// TestOIPDocument replays a representative set of OIP exchanges through
// the document check (the same as every test's, in newHandler): server
// metadata, health, model metadata and ready, with and without a version;
// infer with data flat and nested, an id, parameters, outputs asked for,
// binary tensor data in and out, a compressed body; and errors. Each must
// reach an operation of the document; its request must validate or not,
// and its response be validated or not, as the case says.
func TestOIPDocument(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.Models = []actors.ModelConfig{{Name: "m", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}}}
	h := newHandler(t, &fakeDoer{}, cfg)
	const input = `{"name": "input", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]}`
	binHeader := `{"inputs":[{"name":"input","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":10}}],` +
		`"outputs":[{"name":"output","parameters":{"binary_data":true}}]}`
	binBody := binHeader + le32(1) + "a" + le32(1) + "b"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"inputs": [` + input + `]}`))
	_ = zw.Close()
	jsonCT := []string{"Content-Type", "application/json"}
	for _, c := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		valid                    bool // the request validates
		described                bool // the document describes the response's status here
		binary                   int  // binary JSON headers validated
	}{
		{"server metadata", "GET", "/v2", "", nil, 200, true, true, 0},
		{"server metadata, slash", "GET", "/v2/", "", nil, 200, true, true, 0},
		{"live", "GET", "/v2/health/live", "", nil, 200, true, true, 0},
		{"ready", "GET", "/v2/health/ready", "", nil, 200, true, true, 0},
		{"model metadata", "GET", "/v2/models/m", "", nil, 200, true, true, 0},
		{"model metadata, version", "GET", "/v2/models/m/versions/v1", "", nil, 200, true, true, 0},
		{"model ready", "GET", "/v2/models/m/ready", "", nil, 200, true, true, 0},
		{"model ready, version", "GET", "/v2/models/m/versions/v1/ready", "", nil, 200, true, true, 0},
		{"infer, flat data", "POST", "/v2/models/m/infer", `{"inputs": [` + input + `]}`, jsonCT, 200, true, true, 0},
		{"infer, nested data", "POST", "/v2/models/m/infer",
			`{"inputs": [{"name": "input", "shape": [2, 2], "datatype": "BYTES", "data": [["a", "b"], ["c", "d"]]}]}`, jsonCT, 200, true, true, 0},
		{"infer, version, id, parameters, outputs", "POST", "/v2/models/m/versions/v1/infer",
			`{"id": "42", "parameters": {"p": 1}, "inputs": [` + input + `], "outputs": [{"name": "output", "parameters": {}}]}`, jsonCT, 200, true, true, 0},
		{"infer, binary reply", "POST", "/v2/models/m/infer",
			`{"parameters": {"binary_data_output": true}, "inputs": [` + input + `]}`, jsonCT, 200, true, true, 1},
		{"infer, binary both ways", "POST", "/v2/models/m/infer", binBody,
			[]string{"Content-Type", "application/octet-stream", "Inference-Header-Content-Length", strconv.Itoa(len(binHeader))}, 200, true, true, 2},
		{"infer, gzip", "POST", "/v2/models/m/infer", gz.String(), []string{"Content-Type", "application/json", "Content-Encoding", "gzip"}, 200, true, true, 0},
		{"infer, unknown output", "POST", "/v2/models/m/infer",
			`{"inputs": [` + input + `], "outputs": [{"name": "nope"}]}`, jsonCT, 400, true, true, 0},
		{"infer, FP32", "POST", "/v2/models/m/infer",
			`{"inputs": [{"name": "input", "shape": [1], "datatype": "FP32", "data": [1.5]}]}`, jsonCT, 400, true, true, 0},
		{"infer, not JSON", "POST", "/v2/models/m/infer", `{"inputs": [`, jsonCT, 400, false, true, 0},
		{"infer, no shape", "POST", "/v2/models/m/infer",
			`{"inputs": [{"name": "input", "datatype": "BYTES", "data": ["a"]}]}`, jsonCT, 400, false, true, 0},
		{"unknown model", "GET", "/v2/models/nope", "", nil, 404, true, false, 0},
		{"unknown version", "POST", "/v2/models/m/versions/v9/infer", `{"inputs": [` + input + `]}`, jsonCT, 404, true, false, 0},
	} {
		o := h.oip
		exchanges, requests, responses, binary := o.counts.exchanges.Load(), o.counts.requests.Load(), o.counts.responses.Load(), o.counts.binary.Load()
		r := serve(h, c.method, c.path, c.body, c.hdr...)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, r.status, c.status, r.body)
			continue
		}
		if d := o.counts.exchanges.Load() - exchanges; d != 1 {
			t.Errorf("%s: %d exchanges recorded, want 1", c.name, d)
		}
		if valid := o.counts.requests.Load() - requests; (valid == 1) != c.valid {
			t.Errorf("%s: request validates: %v, want %v", c.name, valid == 1, c.valid)
		}
		if checked := o.counts.responses.Load() - responses; (checked == 1) != c.described {
			t.Errorf("%s: response validated: %v, want %v", c.name, checked == 1, c.described)
		}
		if d := o.counts.binary.Load() - binary; d != int64(c.binary) {
			t.Errorf("%s: %d binary JSON headers validated, want %d", c.name, d, c.binary)
		}
	}
	if o := &h.oip.counts; o.responses.Load() == 0 || o.outside.Load() != 0 {
		t.Errorf("%s", o)
	}
	t.Logf("%s", &h.oip.counts)
}

// TestOIPDocumentCatches: the check fails what breaks the document. Each
// case is a real exchange of the handler with one thing broken (a field
// renamed, a type changed), after the unbroken exchange has passed; the
// renames keep their length, so that a binary body's header length still
// holds.
func TestOIPDocumentCatches(t *testing.T) {
	spec := mustOIPSpec(t)
	h := newHandler(t, &fakeDoer{}, httpapi.DefaultConfig())
	exchange := func(method, path, body string, hdr ...string) oipExchange {
		t.Helper()
		r := serve(h, method, path, body, hdr...)
		req := httptest.NewRequest(method, path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		return oipExchange{req: req, reqBody: []byte(body), reqWhole: true, status: r.status, respHeader: r.header, respBody: r.body}
	}
	replace := func(b []byte, old, new string) []byte {
		t.Helper()
		if !bytes.Contains(b, []byte(old)) {
			t.Fatalf("no %q in %q", old, b)
		}
		return bytes.Replace(b, []byte(old), []byte(new), 1)
	}
	binHeader := `{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5}}]}`
	for _, c := range []struct {
		name   string
		ex     oipExchange
		break_ func(*oipExchange)
		req    bool // the request is broken (else the response)
	}{
		{"infer: model_name renamed", exchange("POST", "/v2/models/m/infer", `{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`),
			func(ex *oipExchange) { ex.respBody = replace(ex.respBody, `"model_name"`, `"model_NAME"`) }, false},
		{"infer: shape of strings", exchange("POST", "/v2/models/m/infer", `{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`),
			func(ex *oipExchange) { ex.respBody = replace(ex.respBody, `"shape":[1]`, `"shape":["1"]`) }, false},
		{"infer: output without data", exchange("POST", "/v2/models/m/infer", `{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`),
			func(ex *oipExchange) { ex.respBody = replace(ex.respBody, `"data":`, `"values":`) }, false},
		{"infer: input without datatype", exchange("POST", "/v2/models/m/infer", `{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`),
			func(ex *oipExchange) { ex.reqBody = replace(ex.reqBody, `"datatype"`, `"dtype"`) }, true},
		{"infer 400: a v1 error body", exchange("POST", "/v2/models/m/infer", `{"inputs": [{"name": "input", "shape": [1], "datatype": "FP32", "data": [1]}]}`),
			func(ex *oipExchange) { ex.respBody = []byte(`{"error": {"code": "bad_request", "message": "x"}}`) }, false},
		{"server metadata: no extensions", exchange("GET", "/v2", ""),
			func(ex *oipExchange) { ex.respBody = replace(ex.respBody, `"extensions"`, `"extension"`) }, false},
		{"model metadata: no platform", exchange("GET", "/v2/models/m", ""),
			func(ex *oipExchange) { ex.respBody = replace(ex.respBody, `"platform"`, `"runtime"`) }, false},
		{"model metadata: a tensor's shape not an array", exchange("GET", "/v2/models/m", ""),
			func(ex *oipExchange) { ex.respBody = replace(ex.respBody, `"shape":[-1]`, `"shape":-1`) }, false},
		{"binary reply: output neither data nor binary_data_size", exchange("POST", "/v2/models/m/infer",
			`{"parameters": {"binary_data_output": true}, "inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`),
			func(ex *oipExchange) { ex.respBody = replace(ex.respBody, `"binary_data_size"`, `"binary_data_SIZE"`) }, false},
		{"binary reply: model_name renamed", exchange("POST", "/v2/models/m/infer",
			`{"parameters": {"binary_data_output": true}, "inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`),
			func(ex *oipExchange) { ex.respBody = replace(ex.respBody, `"model_name"`, `"model_NAME"`) }, false},
		{"binary request: input neither data nor binary_data_size", exchange("POST", "/v2/models/m/infer", binHeader+le32(1)+"a",
			"Content-Type", "application/octet-stream", "Inference-Header-Content-Length", strconv.Itoa(len(binHeader))),
			func(ex *oipExchange) { ex.reqBody = replace(ex.reqBody, `"binary_data_size"`, `"binary_data_SIZE"`) }, true},
	} {
		ctx := context.Background()
		if c.ex.status/100 != 2 && c.ex.status != 400 {
			t.Fatalf("%s: the unbroken exchange got %d: %s", c.name, c.ex.status, c.ex.respBody)
		}
		res := spec.check(ctx, c.ex)
		if res.op == "" || res.reqErr != nil || !res.respChecked || res.respErr != nil {
			t.Fatalf("%s: the unbroken exchange does not pass: %+v", c.name, res)
		}
		c.break_(&c.ex)
		res = spec.check(ctx, c.ex)
		if c.req && res.reqErr == nil {
			t.Errorf("%s: the broken request validates", c.name)
		}
		if !c.req && res.respErr == nil {
			t.Errorf("%s: the broken response validates", c.name)
		}
		// A schema error (kin-openapi's "Error at <pointer>"), not a
		// framing one: the breaks keep the binary headers' lengths.
		if err := errors.Join(res.reqErr, res.respErr); err == nil || !strings.Contains(err.Error(), `Error at "`) {
			t.Errorf("%s: not a schema error: %v", c.name, err)
		}
		t.Logf("%s: %v", c.name, errors.Join(res.reqErr, res.respErr))
	}
}
