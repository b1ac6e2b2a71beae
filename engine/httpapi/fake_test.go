package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/engine/httpapi"
)

// TestMain checks for leaked goroutines, and that a whole run validated
// /v2 exchanges against the OIP document (checkOIPTotal).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if code == 0 {
			code = checkOIPTotal()
		}
		os.Exit(code)
	}))
}

// waitMax bounds every polling loop: only a wait that never ends is a
// failure, so it is generous.
const waitMax = 20 * time.Second

// fakeDoer stands in for the engine. Its clock moves only when a test
// moves it; by default every request completes at once with the emulated
// backend's output.
type fakeDoer struct {
	now atomic.Int64

	mu    sync.Mutex
	calls []actors.Request
	// reply decides each request's fate; nil completes it.
	reply func(ctx context.Context, req actors.Request) (actors.Reply, error)
}

func (f *fakeDoer) Now() time.Duration { return time.Duration(f.now.Load()) }

func (f *fakeDoer) advance(d time.Duration) { f.now.Add(int64(d)) }

func (f *fakeDoer) Do(ctx context.Context, req actors.Request) (actors.Reply, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	fn := f.reply
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return actors.Reply{}, err
	}
	if fn != nil {
		return fn(ctx, req)
	}
	return completed(f.Now(), req), nil
}

func (f *fakeDoer) setReply(fn func(ctx context.Context, req actors.Request) (actors.Reply, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reply = fn
}

func (f *fakeDoer) requests() []actors.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]actors.Request(nil), f.calls...)
}

// completed is the reply of a request served at once: 2 ms queued, 3 ms
// on a device, in a batch of 4, version v1 unless pinned.
func completed(now time.Duration, req actors.Request) actors.Reply {
	v := req.Version
	if v == "" {
		v = "v1"
	}
	return actors.Reply{
		Outcome:   actors.Completed,
		Output:    actors.EmulatedOutput(req.Model, v, req.Input),
		Version:   v,
		Arrival:   now,
		Enqueue:   now,
		Dispatch:  now + 2*time.Millisecond,
		Done:      now + 5*time.Millisecond,
		BatchSize: 4,
		Attempts:  1,
	}
}

// newHandler makes a handler over f and shuts it down when the test ends.
// Its /v2 exchanges are checked against the OIP document (oipRecorder).
func newHandler(t *testing.T, f enginetest.DoNower, cfg httpapi.Config) *checkedHandler {
	t.Helper()
	h, err := httpapi.New(enginetest.Door(f), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitMax)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &checkedHandler{Handler: h, oip: newOIPRecorder(t)}
}

// response is a recorded answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v: %q", r.status, err, r.body)
	}
	return m
}

// errCode is the code of a v1 error body.
func (r response) errCode(t *testing.T) string {
	t.Helper()
	e, ok := r.json(t)["error"].(map[string]any)
	if !ok {
		t.Fatalf("no v1 error object in %s", r.body)
	}
	code, _ := e["code"].(string)
	return code
}

// serve runs one request through h in memory. hdr is header name, value,
// name, value...
func serve(h http.Handler, method, path, body string, hdr ...string) response {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// eventually polls cond until it holds, up to waitMax.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(waitMax); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}
