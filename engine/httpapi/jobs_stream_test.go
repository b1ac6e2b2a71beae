package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/httpapi"
	"github.com/batchd/batchd/engine/jobs"
)

// bigItems writes n items of about size bytes each, comma-separated.
func bigItems(n, size int, prefix string) string {
	var b strings.Builder
	pad := strings.Repeat("z", size)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"input": "%s-%d-%s"}`, prefix, i, pad)
	}
	return b.String()
}

// A batch job larger than a part goes to the store as it is read: it is
// accepted, runs, and answers each item with its own input's output; the
// same request under the same key (sent differently) is a replay, and
// another body a conflict.
func TestJobBatchStreamed(t *testing.T) {
	f := &fakeDoer{}
	h := newJobsHandler(t, f, httpapi.DefaultConfig(), nil)
	const n = 1200 // over 1 MiB of inputs
	body := `{"async": true, "items": [` + bigItems(n, 900, "s") + `], "priority": "high"}`
	key := []string{"Idempotency-Key", "big-1"}
	r := serve(h, "POST", "/v1/models/m/batch", body, key...)
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := decodeJob(t, r).ID
	j := pollJob(t, h, id)
	if j.Status != "completed" || j.Progress.Completed != n || len(j.Items) != 1000 {
		t.Fatalf("job %s: %+v, %d items on the first page", j.Status, j.Progress, len(j.Items))
	}
	// Spacing and key order do not make another request.
	again := `{"priority":"high","items":[` + strings.ReplaceAll(bigItems(n, 900, "s"), `": "`, `":"`) + `],"async":true}`
	if r := serve(h, "POST", "/v1/models/m/batch", again, key...); r.status != 202 || decodeJob(t, r).ID != id || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	other := `{"async": true, "items": [` + bigItems(n, 900, "o") + `]}`
	if r := serve(h, "POST", "/v1/models/m/batch", other, key...); r.status != 409 {
		t.Fatalf("another body: %d %s", r.status, r.body)
	}
	// A bad item past the first part refuses the whole batch.
	bad := `{"async": true, "items": [` + bigItems(n, 900, "b") + `, {"input": 7}]}`
	if r := serve(h, "POST", "/v1/models/m/batch", bad); r.status != 400 {
		t.Fatalf("bad last item: %d %s", r.status, r.body)
	}
	if got := len(f.requests()); got != n {
		t.Fatalf("%d engine calls, want %d", got, n)
	}
}

// With jobs.streams_max batches being read, one more large batch is 503
// with Retry-After at once, and the first still completes.
func TestJobBatchStreamsBound(t *testing.T) {
	f := &fakeDoer{}
	h := newJobsHandler(t, f, httpapi.DefaultConfig(), func(c *jobs.Config) { c.StreamsMax = 1 })
	pr, pw := io.Pipe()
	first := make(chan *httptest.ResponseRecorder)
	go func() {
		req := httptest.NewRequest("POST", "/v1/models/m/batch", pr)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		first <- rec
	}()
	// Past 1 MiB: the first batch holds the one place once the items
	// after these are read, which needs these decoded.
	if _, err := io.WriteString(pw, `{"async": true, "items": [`+bigItems(1200, 900, "f")+","); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(pw, bigItems(50, 900, "g")+","); err != nil {
		t.Fatal(err)
	}
	r := serve(h, "POST", "/v1/models/m/batch", `{"async": true, "items": [`+bigItems(1200, 900, "x")+`]}`)
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != "overloaded" || r.header.Get("Retry-After") == "" {
		t.Errorf("second large batch: %d %s", r.status, r.body)
	}
	// A small one needs no place.
	if r := serve(h, "POST", "/v1/models/m/batch", `{"async": true, "items": [{"input": "small"}]}`); r.status != 202 {
		t.Errorf("small batch: %d %s", r.status, r.body)
	}
	if _, err := io.WriteString(pw, `{"input": "last"}]}`); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	rec := <-first
	if rec.Code != 202 {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
}
