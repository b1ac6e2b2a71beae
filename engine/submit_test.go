package engine_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// TestSubmitAnswersEachOnce: Submit returns at once, and each request's
// done is called exactly once with its own output.
func TestSubmitAnswersEachOnce(t *testing.T) {
	e := start(t, fastConfig())
	const n = 500
	var wg sync.WaitGroup
	calls := make([]atomic.Int32, n)
	outs := make([]actors.Reply, n)
	wg.Add(n)
	for i := range n {
		e.Submit(request(i), func(r actors.Reply, err error) {
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			outs[i] = r
			if calls[i].Add(1) == 1 {
				wg.Done()
			}
		})
	}
	wg.Wait()
	for i := range n {
		want := actors.EmulatedOutput("m", "v1", request(i).Input)
		if c := calls[i].Load(); c != 1 || outs[i].Outcome != actors.Completed || outs[i].Output != want {
			t.Fatalf("request %d: done called %d times, %+v; want once, completed %q", i, c, outs[i], want)
		}
	}
	if s := stats(t, e); s.InFlight != 0 || s.Replied != n {
		t.Fatalf("after every answer: %d in flight, %d replied; want 0 and %d", s.InFlight, s.Replied, n)
	}
}

// TestSubmitCancelAndClose: a request withdrawn with Cancel is never
// answered; one still awaited when the engine closes is answered
// ErrClosed; the door's own answer comes before Submit returns.
func TestSubmitCancelAndClose(t *testing.T) {
	c := fastConfig()
	c.Devices = 1
	c.Batcher.BatchMax = 1
	c.Device.WatchdogMin = time.Minute
	open := make(chan struct{})
	c.Backend = func(int) engine.Backend { return gated{open} }
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	e, err := engine.New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer close(open)
	req := request(1)
	req.Deadline = e.Now() + 30*time.Second
	var cancelled atomic.Int32
	id := e.Submit(req, func(actors.Reply, error) { cancelled.Add(1) })
	if !e.Cancel(id) {
		t.Fatal("Cancel of a request not answered yet: false")
	}
	closed := make(chan error, 1)
	req2 := request(2)
	req2.Deadline = e.Now() + 30*time.Second
	e.Submit(req2, func(_ actors.Reply, err error) { closed <- err })
	eventually(t, "the second request on the gated device", func() bool { return stats(t, e).Submitted == 2 })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if !errors.Is(err, engine.ErrClosed) {
			t.Fatalf("awaited at close: %v, want ErrClosed", err)
		}
	default:
		t.Fatal("a request still awaited was not answered by Close")
	}
	if n := cancelled.Load(); n != 0 {
		t.Fatalf("the cancelled request's done was called %d times", n)
	}
	answered := false
	e.Submit(request(3), func(_ actors.Reply, err error) { answered = errors.Is(err, engine.ErrClosed) })
	if !answered {
		t.Fatal("Submit on a closed engine did not answer ErrClosed before returning")
	}
}
