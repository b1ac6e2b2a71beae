package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/engine/httpapi"
	"github.com/batchd/batchd/engine/jobs"
)

// newJobsHandler is a handler with a durable job store in a temporary
// directory, its runner feeding f.
func newJobsHandler(t *testing.T, f *fakeDoer, cfg httpapi.Config, tune func(*jobs.Config)) *checkedHandler {
	t.Helper()
	jc := jobs.DefaultConfig(filepath.Join(t.TempDir(), "jobs.db"))
	if tune != nil {
		tune(&jc)
	}
	s, err := jobs.Open(jc, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := jobs.NewRunner(s, enginetest.Door(f), nil)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// No grace: what is still in flight (a fake that never answers)
		// is withdrawn at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("runner stop: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	cfg.Jobs = r
	return newHandler(t, f, cfg)
}

type jobItem struct {
	Status     string `json:"status"`
	Output     string `json:"output"`
	Version    string `json:"version"`
	Attempts   int    `json:"attempts"`
	HTTPStatus int    `json:"http_status"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type jobReply struct {
	ID        string `json:"id"`
	StatusURL string `json:"status_url"`
	Kind      string `json:"kind"`
	Status    string `json:"status"`
	Model     string `json:"model"`
	Total     int    `json:"total"`
	Progress  struct {
		Completed, Failed, Cancelled, Expired, Total int
	} `json:"progress"`
	Output     string    `json:"output"`
	Version    string    `json:"version"`
	Attempts   int       `json:"attempts"`
	Items      []jobItem `json:"items"`
	Offset     *int      `json:"offset"`
	NextOffset *int      `json:"next_offset"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeJob(t *testing.T, r response) jobReply {
	t.Helper()
	var j jobReply
	if err := json.Unmarshal(r.body, &j); err != nil {
		t.Fatalf("%d: not a job: %v: %s", r.status, err, r.body)
	}
	return j
}

func batchBody(n int, prefix string, extra string) string {
	var b strings.Builder
	b.WriteString(`{"items": [`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"input": "%s-%d"}`, prefix, i)
	}
	b.WriteString("]" + extra + "}")
	return b.String()
}

// pollJob polls a job until it is finished (progress adds up).
func pollJob(t *testing.T, h http.Handler, id string, hdr ...string) jobReply {
	t.Helper()
	var j jobReply
	eventually(t, "job "+id, func() bool {
		r := serve(h, "GET", "/v1/requests/"+id, "", hdr...)
		if r.status != 200 {
			t.Fatalf("poll: %d %s", r.status, r.body)
		}
		j = decodeJob(t, r)
		p := j.Progress
		return p.Completed+p.Failed+p.Cancelled+p.Expired == p.Total
	})
	return j
}

func TestJobInferAsync(t *testing.T) {
	f := &fakeDoer{}
	h := newJobsHandler(t, f, httpapi.DefaultConfig(), nil)
	r := serve(h, "POST", "/v1/models/m/infer", `{"input": "hello", "async": true}`)
	if r.status != 202 {
		t.Fatalf("async infer: %d %s", r.status, r.body)
	}
	a := decodeJob(t, r)
	if a.ID == "" || a.StatusURL != "/v1/requests/"+a.ID || r.header.Get("Location") != a.StatusURL || a.Total != 1 {
		t.Fatalf("202 %+v, Location %q", a, r.header.Get("Location"))
	}
	j := pollJob(t, h, a.ID)
	if j.Kind != "infer" || j.Status != "completed" || j.Output != actors.EmulatedOutput("m", "v1", "hello") ||
		j.Version != "v1" || j.Attempts != 1 || j.Progress.Completed != 1 || j.Progress.Total != 1 || j.Model != "m" {
		t.Errorf("finished: %s", serve(h, "GET", "/v1/requests/"+a.ID, "").body)
	}
	// The Prefer header asks for it too; a failed item says why.
	f.setReply(func(_ context.Context, req actors.Request) (actors.Reply, error) {
		return actors.Reply{Outcome: actors.Failed, Reason: actors.ReasonBackend, Err: "boom"}, nil
	})
	r = serve(h, "POST", "/v1/models/m/infer", `{"input": "x"}`, "Prefer", "respond-async")
	if r.status != 202 || r.header.Get("Preference-Applied") != "respond-async" {
		t.Fatalf("Prefer: %d %s", r.status, r.body)
	}
	j = pollJob(t, h, decodeJob(t, r).ID)
	if j.Status != "failed" || j.Error == nil || j.Error.Code != "backend" || j.Error.Message != "boom" || j.Output != "" {
		t.Errorf("failed job %+v", j)
	}
}

// A large batch is a durable job: 202, then every item's result in input
// order, a page at a time.
func TestJobBatch(t *testing.T) {
	f := &fakeDoer{}
	h := newJobsHandler(t, f, httpapi.DefaultConfig(), nil)
	const n = 2500 // over BatchItemsMax: a job even without "async"
	r := serve(h, "POST", "/v1/models/m/batch", batchBody(n, "in", ""))
	if r.status != 202 {
		t.Fatalf("big batch: %d %s", r.status, r.body)
	}
	id := decodeJob(t, r).ID
	j := pollJob(t, h, id)
	if j.Kind != "batch" || j.Status != "completed" || j.Progress.Completed != n || j.Progress.Total != n {
		t.Fatalf("job %+v", j)
	}
	// Finished: the first page comes with the status.
	if len(j.Items) != 1000 || j.NextOffset == nil || *j.NextOffset != 1000 {
		t.Fatalf("first page: %d items, next %v", len(j.Items), j.NextOffset)
	}
	var all []jobItem
	for off := 0; ; {
		r := serve(h, "GET", fmt.Sprintf("/v1/requests/%s?offset=%d&limit=700", id, off), "")
		p := decodeJob(t, r)
		if r.status != 200 || p.Offset == nil || *p.Offset != off {
			t.Fatalf("page at %d: %d %s", off, r.status, r.body)
		}
		all = append(all, p.Items...)
		if p.NextOffset == nil {
			break
		}
		off = *p.NextOffset
	}
	if len(all) != n {
		t.Fatalf("%d items over the pages", len(all))
	}
	for i, it := range all {
		if it.Status != "completed" || it.Output != actors.EmulatedOutput("m", "v1", fmt.Sprintf("in-%d", i)) || it.Attempts != 1 {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	if got := len(f.requests()); got != n {
		t.Errorf("%d engine calls for %d items", got, n)
	}
	eventually(t, "job metrics", func() bool {
		m := string(serve(h, "GET", "/metrics", "").body)
		return strings.Contains(m, `batchd_job_items_total{outcome="completed"} 2500`+"\n") &&
			strings.Contains(m, "batchd_job_items_held 0\n") && strings.Contains(m, "batchd_jobs_active 0\n")
	})
	// A small batch stays synchronous; "async" makes it a job.
	if r := serve(h, "POST", "/v1/models/m/batch", batchBody(3, "s", "")); r.status != 200 {
		t.Errorf("small batch: %d %s", r.status, r.body)
	}
	r = serve(h, "POST", "/v1/models/m/batch", batchBody(3, "s", `, "async": true`))
	if r.status != 202 {
		t.Fatalf("small async batch: %d %s", r.status, r.body)
	}
	if j := pollJob(t, h, decodeJob(t, r).ID); j.Status != "completed" || len(j.Items) != 3 || j.NextOffset != nil {
		t.Errorf("small async batch %+v", j)
	}
}

// A job's items count in the request and batch metrics as synchronous
// requests do: they are requests handed to the engine too.
func TestJobItemsMetrics(t *testing.T) {
	f := &fakeDoer{}
	h := newJobsHandler(t, f, httpapi.DefaultConfig(), nil)
	f.setReply(func(_ context.Context, req actors.Request) (actors.Reply, error) {
		if req.Input == "in-1" {
			return actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonInvalid, Err: "bad input"}, nil
		}
		return completed(f.Now(), req), nil
	})
	r := serve(h, "POST", "/v1/models/m/batch", batchBody(3, "in", `, "async": true`))
	if r.status != 202 {
		t.Fatalf("async batch: %d %s", r.status, r.body)
	}
	if j := pollJob(t, h, decodeJob(t, r).ID); j.Status == "queued" || j.Status == "running" || j.Progress.Completed != 2 || j.Progress.Failed != 1 {
		t.Fatalf("job %+v", j)
	}
	// The runner observes each call before it writes the item: a
	// finished job's items are all counted.
	m := string(serve(h, "GET", "/metrics", "").body)
	for _, want := range []string{
		`batchd_requests_total{model="m",outcome="completed",reason="none",tenant="default"} 2` + "\n",
		`batchd_requests_total{model="m",outcome="rejected",reason="invalid",tenant="default"} 1` + "\n",
		`batchd_batch_size_count{model="m"} 2` + "\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
}

// Only the submitting tenant sees or cancels a job; others get 404.
func TestJobTenantIsolation(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.APIKeys = []httpapi.APIKey{{Key: "key-a", Tenant: "alice"}, {Key: "key-b", Tenant: "bob"}}
	f := &fakeDoer{}
	h := newJobsHandler(t, f, cfg, nil)
	alice := []string{"Authorization", "Bearer key-a"}
	bob := []string{"Authorization", "Bearer key-b"}
	r := serve(h, "POST", "/v1/models/m/batch", batchBody(5, "x", `, "async": true`), alice...)
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := decodeJob(t, r).ID
	pollJob(t, h, id, alice...)
	for _, method := range []string{"GET", "DELETE"} {
		if r := serve(h, method, "/v1/requests/"+id, "", bob...); r.status != 404 || r.errCode(t) != "not_found" {
			t.Errorf("bob %s alice's job: %d %s", method, r.status, r.body)
		}
	}
	if r := serve(h, "GET", "/v1/requests/"+id, ""); r.status != 401 {
		t.Errorf("no key: %d", r.status)
	}
	reqs := f.requests()
	if len(reqs) != 5 || reqs[0].Tenant != "alice" || reqs[0].Priority != actors.PriorityLow {
		t.Fatalf("engine saw %d requests, tenant %q, priority %d: a job's items carry its tenant, at low priority by default",
			len(reqs), reqs[0].Tenant, reqs[0].Priority)
	}
	// A job that names its priority keeps it.
	r = serve(h, "POST", "/v1/models/m/batch", batchBody(2, "hi", `, "async": true, "priority": "high"`), alice...)
	pollJob(t, h, decodeJob(t, r).ID, alice...)
	if reqs := f.requests(); len(reqs) != 7 || reqs[6].Priority != actors.PriorityHigh {
		t.Errorf("high-priority job's item at priority %d", reqs[len(reqs)-1].Priority)
	}
}

func TestJobCancel(t *testing.T) {
	f := &fakeDoer{}
	f.setReply(func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		<-ctx.Done() // never answered: only a cancel ends it
		return actors.Reply{}, ctx.Err()
	})
	h := newJobsHandler(t, f, httpapi.DefaultConfig(), func(c *jobs.Config) { c.WindowJob, c.WindowTotal = 20, 20 })
	r := serve(h, "POST", "/v1/models/m/batch", batchBody(500, "x", `, "async": true`))
	id := decodeJob(t, r).ID
	eventually(t, "items in flight", func() bool { return len(f.requests()) == 20 })
	r = serve(h, "DELETE", "/v1/requests/"+id, "")
	if c := decodeJob(t, r); r.status != 200 || c.Status != "cancelled" || c.Progress.Cancelled < 480 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	j := pollJob(t, h, id)
	if j.Status != "cancelled" || j.Progress.Cancelled != 500 || len(j.Items) != 500 {
		t.Fatalf("cancelled job: %+v", j.Progress)
	}
	for i, it := range j.Items {
		if it.Status != "cancelled" || it.Error == nil || it.Error.Code != "cancelled" {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	if n := len(f.requests()); n != 20 {
		t.Errorf("%d items reached the engine; only the 20 in flight at the cancel should have", n)
	}
	if r := serve(h, "DELETE", "/v1/requests/"+id, ""); r.status != 200 || decodeJob(t, r).Status != "cancelled" {
		t.Errorf("second delete: %d %s", r.status, r.body)
	}
	if r := serve(h, "DELETE", "/v1/requests/nope", ""); r.status != 404 {
		t.Errorf("delete unknown: %d", r.status)
	}
	if r := serve(h, "PUT", "/v1/requests/"+id, ""); r.status != 405 || r.header.Get("Allow") != "DELETE, GET" {
		t.Errorf("PUT: %d Allow %q", r.status, r.header.Get("Allow"))
	}
}

func TestJobIdempotency(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.APIKeys = []httpapi.APIKey{{Key: "key-a", Tenant: "alice"}, {Key: "key-b", Tenant: "bob"}}
	f := &fakeDoer{}
	h := newJobsHandler(t, f, cfg, nil)
	alice := []string{"Authorization", "Bearer key-a", "Idempotency-Key", "order-42"}
	r1 := serve(h, "POST", "/v1/models/m/batch", `{"items": [{"input": "a"}, {"input": "b"}], "async": true, "priority": "low"}`, alice...)
	if r1.status != 202 || r1.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %s", r1.status, r1.body)
	}
	id := decodeJob(t, r1).ID
	// The same request, written differently, is a retry.
	r2 := serve(h, "POST", "/v1/models/m/batch", `{"priority":"low","async":true,"items":[{"input":"a"},{"input":"b"}]}`, alice...)
	if r2.status != 202 || decodeJob(t, r2).ID != id || r2.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry: %d %s replayed %q", r2.status, r2.body, r2.header.Get("Idempotent-Replayed"))
	}
	// Another body under the same key is a conflict, and makes nothing.
	r3 := serve(h, "POST", "/v1/models/m/batch", `{"items": [{"input": "a"}, {"input": "c"}], "async": true, "priority": "low"}`, alice...)
	if r3.status != 409 || r3.errCode(t) != "idempotency_conflict" || !strings.Contains(string(r3.body), "Idempotency-Key") {
		t.Errorf("other body: %d %s", r3.status, r3.body)
	}
	// An infer under the same key is another body too.
	if r := serve(h, "POST", "/v1/models/m/infer", `{"input": "a", "async": true}`, alice...); r.status != 409 {
		t.Errorf("infer under a batch's key: %d %s", r.status, r.body)
	}
	// Keys are per tenant.
	r4 := serve(h, "POST", "/v1/models/m/batch", `{"items": [{"input": "a"}, {"input": "b"}], "async": true, "priority": "low"}`,
		"Authorization", "Bearer key-b", "Idempotency-Key", "order-42")
	if r4.status != 202 || decodeJob(t, r4).ID == id {
		t.Errorf("bob's same key: %d %s", r4.status, r4.body)
	}
	pollJob(t, h, id, alice[:2]...)
	pollJob(t, h, decodeJob(t, r4).ID, "Authorization", "Bearer key-b")
	if n := len(f.requests()); n != 4 {
		t.Errorf("%d engine calls, want 4 (two jobs of two)", n)
	}
	// An empty key is refused, not taken as none: the client's retries
	// would each make a new job.
	for _, path := range []string{"/v1/models/m/infer", "/v1/models/m/batch"} {
		body := `{"input": "a", "async": true}`
		if strings.HasSuffix(path, "batch") {
			body = `{"items": [{"input": "a"}], "async": true}`
		}
		r := serve(h, "POST", path, body, "Authorization", "Bearer key-a", "Idempotency-Key", "")
		if r.status != 400 || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), "Idempotency-Key header is empty") {
			t.Errorf("%s with an empty key: %d %s", path, r.status, r.body)
		}
	}
	bad := []string{"Idempotency-Key", "a\x7fb"}
	if r := serve(h, "POST", "/v1/models/m/infer", `{"input": "a", "async": true}`, append([]string{"Authorization", "Bearer key-a"}, bad...)...); r.status != 400 {
		t.Errorf("control character in the key: %d %s", r.status, r.body)
	}
}

// Bad requests and full stores are 4xx/5xx with clear errors, and store
// nothing.
func TestJobLimits(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.JobItemsMax = 2000
	f := &fakeDoer{}
	f.setReply(func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		<-ctx.Done()
		return actors.Reply{}, ctx.Err()
	})
	h := newJobsHandler(t, f, cfg, func(c *jobs.Config) { c.JobsMax = 1 })
	if r := serve(h, "POST", "/v1/models/m/batch", batchBody(2001, "x", "")); r.status != 400 || !strings.Contains(string(r.body), "want 1 to 2000") {
		t.Errorf("over JobItemsMax: %d %s", r.status, r.body)
	}
	r := serve(h, "POST", "/v1/models/m/batch", batchBody(3, "x", `, "async": true`))
	if r.status != 202 {
		t.Fatalf("first job: %d %s", r.status, r.body)
	}
	id := decodeJob(t, r).ID
	r = serve(h, "POST", "/v1/models/m/infer", `{"input": "x", "async": true}`)
	if r.status != 503 || r.errCode(t) != "store_full" || r.header.Get("Retry-After") == "" {
		t.Errorf("store full: %d %s", r.status, r.body)
	}
	for _, q := range []string{"?offset=-1", "?limit=x", "?limit=10001"} {
		if r := serve(h, "GET", "/v1/requests/"+id+q, ""); r.status != 400 || r.errCode(t) != "bad_request" {
			t.Errorf("%s: %d %s", q, r.status, r.body)
		}
	}
	// Without a job store, an async batch is refused.
	plain := newHandler(t, &fakeDoer{}, httpapi.DefaultConfig())
	if r := serve(plain, "POST", "/v1/models/m/batch", batchBody(2, "x", `, "async": true`)); r.status != 400 || !strings.Contains(string(r.body), "job store") {
		t.Errorf("async batch without a store: %d %s", r.status, r.body)
	}
	if r := serve(plain, "DELETE", "/v1/requests/x", ""); r.status != 405 {
		t.Errorf("DELETE without a store: %d %s", r.status, r.body)
	}
}
