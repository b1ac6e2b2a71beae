package httpapi_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/httpapi"
)

// BenchmarkInferSync is the handler's own cost per synchronous request,
// in memory, over an engine that answers at once: decoding, checks, the
// engine call, metrics and the JSON answer. Run with -cpu 1: the server
// under `batchd load` is pinned to one core.
func BenchmarkInferSync(b *testing.B) {
	h, err := httpapi.New(instantDoer{}, httpapi.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	const body = `{"input": "the quick brown fox", "priority": "high", "timeout_ms": 200}`
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest("POST", "/v1/models/m/infer", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json") // as batchd load and most clients send
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != 200 {
				b.Fatalf("status %d", rec.Code)
			}
		}
	})
}

// instantDoer answers every request at once and keeps nothing.
type instantDoer struct{}

func (instantDoer) Now() time.Duration { return 0 }

func (instantDoer) Do(_ context.Context, req actors.Request) (actors.Reply, error) {
	return completed(0, req), nil
}

func (instantDoer) Submit(req actors.Request, done func(actors.Reply, error)) uint64 {
	done(completed(0, req), nil)
	return 0
}

func (instantDoer) Cancel(uint64) bool { return false }
