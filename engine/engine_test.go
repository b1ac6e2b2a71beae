package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// The engine's tests run it on the actor library linked into the test
// binary: protoactor by default, hollywood with -tags hollywood. Every
// runtime a test makes is closed, and Close must leave nothing running.
func TestMain(m *testing.M) {
	// Hollywood logs every supervised restart, with its stack, through the
	// default logger; the restart tests make them on purpose.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	goleak.VerifyTestMain(m)
}

// waitMax bounds every wait on a live engine: generous, since only a wait
// that never ends is a failure.
const waitMax = 30 * time.Second

// fastConfig is the seeds' setup scaled down to 5 ms batches, so the tests
// run quickly.
func fastConfig() engine.Config {
	c := engine.DefaultConfig()
	c.Runtime = engine.LinkedRuntime
	c.Batcher.Latency = actors.FixedLatency(5 * time.Millisecond)
	c.Batcher.SLO = 2 * time.Second
	c.Device.Latency = actors.FixedLatency(5 * time.Millisecond)
	c.Device.RestartBackoff = 5 * time.Millisecond
	c.Device.RestartBackoffMax = 20 * time.Millisecond
	c.Device.QuarantineFor = 50 * time.Millisecond
	return c
}

func start(t *testing.T, c engine.Config) *engine.Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	e, err := engine.New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

func stats(t *testing.T, e *engine.Engine) engine.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	s, err := e.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// eventually waits for cond, polling, up to waitMax.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(waitMax); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

func request(i int) actors.Request {
	return actors.Request{Model: "m", Version: "v1", Tenant: "t", Input: fmt.Sprintf("input-%d", i)}
}

// doMany runs n requests from workers goroutines and returns the replies
// in request order.
func doMany(t *testing.T, e *engine.Engine, n, workers int) []actors.Reply {
	t.Helper()
	replies := make([]actors.Reply, n)
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), waitMax)
				replies[i], errs[i] = e.Do(ctx, request(i))
				cancel()
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return replies
}

func checkOutput(t *testing.T, i int, r actors.Reply) {
	t.Helper()
	req := request(i)
	if want := actors.EmulatedOutput(req.Model, req.Version, req.Input); r.Output != want {
		t.Errorf("request %d: output %q, want %q (another request's answer?)", i, r.Output, want)
	}
}

// TestDo: concurrent requests are batched and each gets its own output,
// under a unique ID, with a causal timeline.
func TestDo(t *testing.T) {
	e := start(t, fastConfig())
	const n = 2000
	replies := doMany(t, e, n, 64)
	ids := map[uint64]bool{}
	batched := 0
	for i, r := range replies {
		if r.Outcome != actors.Completed {
			t.Fatalf("request %d: %v (%s)", i, r.Outcome, r.Err)
		}
		checkOutput(t, i, r)
		if ids[r.ID] {
			t.Errorf("ID %d given twice", r.ID)
		}
		ids[r.ID] = true
		if !(r.Arrival <= r.Enqueue && r.Enqueue <= r.Dispatch && r.Dispatch <= r.Done && r.Done <= e.Now()) {
			t.Errorf("request %d: timeline out of order: %+v", i, r)
		}
		if r.BatchSize > 1 {
			batched++
		}
	}
	if batched == 0 {
		t.Error("no request shared a batch")
	}
	s := stats(t, e)
	if s.Submitted != n || s.Replied != n || s.InFlight != 0 || s.Duplicate != 0 || s.Late != 0 {
		t.Errorf("stats %+v", s)
	}
	if s.Batcher.Devices != 4 || s.Batcher.Batches == 0 {
		t.Errorf("batcher stats %+v", s.Batcher)
	}
}

// TestDoCancel: a Do whose ctx ends returns ctx.Err(); the request is
// withdrawn, and its late reply is counted and dropped.
func TestDoCancel(t *testing.T) {
	c := fastConfig()
	c.Devices = 1
	// A slow device, so the second request waits in the queue.
	c.Device.Latency = actors.FixedLatency(300 * time.Millisecond)
	c.Batcher.Latency = c.Device.Latency
	c.Batcher.BatchMax = 1
	e := start(t, c)
	first := make(chan actors.Reply, 1)
	go func() {
		r, _ := e.Do(context.Background(), request(0))
		first <- r
	}()
	eventually(t, "the first request on the device", func() bool { return stats(t, e).Batcher.Batches == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.Do(ctx, request(1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do: %v, want DeadlineExceeded", err)
	}
	eventually(t, "the withdrawn request's reply", func() bool { return stats(t, e).InFlight == 1 })
	if r := <-first; r.Outcome != actors.Completed {
		t.Errorf("first request: %+v", r)
	}
	s := stats(t, e)
	if s.Abandoned != 1 || s.Late != 1 || s.InFlight != 0 || s.Batcher.Cancelled != 1 {
		t.Errorf("stats %+v", s)
	}
}

// blackHole is a runtime whose batcher loses every request: a Submit that
// reaches an actor from a front (one whose ReplyTo is not the engine's
// waiter endpoint) is dropped, so requests stay in flight until their
// front gives up on them, or Close.
type blackHole struct {
	engine.Runtime
	waiter atomic.Pointer[actors.Address]
}

func newBlackHole(o engine.RuntimeOptions) (engine.Runtime, error) {
	rt, err := engine.LinkedRuntime(o)
	return &blackHole{Runtime: rt}, err
}

func (b *blackHole) Listen(addr actors.Address, fn func(actors.Message)) error {
	b.waiter.Store(&addr)
	return b.Runtime.Listen(addr, fn)
}

func (b *blackHole) Spawn(addr actors.Address, newActor func() actors.Actor, backend engine.Backend) error {
	return b.Runtime.Spawn(addr, func() actors.Actor { return &losing{newActor(), b} }, backend)
}

type losing struct {
	actors.Actor
	b *blackHole
}

func (l *losing) Receive(ctx actors.Context, msg actors.Message) {
	if s, ok := msg.(actors.Submit); ok && s.Req.ReplyTo != *l.b.waiter.Load() {
		return
	}
	l.Actor.Receive(ctx, msg)
}

// TestInFlightMax: past the bound, Do refuses at once; Close releases the
// waiting calls.
func TestInFlightMax(t *testing.T) {
	c := fastConfig()
	c.InFlightMax = 2
	c.Runtime = newBlackHole
	e := start(t, c)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := e.Do(context.Background(), request(i))
			errs <- err
		}()
	}
	eventually(t, "two requests in flight", func() bool { return stats(t, e).InFlight == 2 })
	if _, err := e.Do(context.Background(), request(2)); !errors.Is(err, engine.ErrInFlightMax) {
		t.Errorf("third Do: %v, want ErrInFlightMax", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, engine.ErrClosed) {
			t.Errorf("Do during Close: %v, want ErrClosed", err)
		}
	}
	if _, err := e.Do(context.Background(), request(3)); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Do after Close: %v", err)
	}
	if s, err := e.Stats(context.Background()); !errors.Is(err, engine.ErrClosed) || s.Refused != 1 {
		t.Errorf("stats after Close: %+v, %v", s, err)
	}
}

// TestReplyGrace: a request the actors never answer is answered Expired by
// the engine at its deadline plus ReplyGrace, not before; one whose Do gave
// up leaves the in-flight count by then too, so a Drain ends.
func TestReplyGrace(t *testing.T) {
	c := fastConfig()
	c.ReplyGrace = 40 * time.Millisecond
	c.Runtime = newBlackHole
	e := start(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Do(ctx, request(0)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with an ended ctx: %v", err)
	}
	gone, cancelGone := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancelGone()
	left := request(1)
	left.Deadline = e.Now() + 30*time.Millisecond
	if _, err := e.Do(gone, left); !errors.Is(err, context.DeadlineExceeded) { // its entry stays until its bound
		t.Fatalf("Do that gives up: %v", err)
	}

	req := request(2)
	req.Deadline = e.Now() + 30*time.Millisecond
	r, err := e.Do(context.Background(), req)
	if err != nil || r.Outcome != actors.Expired || r.Reason != actors.ReasonDeadline {
		t.Fatalf("lost request: %+v, %v; want Expired, deadline", r, err)
	}
	if bound := req.Deadline + c.ReplyGrace; r.Done < bound || e.Now() < bound {
		t.Errorf("answered at %v, before its bound %v", r.Done, bound)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), waitMax)
	defer dcancel()
	if err := e.Drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if s := stats(t, e); s.InFlight != 0 || s.Unanswered != 2 || s.Abandoned != 1 {
		t.Errorf("stats %+v: want nothing in flight, 2 unanswered, 1 abandoned", s)
	}
}

// TestDrain: Drain waits until everything in flight is answered; requests
// after it are rejected.
func TestDrain(t *testing.T) {
	c := fastConfig()
	c.Device.Latency = actors.FixedLatency(50 * time.Millisecond)
	c.Batcher.Latency = c.Device.Latency
	e := start(t, c)
	const n = 300
	var wg sync.WaitGroup
	var completed atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.Do(context.Background(), request(i))
			if err != nil || r.Outcome != actors.Completed {
				t.Errorf("request %d: %v %s, %v", i, r.Outcome, r.Err, err)
				return
			}
			completed.Add(1)
		}()
	}
	// Every Submit is in the batcher's mailbox before the Drain.
	eventually(t, "requests in flight", func() bool { return stats(t, e).Submitted == n })
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if err := e.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if s := stats(t, e); s.InFlight != 0 {
		t.Errorf("in flight after Drain: %d", s.InFlight)
	}
	wg.Wait()
	if completed.Load() != n {
		t.Errorf("%d of %d completed", completed.Load(), n)
	}
	r, err := e.Do(context.Background(), request(n))
	if err != nil || r.Outcome != actors.Rejected {
		t.Errorf("Do after Drain: %+v, %v; want Rejected", r, err)
	}
}

// listenTap is a runtime that lets the test reach the engine's waiter.
type listenTap struct {
	engine.Runtime
	addr actors.Address
	fn   func(actors.Message)
}

func (l *listenTap) Listen(addr actors.Address, fn func(actors.Message)) error {
	l.addr, l.fn = addr, fn
	return l.Runtime.Listen(addr, fn)
}

// TestDuplicateReply: a second reply for an answered request is counted
// and dropped.
func TestDuplicateReply(t *testing.T) {
	tap := &listenTap{}
	c := fastConfig()
	c.Runtime = func(o engine.RuntimeOptions) (engine.Runtime, error) {
		rt, err := engine.LinkedRuntime(o)
		tap.Runtime = rt
		return tap, err
	}
	e := start(t, c)
	r, err := e.Do(context.Background(), request(0))
	if err != nil {
		t.Fatal(err)
	}
	tap.fn(r)
	tap.fn(actors.Reply{ID: 1 << 50})
	// Replies are handed over in the order they came: once a later
	// request has its reply, the two above have been dealt with.
	if _, err := e.Do(context.Background(), request(1)); err != nil {
		t.Fatal(err)
	}
	if s := stats(t, e); s.Duplicate != 2 || s.InFlight != 0 || s.Replied != 2 {
		t.Errorf("stats %+v", s)
	}
}

// TestDeviceFaults: with devices that crash and hang, every request still
// gets exactly one reply, every completed one carries its own output, and
// retries stay within AttemptMax.
func TestDeviceFaults(t *testing.T) {
	c := fastConfig()
	c.Batcher.BatchMax = 8
	c.Backend = faultyBackends(t, c, func(ec *engine.EmulatedConfig) {
		ec.CrashRate, ec.HangRate, ec.BatchErrorRate, ec.ItemErrorRate = 0.1, 0.05, 0.05, 0.02
	})
	e := start(t, c)
	const n = 1000
	replies := doMany(t, e, n, 32)
	outcomes := map[actors.Outcome]int{}
	for i, r := range replies {
		outcomes[r.Outcome]++
		switch r.Outcome {
		case actors.Completed:
			checkOutput(t, i, r)
		case actors.Failed, actors.Expired, actors.Rejected:
		default:
			t.Errorf("request %d: %v", i, r.Outcome)
		}
		if r.Attempts > c.Batcher.AttemptMax {
			t.Errorf("request %d: %d attempts, limit %d", i, r.Attempts, c.Batcher.AttemptMax)
		}
	}
	s := stats(t, e)
	t.Logf("outcomes %v; stats %+v", outcomes, s)
	if outcomes[actors.Completed] < n/2 {
		t.Errorf("only %d of %d completed", outcomes[actors.Completed], n)
	}
	if s.Batcher.Retried == 0 {
		t.Error("no retry: the faults were not exercised")
	}
	if s.InFlight != 0 || s.Replied != n {
		t.Errorf("stats %+v", s)
	}
}

// TestDoAskingAhead: devices that ask for their next batch as each starts
// (one batch held while one runs) answer every request once, with its own
// output, on their own and with crashes and hangs (the batch held is then
// taken back and dropped); both runtimes, under -race in make test.
func TestDoAskingAhead(t *testing.T) {
	for _, faulty := range []bool{false, true} {
		t.Run(fmt.Sprintf("faults=%v", faulty), func(t *testing.T) {
			c := fastConfig()
			c.Devices = 2
			c.Batcher.BatchMax = 8
			c.Device.AskAhead = 2 * time.Millisecond
			c.Backend = faultyBackends(t, c, func(ec *engine.EmulatedConfig) {
				if faulty {
					ec.CrashRate, ec.HangRate = 0.05, 0.02
				}
			})
			e := start(t, c)
			const n = 1000
			replies := doMany(t, e, n, 64)
			completed := 0
			for i, r := range replies {
				switch r.Outcome {
				case actors.Completed:
					completed++
					checkOutput(t, i, r)
				case actors.Failed, actors.Expired, actors.Rejected:
					if !faulty {
						t.Errorf("request %d: %v (%s) without faults", i, r.Outcome, r.Err)
					}
				default:
					t.Errorf("request %d: %v", i, r.Outcome)
				}
			}
			s := stats(t, e)
			if s.InFlight != 0 || s.Replied != n || s.Duplicate != 0 || completed < n/2 {
				t.Errorf("%d of %d completed; stats %+v", completed, n, s)
			}
			if faulty && s.Batcher.Retried == 0 {
				t.Error("no retry: the faults were not exercised")
			}
		})
	}
}

// faultyBackends gives each device of c an emulated backend of c's latency,
// seeded by its index, with the faults faults sets.
func faultyBackends(t *testing.T, c engine.Config, faults func(*engine.EmulatedConfig)) func(int) engine.Backend {
	return func(i int) engine.Backend {
		ec := engine.DefaultEmulatedConfig()
		ec.Latency = c.Device.Latency
		faults(&ec)
		ec.Seed = uint64(i)
		b, err := engine.NewEmulated(ec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// TestNoLeak: an engine started, used and closed leaves no goroutine.
func TestNoLeak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := fastConfig()
	c.Backend = func(i int) engine.Backend {
		ec := engine.DefaultEmulatedConfig()
		ec.Latency = c.Device.Latency
		ec.HangRate = 0.2 // workers stuck in calls when Close comes
		b, _ := engine.NewEmulated(ec)
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	e, err := engine.New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Do(ctx, request(i))
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []func(*engine.Config){
		func(c *engine.Config) { c.Devices = 0 },
		func(c *engine.Config) { c.InFlightMax = 0 },
		func(c *engine.Config) { c.JobTimeoutMultiple = 0 },
		func(c *engine.Config) { c.ReplyGrace = 0 },
		func(c *engine.Config) { c.Batcher.BatchMax = 0 },
		func(c *engine.Config) { c.Device.WatchdogMultiple = 0 },
		func(c *engine.Config) { c.Node = strings.Repeat("n", 256) }, // past a member name's length
	}
	for i, mod := range bad {
		c := fastConfig()
		mod(&c)
		if _, err := engine.New(context.Background(), c); err == nil {
			t.Errorf("case %d: no error", i)
		}
	}
}

func TestSignals(t *testing.T) {
	c := fastConfig()
	e := start(t, c)
	doMany(t, e, 50, 4)
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	s, err := e.Signals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.DevicesHealthy != c.Devices || len(s.Devices) != c.Devices || len(s.Keys) == 0 {
		t.Fatalf("signals: %d healthy of %d devices, %d keys; want %d devices and a key", s.DevicesHealthy, len(s.Devices), len(s.Keys), c.Devices)
	}
}

// TestFrontRestart: a front that panics is restarted by supervision with
// nothing of what it held; the engine answers those requests Failed at
// once rather than never, and the fresh front serves the next ones (its
// view knows the node).
func TestFrontRestart(t *testing.T) {
	c := fastConfig()
	c.Devices = 1
	c.Batcher.BatchMax = 1
	c.Device.WatchdogMin = time.Minute
	open := make(chan struct{})
	c.Backend = func(int) engine.Backend { return gated{open} }
	var rt engine.Runtime
	c.Runtime = func(o engine.RuntimeOptions) (engine.Runtime, error) {
		r, err := engine.LinkedRuntime(o)
		rt = r
		return r, err
	}
	e := start(t, c)
	const n = 3
	got := make(chan actors.Reply, n)
	for i := range n {
		req := request(i)
		req.Deadline = e.Now() + time.Minute
		e.Submit(req, func(r actors.Reply, err error) {
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			got <- r
		})
	}
	eventually(t, "the requests at the batcher", func() bool { s := stats(t, e); return int64(s.Batcher.Queued)+s.Batcher.Batches >= n })
	rt.Send(engine.FrontsOf(e)[0], poison{})
	for range n {
		select {
		case r := <-got:
			if r.Outcome != actors.Failed || r.Reason != actors.ReasonAttempts {
				t.Errorf("a request the front lost: %+v, want Failed", r)
			}
		case <-time.After(waitMax):
			t.Fatal("a request the restarted front lost was never answered")
		}
	}
	close(open)
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if r, err := e.Do(ctx, request(n)); err != nil || r.Outcome != actors.Completed {
		t.Fatalf("a request after the restart: %+v, %v", r, err)
	}
	if s := stats(t, e); s.InFlight != 0 || s.Replied != n+1 {
		t.Errorf("stats %+v: want nothing in flight, %d replied", s, n+1)
	}
}

// poison is a message no actor knows: the one it is sent to panics.
type poison struct{}
