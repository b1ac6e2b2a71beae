package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/batchd/batchd/actors"
)

// BaselineVersion is the version the baseline handler says it served.
const BaselineVersion = "v1"

// Baseline is the yardstick of the engine-overhead target: a plain net/http
// handler for POST /v1/models/{model}/infer that does the least any server
// must (read and decode the body, encode the answer) and answers at once,
// with the emulated backend's output so the generator's check passes. Load
// against it measures what the generator and net/http cost on their own.
func Baseline() http.Handler {
	return baseline(nil)
}

// WaitingBaseline is Baseline holding every answer until the next tick, when
// one goroutine releases all the handlers waiting, every `every`: about the
// least a server that batches must add to Baseline (park each handler until
// its batch is done, then wake it), with no batcher, actor or backend.
// It serves until ctx ends, and then answers at once; the returned wait
// blocks until its goroutine has returned.
func WaitingBaseline(ctx context.Context, every time.Duration) (h http.Handler, wait func()) {
	t := &ticked{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.run(ctx, every)
	}()
	return baseline(t.hold), func() { <-done }
}

// waitingMax bounds the handlers a WaitingBaseline holds at once; past it,
// a request is answered 503.
const waitingMax = 1 << 16

// ticked is WaitingBaseline's list of waiting handlers.
type ticked struct {
	mu      sync.Mutex
	waiting []chan struct{}
	closed  bool
}

// hold parks the calling handler until the next release, or until its
// request's ctx ends; false: no room to wait.
func (t *ticked) hold(ctx context.Context) bool {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	switch {
	case t.closed:
		t.mu.Unlock()
		return true
	case len(t.waiting) >= waitingMax:
		t.mu.Unlock()
		return false
	}
	t.waiting = append(t.waiting, ch)
	t.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
	return true
}

// run releases the waiting handlers every `every` until ctx ends, and then
// for the last time.
func (t *ticked) run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			t.release(false)
		case <-ctx.Done():
			t.release(true)
			return
		}
	}
}

func (t *ticked) release(closing bool) {
	t.mu.Lock()
	q := t.waiting
	t.waiting = nil
	t.closed = t.closed || closing
	t.mu.Unlock()
	for _, ch := range q {
		ch <- struct{}{} // capacity 1, one send each: never blocks
	}
}

// baseline is the handler, waiting in hold (if not nil) before it answers.
func baseline(hold func(context.Context) bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/models/{model}/infer", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Input string `json:"input"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, responseMaxBytes)).Decode(&in); err != nil {
			http.Error(w, `{"error":{"code":"bad_request","message":"bad JSON"}}`, http.StatusBadRequest)
			return
		}
		if hold != nil && !hold(r.Context()) {
			http.Error(w, `{"error":{"code":"overloaded","message":"too many waiting"}}`, http.StatusServiceUnavailable)
			return
		}
		model := r.PathValue("model")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Output  string `json:"output"`
			Model   string `json:"model"`
			Version string `json:"version"`
		}{actors.EmulatedOutput(model, BaselineVersion, in.Input), model, BaselineVersion})
	})
	return mux
}

// ServeBaseline serves Baseline on addr until ctx ends, saying where on
// stdout: the plain net/http server that batchd's throughput is compared
// with (`batchd load --baseline-server`); with a wait (not negative),
// WaitingBaseline.
func ServeBaseline(ctx context.Context, addr string, wait time.Duration, stdout io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	h := Baseline()
	if wait > 0 {
		hctx, cancel := context.WithCancel(ctx)
		var waited func()
		h, waited = WaitingBaseline(hctx, wait)
		defer waited()
		defer cancel() // before waited: the ticker's goroutine returns once cancelled
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "baseline server on http://%s\n", ln.Addr())
	select {
	case err := <-served:
		return fmt.Errorf("baseline: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	return nil
}
