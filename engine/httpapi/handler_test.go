package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/engine/httpapi"
)

func TestSyncInfer(t *testing.T) {
	f := &fakeDoer{}
	f.advance(time.Second)
	h := newHandler(t, f, httpapi.DefaultConfig())
	r := serve(h, "POST", "/v1/models/m/infer", `{"input": "hello", "priority": "high", "timeout_ms": 250, "params": {"b": [1, {"z": 1, "y": 2}], "a": "x"}}`)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var got struct {
		ID        string  `json:"id"`
		Output    string  `json:"output"`
		Model     string  `json:"model"`
		Version   string  `json:"version"`
		LatencyMs float64 `json:"latency_ms"`
		QueueMs   float64 `json:"queue_ms"`
		ComputeMs float64 `json:"compute_ms"`
		BatchSize int     `json:"batch_size"`
		Attempts  int     `json:"attempts"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID == "" || got.Output != actors.EmulatedOutput("m", "v1", "hello") || got.Model != "m" || got.Version != "v1" ||
		got.LatencyMs != 5 || got.QueueMs != 2 || got.ComputeMs != 3 || got.BatchSize != 4 || got.Attempts != 1 {
		t.Errorf("answer %+v", got)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d engine calls", len(reqs))
	}
	q := reqs[0]
	want := actors.Request{Tenant: httpapi.DefaultTenant, Model: "m", Priority: actors.PriorityHigh, Input: "hello",
		Params: `{"a":"x","b":[1,{"y":2,"z":1}]}`, Deadline: time.Second + 250*time.Millisecond}
	if q != want {
		t.Errorf("engine request\n got %+v\nwant %+v", q, want)
	}
}

// Equal params, written differently, must land on one batch key; a
// timeout above TimeoutMax is lowered to it.
func TestParamsCanonicalAndTimeoutCap(t *testing.T) {
	f := &fakeDoer{}
	cfg := httpapi.DefaultConfig()
	cfg.TimeoutMax = 2 * time.Second
	h := newHandler(t, f, cfg)
	for _, body := range []string{
		`{"input": "a", "params": {"temp": 0.5, "k": {"y": 1, "x": 2}}, "timeout_ms": 99999999999999999}`,
		`{"params": { "k": {"x":2,"y":1}, "temp":0.5 }, "input": "a"}`,
		`{"input": "a", "params": {}}`,
		`{"input": "a", "params": null}`,
	} {
		if r := serve(h, "POST", "/v1/models/m/infer", body); r.status != 200 {
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
	}
	reqs := f.requests()
	if reqs[0].Params != reqs[1].Params || reqs[0].Params != `{"k":{"x":2,"y":1},"temp":0.5}` {
		t.Errorf("params %q and %q", reqs[0].Params, reqs[1].Params)
	}
	if reqs[2].Params != "" || reqs[3].Params != "" {
		t.Errorf("empty params became %q, %q", reqs[2].Params, reqs[3].Params)
	}
	if reqs[0].Deadline != 2*time.Second || reqs[1].Deadline != 0 {
		t.Errorf("deadlines %v, %v: want the cap, then none", reqs[0].Deadline, reqs[1].Deadline)
	}
}

// Every engine outcome maps to its status, code and retry hint.
func TestReplyStatusCodes(t *testing.T) {
	cases := []struct {
		name       string
		rep        actors.Reply
		err        error
		status     int
		code       string
		retryAfter string
		retryMs    float64
	}{
		{"rate limited", actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonRateLimited, RetryAfter: 1500 * time.Millisecond}, nil, 429, "rate_limited", "2", 1500},
		{"quota, no hint", actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonQuota}, nil, 429, "quota", "1", 1000},
		{"queue full", actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonQueueFull, RetryAfter: 250 * time.Millisecond}, nil, 503, "queue_full", "1", 250},
		{"overloaded", actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonOverloaded, RetryAfter: 3 * time.Second}, nil, 503, "overloaded", "3", 3000},
		{"no device", actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonNoDevice, RetryAfter: time.Second}, nil, 503, "no_device", "1", 1000},
		{"draining", actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonDraining}, nil, 503, "draining", "1", 1000},
		{"unknown model", actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonUnknownModel}, nil, 404, "unknown_model", "", 0},
		{"invalid", actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonInvalid}, nil, 400, "invalid", "", 0},
		{"expired", actors.Reply{Outcome: actors.Expired, Reason: actors.ReasonDeadline}, nil, 504, "deadline", "", 0},
		{"backend", actors.Reply{Outcome: actors.Failed, Reason: actors.ReasonBackend, Err: "boom"}, nil, 500, "backend", "", 0},
		{"attempts", actors.Reply{Outcome: actors.Failed, Reason: actors.ReasonAttempts}, nil, 500, "attempts", "", 0},
		{"in-flight bound", actors.Reply{}, fmt.Errorf("engine: %w", engine.ErrInFlightMax), 503, "overloaded", "1", 1000},
		{"engine closed", actors.Reply{}, engine.ErrClosed, 503, "draining", "1", 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeDoer{}
			f.setReply(func(context.Context, actors.Request) (actors.Reply, error) { return c.rep, c.err })
			h := newHandler(t, f, httpapi.DefaultConfig())
			r := serve(h, "POST", "/v1/models/m/infer", `{"input": "x"}`)
			if r.status != c.status || r.errCode(t) != c.code {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, c.status, c.code)
			}
			if got := r.header.Get("Retry-After"); got != c.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, c.retryAfter)
			}
			e := r.json(t)["error"].(map[string]any)
			if ms, _ := e["retry_after_ms"].(float64); ms != c.retryMs {
				t.Errorf("retry_after_ms %v, want %v", ms, c.retryMs)
			}
			// The same reply on the OIP route: same status, v2 error shape.
			r = serve(h, "POST", "/v2/models/m/infer", `{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}`)
			if r.status != c.status {
				t.Errorf("v2: status %d, want %d", r.status, c.status)
			}
			if msg, ok := r.json(t)["error"].(string); !ok || msg == "" {
				t.Errorf("v2 error body %s", r.body)
			}
		})
	}
}

// Bad input is refused with 400 or 413 and never reaches the engine.
func TestBadInput(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.InputMaxBytes = 16
	cfg.BodyMaxBytes = 256
	cfg.BatchItemsMax = 3
	cfg.Models = []actors.ModelConfig{{Name: "m", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}},
		{Name: "short", InputLenMax: 4, Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}}}
	cases := []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"bad JSON", "/v1/models/m/infer", `{"input": `, 400, "bad_request"},
		{"empty body", "/v1/models/m/infer", ``, 400, "bad_request"},
		{"not an object", "/v1/models/m/infer", `["input"]`, 400, "bad_request"},
		{"two values", "/v1/models/m/infer", `{"input": "a"} {"input": "b"}`, 400, "bad_request"},
		{"unknown field", "/v1/models/m/infer", `{"input": "a", "timeout": 5}`, 400, "bad_request"},
		{"missing input", "/v1/models/m/infer", `{"version": "v1"}`, 400, "bad_request"},
		{"null input", "/v1/models/m/infer", `{"input": null}`, 400, "bad_request"},
		{"input not a string", "/v1/models/m/infer", `{"input": 5}`, 400, "bad_request"},
		{"oversize input", "/v1/models/m/infer", `{"input": "0123456789abcdefg"}`, 400, "bad_request"},
		{"over the model's InputLenMax", "/v1/models/short/infer", `{"input": "12345"}`, 400, "bad_request"},
		{"invalid UTF-8", "/v1/models/m/infer", "{\"input\": \"\xff\xfe\"}", 400, "bad_request"},
		{"bad priority", "/v1/models/m/infer", `{"input": "a", "priority": "urgent"}`, 400, "bad_request"},
		{"zero timeout", "/v1/models/m/infer", `{"input": "a", "timeout_ms": 0}`, 400, "bad_request"},
		{"negative timeout", "/v1/models/m/infer", `{"input": "a", "timeout_ms": -5}`, 400, "bad_request"},
		{"params not an object", "/v1/models/m/infer", `{"input": "a", "params": [1]}`, 400, "bad_request"},
		{"body too large", "/v1/models/m/infer", `{"input": "` + strings.Repeat("a", 300) + `"}`, 413, "body_too_large"},
		{"unknown model", "/v1/models/nope/infer", `{"input": "a"}`, 404, "unknown_model"},
		{"unknown version", "/v1/models/m/infer", `{"input": "a", "version": "v9"}`, 404, "unknown_model"},
		{"control char in model", "/v1/models/a%01b/infer", `{"input": "a"}`, 400, "bad_request"},
		{"batch: no items", "/v1/models/m/batch", `{"items": []}`, 400, "bad_request"},
		{"batch: too many items", "/v1/models/m/batch", `{"items": [{"input": "a"}, {"input": "b"}, {"input": "c"}, {"input": "d"}]}`, 400, "bad_request"},
		{"batch: one item without input", "/v1/models/m/batch", `{"items": [{"input": "a"}, {}]}`, 400, "bad_request"},
		{"batch: async is not a batch field", "/v1/models/m/batch", `{"items": [{"input": "a"}], "async": true}`, 400, "bad_request"},
		{"wrong method", "/v1/models/m/infer?x", ``, 405, "method_not_allowed"},
		{"no route", "/v1/nothing", ``, 404, "not_found"},
	}
	f := &fakeDoer{}
	h := newHandler(t, f, cfg)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := "POST"
			if c.status == 405 || c.path == "/v1/nothing" {
				method = "GET"
			}
			r := serve(h, method, c.path, c.body)
			if r.status != c.status || r.errCode(t) != c.code {
				t.Errorf("got %d %s, want %d %s", r.status, r.body, c.status, c.code)
			}
		})
	}
	v2 := []struct{ name, path, body string }{
		{"two tensors", "/v2/models/m/infer", `{"inputs": [{"name": "a", "shape": [1], "datatype": "BYTES", "data": ["x"]}, {"name": "b", "shape": [1], "datatype": "BYTES", "data": ["y"]}]}`},
		{"not BYTES", "/v2/models/m/infer", `{"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1.0]}]}`},
		{"shape mismatch", "/v2/models/m/infer", `{"inputs": [{"name": "a", "shape": [2], "datatype": "BYTES", "data": ["x"]}]}`},
		{"negative shape", "/v2/models/m/infer", `{"inputs": [{"name": "a", "shape": [-1], "datatype": "BYTES", "data": ["x"]}]}`},
		{"too many elements", "/v2/models/m/infer", `{"inputs": [{"name": "a", "shape": [4], "datatype": "BYTES", "data": ["a", "b", "c", "d"]}]}`},
		{"number data", "/v2/models/m/infer", `{"inputs": [{"name": "a", "shape": [1], "datatype": "BYTES", "data": [1]}]}`},
		{"id not a string", "/v2/models/m/infer", `{"id": 7, "inputs": [{"name": "a", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}`},
		{"oversize element", "/v2/models/m/infer", `{"inputs": [{"name": "a", "shape": [1], "datatype": "BYTES", "data": ["0123456789abcdefg"]}]}`},
	}
	for _, c := range v2 {
		t.Run("v2 "+c.name, func(t *testing.T) {
			r := serve(h, "POST", c.path, c.body)
			if msg, ok := r.json(t)["error"].(string); r.status != 400 || !ok || msg == "" {
				t.Errorf("got %d %s, want 400 and a v2 error", r.status, r.body)
			}
		})
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d bad requests reached the engine", n)
	}
}

func TestAuth(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.APIKeys = []httpapi.APIKey{{Key: "key-a", Tenant: "alice"}, {Key: "key-b", Tenant: "bob", Models: []string{"m"}}}
	f := &fakeDoer{}
	h := newHandler(t, f, cfg)
	body := `{"input": "x"}`
	for _, c := range []struct {
		name, path string
		hdr        []string
		status     int
		code       string
	}{
		{"no header", "/v1/models/m/infer", nil, 401, "unauthorized"},
		{"not bearer", "/v1/models/m/infer", []string{"Authorization", "Basic a2V5LWE6"}, 401, "unauthorized"},
		{"unknown key", "/v1/models/m/infer", []string{"Authorization", "Bearer key-c"}, 401, "unauthorized"},
		{"model not allowed", "/v1/models/other/infer", []string{"Authorization", "Bearer key-b"}, 403, "forbidden"},
		{"alice", "/v1/models/m/infer", []string{"Authorization", "Bearer key-a"}, 200, ""},
		{"bob, lower-case scheme", "/v1/models/m/infer", []string{"Authorization", "bearer key-b"}, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := serve(h, "POST", c.path, body, c.hdr...)
			if r.status != c.status {
				t.Fatalf("got %d %s, want %d", r.status, r.body, c.status)
			}
			if c.code != "" && r.errCode(t) != c.code {
				t.Errorf("code %s, want %s", r.errCode(t), c.code)
			}
			if c.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	reqs := f.requests()
	if len(reqs) != 2 || reqs[0].Tenant != "alice" || reqs[1].Tenant != "bob" {
		t.Errorf("engine saw %+v", reqs)
	}
	// Probes need no key; the OIP model routes do; metrics, which name
	// every tenant, are for no tenant (TestMetricsExposure).
	for path, want := range map[string]int{"/v2/health/live": 200, "/v2/health/ready": 200, "/metrics": 403, "/v2/models/m": 401} {
		if r := serve(h, "GET", path, ""); r.status != want {
			t.Errorf("GET %s: %d, want %d", path, r.status, want)
		}
	}
}

// Without a job store (batchd serve always has one) an async request is
// refused, as an async batch is, and no request id is known; Shutdown
// turns readiness off.
func TestAsyncWithoutJobStore(t *testing.T) {
	f := &fakeDoer{}
	h, err := httpapi.New(enginetest.Door(f), httpapi.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if r := serve(h, "POST", "/v1/models/m/infer", `{"input": "x", "async": true}`); r.status != 400 || r.errCode(t) != "bad_request" {
		t.Errorf("async infer: %d %s", r.status, r.body)
	}
	if r := serve(h, "POST", "/v1/models/m/infer", `{"input": "x"}`, "Prefer", "wait=5, respond-async"); r.status != 400 || r.errCode(t) != "bad_request" {
		t.Errorf("Prefer: respond-async: %d %s", r.status, r.body)
	}
	if r := serve(h, "GET", "/v1/requests/NOSUCHID", ""); r.status != 404 || r.errCode(t) != "not_found" {
		t.Errorf("GET an id: %d %s", r.status, r.body)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests reached the engine", n)
	}
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := serve(h, "GET", "/v2/health/ready", ""); r.status != 503 {
		t.Errorf("ready after shutdown: %d", r.status)
	}
}

// A batch answers in input order, whatever order the engine answers in,
// with a status per item.
func TestBatchOrder(t *testing.T) {
	f := &fakeDoer{}
	const n = 40
	// Each item waits for the one after it, so the engine answers in
	// reverse order; the last waits for nothing.
	gates := make([]chan struct{}, n+1)
	for i := range gates {
		gates[i] = make(chan struct{})
	}
	close(gates[n])
	f.setReply(func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		var i int
		fmt.Sscanf(req.Input, "in-%d", &i)
		<-gates[i+1]
		defer close(gates[i])
		if i%7 == 3 {
			return actors.Reply{Outcome: actors.Failed, Reason: actors.ReasonBackend, Err: "item error"}, nil
		}
		return completed(f.Now(), req), nil
	})
	cfg := httpapi.DefaultConfig()
	h := newHandler(t, f, cfg)
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"input": "in-%d"}`, i)
	}
	r := serve(h, "POST", "/v1/models/m/batch", `{"version": "v2", "items": [`+strings.Join(items, ",")+`]}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var got struct {
		Items []struct {
			Status, Output, Version string
			Error                   *struct{ Code string }
			HTTPStatus              int `json:"http_status"`
		}
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Items) != n {
		t.Fatalf("%d items", len(got.Items))
	}
	for i, it := range got.Items {
		if i%7 == 3 {
			if it.Status != "failed" || it.Error == nil || it.Error.Code != "backend" || it.HTTPStatus != 500 {
				t.Errorf("item %d: %+v", i, it)
			}
			continue
		}
		if it.Status != "completed" || it.Output != actors.EmulatedOutput("m", "v2", fmt.Sprintf("in-%d", i)) || it.Version != "v2" {
			t.Errorf("item %d: %+v", i, it)
		}
	}
}

func TestOIP(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.Models = []actors.ModelConfig{{Name: "m", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}, {Name: "v2", Weight: 1}}}}
	ready := true
	cfg.Ready = func(context.Context, string) bool { return ready }
	f := &fakeDoer{}
	h := newHandler(t, f, cfg)

	if r := serve(h, "GET", "/v2/health/live", ""); r.status != 200 || r.json(t)["live"] != true {
		t.Errorf("live: %d %s", r.status, r.body)
	}
	if r := serve(h, "GET", "/v2/health/ready", ""); r.status != 200 || r.json(t)["ready"] != true {
		t.Errorf("ready: %d %s", r.status, r.body)
	}
	r := serve(h, "GET", "/v2/models/m", "")
	var meta struct {
		Name, Platform string
		Versions       []string
		Inputs         []struct {
			Name, Datatype string
			Shape          []int64
		}
		Outputs []struct{ Name, Datatype string }
	}
	if err := json.Unmarshal(r.body, &meta); err != nil || r.status != 200 {
		t.Fatalf("metadata: %d %s", r.status, r.body)
	}
	if meta.Name != "m" || meta.Platform != "batchd" || strings.Join(meta.Versions, ",") != "v1,v2" ||
		len(meta.Inputs) != 1 || meta.Inputs[0].Datatype != "BYTES" || meta.Inputs[0].Shape[0] != -1 ||
		len(meta.Outputs) != 1 || meta.Outputs[0].Datatype != "BYTES" {
		t.Errorf("metadata %+v", meta)
	}
	for path, want := range map[string]int{
		"/v2/models/m/versions/v2": 200, "/v2/models/m/versions/v3": 404, "/v2/models/x": 404,
		"/v2/models/m/ready": 200, "/v2/models/m/versions/v1/ready": 200, "/v2/models/x/ready": 404,
	} {
		r := serve(h, "GET", path, "")
		if r.status != want {
			t.Errorf("GET %s: %d, want %d", path, r.status, want)
		}
		if want == 404 {
			if msg, ok := r.json(t)["error"].(string); !ok || msg == "" {
				t.Errorf("GET %s: v2 error body %s", path, r.body)
			}
		}
	}

	// Infer: every element is one request; the id is echoed; one version.
	r = serve(h, "POST", "/v2/models/m/versions/v2/infer",
		`{"id": "req-42", "parameters": {"x": 1}, "inputs": [{"name": "text", "shape": [3, 1], "datatype": "BYTES", "data": [["a"], ["b"], ["c"]]}], "outputs": [{"name": "output"}]}`)
	var out struct {
		ModelName    string  `json:"model_name"`
		ModelVersion string  `json:"model_version"`
		ID           *string `json:"id"`
		Outputs      []struct {
			Name, Datatype string
			Shape          []int64
			Data           []string
		}
	}
	if err := json.Unmarshal(r.body, &out); err != nil || r.status != 200 {
		t.Fatalf("infer: %d %s", r.status, r.body)
	}
	if out.ModelName != "m" || out.ModelVersion != "v2" || out.ID == nil || *out.ID != "req-42" || len(out.Outputs) != 1 {
		t.Fatalf("infer answer %+v", out)
	}
	o := out.Outputs[0]
	if o.Name != "output" || o.Datatype != "BYTES" || len(o.Shape) != 1 || o.Shape[0] != 3 || len(o.Data) != 3 {
		t.Fatalf("output tensor %+v", o)
	}
	for i, in := range []string{"a", "b", "c"} {
		if o.Data[i] != actors.EmulatedOutput("m", "v2", in) {
			t.Errorf("data[%d] = %q", i, o.Data[i])
		}
	}
	// Without a version in the path, one is drawn for the whole request.
	r = serve(h, "POST", "/v2/models/m/infer", `{"inputs": [{"name": "text", "shape": [8], "datatype": "BYTES", "data": ["1","2","3","4","5","6","7","8"]}]}`)
	if r.status != 200 || r.json(t)["id"] != nil {
		t.Fatalf("infer without id: %d %s", r.status, r.body)
	}
	versions := map[string]bool{}
	for _, q := range f.requests()[3:] {
		versions[q.Version] = true
	}
	if len(versions) != 1 || versions[""] {
		t.Errorf("one OIP request ran on versions %v", versions)
	}

	ready = false
	if r := serve(h, "GET", "/v2/health/ready", ""); r.status != 503 {
		t.Errorf("not ready: %d", r.status)
	}
	if r := serve(h, "GET", "/v2/models/m/ready", ""); r.status != 503 {
		t.Errorf("model not ready: %d", r.status)
	}
}

// Every 503 of a server that is stopping says Connection: close, so
// clients and load balancers reconnect elsewhere instead of keeping a
// connection the stop waits on: the engine's draining refusals, the async
// and job intake's, and readiness after Shutdown. A 503 for load does not.
func TestDrainingClosesConnections(t *testing.T) {
	f := &fakeDoer{}
	h := newJobsHandler(t, f, httpapi.DefaultConfig(), nil)
	f.setReply(func(context.Context, actors.Request) (actors.Reply, error) {
		return actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonQueueFull}, nil
	})
	if r := serve(h, "POST", "/v1/models/m/infer", `{"input": "x"}`); r.status != 503 || r.header.Get("Connection") == "close" {
		t.Errorf("queue full: %d, Connection %q; want 503 on a kept connection", r.status, r.header.Get("Connection"))
	}
	for name, reply := range map[string]func(context.Context, actors.Request) (actors.Reply, error){
		"engine closed": func(context.Context, actors.Request) (actors.Reply, error) { return actors.Reply{}, engine.ErrClosed },
		"batcher draining": func(context.Context, actors.Request) (actors.Reply, error) {
			return actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonDraining}, nil
		},
	} {
		f.setReply(reply)
		for _, path := range []string{"/v1/models/m/infer", "/v2/models/m/infer"} {
			body := `{"input": "x"}`
			if strings.HasPrefix(path, "/v2") {
				body = `{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}`
			}
			if r := serve(h, "POST", path, body); r.status != 503 || r.header.Get("Connection") != "close" {
				t.Errorf("%s, %s: %d %s, Connection %q; want 503 and close", name, path, r.status, r.body, r.header.Get("Connection"))
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/models/m/infer", `{"input": "x", "async": true}`},
		{"GET", "/v2/health/ready", ""},
		{"GET", "/v2/models/m/ready", ""},
	} {
		if r := serve(h, c.method, c.path, c.body); r.status != 503 || r.header.Get("Connection") != "close" {
			t.Errorf("%s %s after Shutdown: %d, Connection %q; want 503 and close", c.method, c.path, r.status, r.header.Get("Connection"))
		}
	}
}

// Every POST route takes JSON: a body declared as something else is 415
// before it is read, on /v1 and /v2 alike; no Content-Type, JSON with its
// parameters, a +json type and curl -d's form type are served.
func TestContentType(t *testing.T) {
	h := newHandler(t, &fakeDoer{}, httpapi.DefaultConfig())
	routes := map[string]string{
		"/v1/models/m/infer": `{"input": "x"}`,
		"/v1/models/m/batch": `{"items": [{"input": "x"}]}`,
		"/v2/models/m/infer": `{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}`,
	}
	for path, body := range routes {
		for _, ct := range []string{"", "application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8",
			"application/vnd.batchd+json", "application/x-www-form-urlencoded"} {
			var hdr []string
			if ct != "" {
				hdr = []string{"Content-Type", ct}
			}
			if r := serve(h, "POST", path, body, hdr...); r.status != 200 {
				t.Errorf("POST %s, Content-Type %q: %d %s, want 200", path, ct, r.status, r.body)
			}
		}
		for _, ct := range []string{"text/plain", "text/plain; charset=utf-8", "application/xml", "multipart/form-data; boundary=x",
			"application/json; charset=utf-16", "application/jsonx", "json", "application/json; charset", "text/json"} {
			r := serve(h, "POST", path, body, "Content-Type", ct)
			if r.status != 415 || r.header.Get("Content-Type") != "application/json" {
				t.Errorf("POST %s, Content-Type %q: %d %s, want a JSON 415", path, ct, r.status, r.body)
			}
		}
		if r := serve(h, "POST", path, body, "Content-Type", "application/json", "Content-Type", "text/plain"); r.status != 415 {
			t.Errorf("POST %s with two Content-Types: %d, want 415", path, r.status)
		}
	}
	if r := serve(h, "POST", "/v1/models/m/infer", `{"input": "x"}`, "Content-Type", "text/plain"); r.errCode(t) != "unsupported_media_type" {
		t.Errorf("415 code %q", r.errCode(t))
	}
	// GET routes take no body, so their Content-Type does not matter.
	if r := serve(h, "GET", "/v2/health/ready", "", "Content-Type", "text/plain"); r.status != 200 {
		t.Errorf("GET with text/plain: %d", r.status)
	}
}

// A path with ".", ".." or empty segments is a JSON 404, not ServeMux's
// HTML redirect to the clean path.
func TestNonCanonicalPaths(t *testing.T) {
	h := newHandler(t, &fakeDoer{}, httpapi.DefaultConfig())
	for _, p := range []string{"/v1/models/m/../m/infer", "/v1//models/m/infer", "/v1/models/m/./infer", "/v2/../metrics", "/v2/health/ready/..", "//v2"} {
		r := serve(h, "POST", p, `{"input": "x"}`)
		if r.status != 404 {
			t.Errorf("POST %s: %d %s, want a JSON 404", p, r.status, r.body)
			continue
		}
		if strings.HasPrefix(p, "/v2") {
			if msg, ok := r.json(t)["error"].(string); !ok || msg == "" {
				t.Errorf("POST %s: %s, want the v2 error body", p, r.body)
			}
		} else if r.errCode(t) != "not_found" {
			t.Errorf("POST %s: %s, want not_found", p, r.body)
		}
	}
}

// /metrics names every tenant and model: open on an open API, but once
// tenants have keys, only a metrics key of its own reads it (or an
// explicit MetricsOpen) — not a tenant's key, not no key.
func TestMetricsExposure(t *testing.T) {
	keys := []httpapi.APIKey{{Key: "key-a", Tenant: "alice"}, {Key: "key-b", Tenant: "bob", Models: []string{"m"}}}
	alice, bob, scraper := []string{"Authorization", "Bearer key-a"}, []string{"Authorization", "Bearer key-b"}, []string{"Authorization", "Bearer scrape-me"}
	for _, c := range []struct {
		name  string
		setup func(*httpapi.Config)
		want  map[string]int // by who asks: none, alice, bob, scraper
	}{
		{"open API", func(*httpapi.Config) {}, map[string]int{"none": 200, "alice": 200, "scraper": 200}},
		{"keys", func(c *httpapi.Config) { c.APIKeys = keys }, map[string]int{"none": 403, "alice": 403, "bob": 403, "scraper": 403}},
		{"keys and a metrics key", func(c *httpapi.Config) { c.APIKeys, c.MetricsKey = keys, "scrape-me" },
			map[string]int{"none": 401, "alice": 401, "bob": 401, "scraper": 200}},
		{"metrics key on an open API", func(c *httpapi.Config) { c.MetricsKey = "scrape-me" }, map[string]int{"none": 401, "scraper": 200}},
		{"keys, metrics open", func(c *httpapi.Config) { c.APIKeys, c.MetricsOpen = keys, true }, map[string]int{"none": 200, "bob": 200}},
	} {
		cfg := httpapi.DefaultConfig()
		c.setup(&cfg)
		f := &fakeDoer{}
		h := newHandler(t, f, cfg)
		// A request of alice's, so that a readable /metrics names her.
		if r := serve(h, "POST", "/v1/models/m/infer", `{"input": "x"}`, alice...); cfg.APIKeys != nil && r.status != 200 {
			t.Fatalf("%s: alice's infer: %d", c.name, r.status)
		}
		for who, want := range c.want {
			hdr := map[string][]string{"none": nil, "alice": alice, "bob": bob, "scraper": scraper}[who]
			r := serve(h, "GET", "/metrics", "", hdr...)
			if r.status != want {
				t.Errorf("%s: /metrics asked by %s: %d %s, want %d", c.name, who, r.status, r.body, want)
			}
			if r.status != 200 && strings.Contains(string(r.body), "alice") {
				t.Errorf("%s: a refused /metrics names a tenant: %s", c.name, r.body)
			}
		}
	}
	cfg := httpapi.DefaultConfig()
	cfg.APIKeys, cfg.MetricsKey = []httpapi.APIKey{{Key: "same-key", Tenant: "a"}}, "same-key"
	if _, err := httpapi.New(enginetest.Door(&fakeDoer{}), cfg); err == nil {
		t.Error("a tenant's key as the metrics key: accepted")
	}
	cfg.APIKeys, cfg.MetricsOpen = nil, true
	if _, err := httpapi.New(enginetest.Door(&fakeDoer{}), cfg); err == nil {
		t.Error("a metrics key and metrics open: accepted")
	}
}

// A model's readiness is asked about that model: one no device can take
// is 503 while another is 200; the server as a whole asks with "", and an
// unknown model is 404 without asking.
func TestModelReadyAsksForTheModel(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.Models = []actors.ModelConfig{
		{Name: "up", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}},
		{Name: "down", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}},
	}
	var mu sync.Mutex
	var asked []string
	cfg.Ready = func(_ context.Context, model string) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, model)
		return model != "down"
	}
	h := newHandler(t, &fakeDoer{}, cfg)
	for path, want := range map[string]int{
		"/v2/health/ready":                  200,
		"/v2/models/up/ready":               200,
		"/v2/models/up/versions/v1/ready":   200,
		"/v2/models/down/ready":             503,
		"/v2/models/down/versions/v1/ready": 503,
		"/v2/models/nope/ready":             404,
	} {
		if r := serve(h, "GET", path, ""); r.status != want {
			t.Errorf("GET %s: %d %s, want %d", path, r.status, r.body, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(asked)
	if got := strings.Join(asked, ","); got != ",down,down,up,up" {
		t.Errorf("Ready asked about %q, want the server once and each known model by name", got)
	}
}

// A client that goes away cancels its request: the context Do got ends.
func TestDisconnectCancels(t *testing.T) {
	f := &fakeDoer{}
	entered := make(chan struct{})
	cancelled := make(chan error, 1)
	f.setReply(func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		close(entered)
		<-ctx.Done()
		cancelled <- ctx.Err()
		return actors.Reply{}, ctx.Err()
	})
	h := newHandler(t, f, httpapi.DefaultConfig())
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/models/m/infer", strings.NewReader(`{"input": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-entered:
	case <-time.After(waitMax):
		t.Fatal("request never reached the engine")
	}
	cancel()
	select {
	case err := <-cancelled:
		if err != context.Canceled {
			t.Errorf("Do's ctx ended with %v, want context.Canceled", err)
		}
	case <-time.After(waitMax):
		t.Fatal("the client left and Do's ctx did not end")
	}
	if err := <-errc; err == nil {
		t.Error("client got an answer after cancelling")
	}
}

func TestMetrics(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.APIKeys = []httpapi.APIKey{{Key: "k", Tenant: "acme"}}
	cfg.MetricsKey = "metrics-key"
	// The engine's devices are actors 16 on: people see them from 0.
	cfg.Devices = []actors.Address{{ID: 16}, {ID: 17}}
	cfg.Signals = func(ctx context.Context) (actors.Signals, error) {
		return actors.Signals{
			Keys: []actors.KeySignal{
				{Key: actors.Key{Model: "m", Version: "v1", Params: `{"a":1}`}, Depth: 3, WaitOldest: 40 * time.Millisecond, SlackMin: 10 * time.Millisecond, Rate: 100, BatchSizeMean: 20, DevicesNeeded: 0.5},
				{Key: actors.Key{Model: "m", Version: "v1"}, Depth: 2, WaitOldest: 60 * time.Millisecond, SlackMin: -time.Millisecond, Rate: 50},
			},
			Devices:        []actors.DeviceSignal{{Device: actors.Address{ID: 16}, BusyFraction: 0.25, Healthy: true}, {Device: actors.Address{ID: 17}}, {Device: actors.Address{Node: "n2", ID: 1}, Healthy: true}},
			DevicesNeeded:  3,
			DevicesHealthy: 1,
			Overrun:        2500 * time.Microsecond,
			SuspectsCapped: true,
		}, nil
	}
	f := &fakeDoer{}
	h := newHandler(t, f, cfg)
	auth := []string{"Authorization", "Bearer k"}
	serve(h, "POST", "/v1/models/m/infer", `{"input": "x"}`, auth...)
	f.setReply(func(context.Context, actors.Request) (actors.Reply, error) {
		return actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonQueueFull}, nil
	})
	serve(h, "POST", "/v1/models/m/infer", `{"input": "x"}`, auth...)
	r := serve(h, "GET", "/metrics", "", "Authorization", "Bearer metrics-key")
	if r.status != 200 {
		t.Fatalf("metrics: %d", r.status)
	}
	text := string(r.body)
	for _, want := range []string{
		`batchd_requests_total{model="m",outcome="completed",reason="none",tenant="acme"} 1`,
		`batchd_requests_total{model="m",outcome="rejected",reason="queue_full",tenant="acme"} 1`,
		`batchd_http_responses_total{code="503",route="/v1/models/{model}/infer"} 1`,
		`batchd_queue_wait_seconds_bucket{model="m",le="0.0025"} 1`,
		`batchd_compute_seconds_count{model="m"} 1`,
		`batchd_latency_seconds_count{model="m",outcome="completed"} 1`,
		`batchd_batch_size_bucket{model="m",le="4"} 1`,
		`batchd_signals_up 1`,
		`batchd_queue_depth{bucket="0",model="m",version="v1"} 5`,
		`batchd_queue_wait_oldest_seconds{bucket="0",model="m",version="v1"} 0.06`,
		`batchd_queue_slack_min_seconds{bucket="0",model="m",version="v1"} -0.001`,
		`batchd_device_busy_fraction{device="0"} 0.25`,
		`batchd_device_healthy{device="1"} 0`,
		`batchd_device_healthy{device="addr-n2/1"} 1`,
		`batchd_devices_healthy 1`,
		`batchd_devices_needed 3`,
		`batchd_batch_overrun_seconds 0.0025`,
		`batchd_suspects_capped 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// Without a registry, made-up model names cannot grow the metric series
// without bound.
func TestMetricsModelLabelsBounded(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.ModelLabelsMax = 2
	h := newHandler(t, &fakeDoer{}, cfg)
	for i := range 5 {
		serve(h, "POST", fmt.Sprintf("/v1/models/m%d/infer", i), `{"input": "x"}`)
	}
	text := string(serve(h, "GET", "/metrics", "").body)
	if !strings.Contains(text, `batchd_requests_total{model="other",outcome="completed",reason="none",tenant="default"} 3`) ||
		strings.Contains(text, `model="m2"`) {
		t.Errorf("model labels not bounded:\n%s", text)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []func(*httpapi.Config){
		func(c *httpapi.Config) { c.BodyMaxBytes = 0 },
		func(c *httpapi.Config) { c.InputMaxBytes = 0 },
		func(c *httpapi.Config) { c.BatchItemsMax = 0 },
		func(c *httpapi.Config) { c.TimeoutMax = 0 },
		func(c *httpapi.Config) {
			c.APIKeys = []httpapi.APIKey{{Key: "a", Tenant: "t"}, {Key: "a", Tenant: "u"}}
		},
		func(c *httpapi.Config) { c.APIKeys = []httpapi.APIKey{{Key: "a"}} },
		func(c *httpapi.Config) { c.Models = []actors.ModelConfig{{Name: "m"}} },
	}
	for i, mod := range bad {
		c := httpapi.DefaultConfig()
		mod(&c)
		if _, err := httpapi.New(enginetest.Door(&fakeDoer{}), c); err == nil {
			t.Errorf("bad config %d accepted", i)
		}
	}
	if _, err := httpapi.New(nil, httpapi.DefaultConfig()); err == nil {
		t.Error("nil engine accepted")
	}
}

func TestNewServer(t *testing.T) {
	s := httpapi.NewServer("127.0.0.1:0", http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 || s.ReadTimeout != 0 || s.WriteTimeout != 0 {
		t.Errorf("server timeouts %+v", s)
	}
}

// A body that trickles in is cut off at BodyReadTimeout with 408, while a
// request whose body arrived may wait far longer than that for its reply:
// the read deadline covers the body only.
func TestBodyReadTimeout(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.BodyReadTimeout = 50 * time.Millisecond
	f := &fakeDoer{}
	f.setReply(func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		select { // a slow engine: several read timeouts long
		case <-time.After(4 * cfg.BodyReadTimeout):
		case <-ctx.Done():
			return actors.Reply{}, ctx.Err()
		}
		return completed(0, req), nil
	})
	h := newHandler(t, f, cfg)
	srv := httptest.NewUnstartedServer(h)
	srv.Config = httpapi.NewServer("", h)
	srv.Start()
	defer srv.Close()

	resp, err := srv.Client().Post(srv.URL+"/v1/models/m/infer", "application/json", strings.NewReader(`{"input": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("slow reply: %d, want 200", resp.StatusCode)
	}

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"input\": "); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(waitMax))
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("trickled body: %d, want 408", resp.StatusCode)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d engine calls, want 1", n)
	}
}

// A request refused before its body is read (here 401) cannot hold the
// connection by trickling that body: net/http drains it before answering,
// within the same BodyReadTimeout.
func TestRefusedBodyTrickle(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.BodyReadTimeout = 50 * time.Millisecond
	cfg.APIKeys = []httpapi.APIKey{{Key: "k", Tenant: "t"}}
	h := newHandler(t, &fakeDoer{}, cfg)
	srv := httptest.NewUnstartedServer(h)
	srv.Config = httpapi.NewServer("", h)
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(waitMax))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", resp.StatusCode)
	}
}
