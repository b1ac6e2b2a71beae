package engine_test

import (
	"context"
	"errors"
	"runtime"
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

// TestCloseAnswersEveryone: requests submitted while the engine closes,
// by Do and by Submit, on a runtime that never answers, are each answered
// once (a Do returns, a Submit's done is called once) however their
// submits and Close's sweep of the waiter table interleave.
func TestCloseAnswersEveryone(t *testing.T) {
	c := fastConfig()
	c.Runtime = newBlackHole
	e := start(t, c)
	var submitted, doneCalls atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { // Submits until the engine is closed
			for !stop.Load() {
				submitted.Add(1)
				e.Submit(request(1), func(r actors.Reply, err error) {
					// Past the door's window (nothing is ever answered
					// here), the door sheds: a rejection, not an error.
					shed := err == nil && r.Outcome == actors.Rejected
					if !shed && !errors.Is(err, engine.ErrClosed) && !errors.Is(err, engine.ErrInFlightMax) {
						t.Errorf("Submit answered %+v, %v; want a rejection, ErrClosed or ErrInFlightMax", r, err)
					}
					doneCalls.Add(1)
				})
				runtime.Gosched() // leave Close the CPU: a race, not a flood
			}
		})
		wg.Go(func() { // Does, each given up soon, until one says ErrClosed
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
				_, err := e.Do(ctx, request(2))
				cancel()
				if errors.Is(err, engine.ErrClosed) {
					return
				}
				if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, engine.ErrInFlightMax) {
					t.Errorf("Do: %v", err)
					return
				}
			}
		})
	}
	eventually(t, "requests in flight", func() bool { return stats(t, e).InFlight > 100 })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitMax):
		t.Fatal("a Do still waits after Close")
	}
	if s, d := submitted.Load(), doneCalls.Load(); s != d {
		t.Errorf("%d Submits, %d answers", s, d)
	}
}

// TestCloseAroundRegister: an engine that closes while a request is
// being submitted, just before its waiter entry goes in (Close's sweep
// misses it) or just after (the sweep takes it), still answers it once: Do
// returns ErrClosed, Submit's done is called once with ErrClosed.
func TestCloseAroundRegister(t *testing.T) {
	for _, c := range []struct{ viaSubmit, after bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
		viaSubmit := c.viaSubmit
		cfg := fastConfig()
		cfg.Runtime = newBlackHole
		e := start(t, cfg)
		var once sync.Once
		engine.SetRegisterHook(e, func(after bool) {
			if after != c.after {
				return
			}
			once.Do(func() {
				if err := e.Close(); err != nil {
					t.Error(err)
				}
			})
		})
		got := make(chan error, 2)
		if viaSubmit {
			e.Submit(request(1), func(_ actors.Reply, err error) { got <- err })
		} else {
			go func() {
				_, err := e.Do(context.Background(), request(1))
				got <- err
			}()
		}
		select {
		case err := <-got:
			if !errors.Is(err, engine.ErrClosed) {
				t.Errorf("%+v: %v, want ErrClosed", c, err)
			}
		case <-time.After(waitMax):
			t.Fatalf("%+v: not answered after Close", c)
		}
		select {
		case err := <-got:
			t.Errorf("%+v: answered twice (then %v)", c, err)
		default:
		}
	}
}
