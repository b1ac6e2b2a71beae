package jobs

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/enginetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitMax bounds every polling loop: only a wait that never ends fails.
const waitMax = 20 * time.Second

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(waitMax); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// fakeEng stands in for the engine. By default a call completes at once
// with the emulated output; block makes calls wait until their ctx ends
// or unblock is called; reject refuses an input's first refusals calls.
type fakeEng struct {
	mu          sync.Mutex
	calls       map[string]int // by input
	inflight    map[string]int // by tenant
	inflightMax map[string]int
	total       int
	totalMax    int
	block       bool
	gate        chan struct{}
	refusals    int
	reply       func(req actors.Request) (actors.Reply, bool)
}

func newFake() *fakeEng {
	return &fakeEng{calls: map[string]int{}, inflight: map[string]int{}, inflightMax: map[string]int{}, gate: make(chan struct{})}
}

func (f *fakeEng) Now() time.Duration { return time.Second }

func (f *fakeEng) Do(ctx context.Context, req actors.Request) (actors.Reply, error) {
	f.mu.Lock()
	f.calls[req.Input]++
	n := f.calls[req.Input]
	f.inflight[req.Tenant]++
	f.inflightMax[req.Tenant] = max(f.inflightMax[req.Tenant], f.inflight[req.Tenant])
	f.total++
	f.totalMax = max(f.totalMax, f.total)
	block, gate, refusals, reply := f.block, f.gate, f.refusals, f.reply
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight[req.Tenant]--
		f.total--
		f.mu.Unlock()
	}()
	if block {
		select {
		case <-ctx.Done():
			return actors.Reply{}, ctx.Err()
		case <-gate:
		}
	}
	if n <= refusals {
		return actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonQueueFull, RetryAfter: time.Millisecond}, nil
	}
	if reply != nil {
		if rep, ok := reply(req); ok {
			return rep, nil
		}
	}
	return actors.Reply{Outcome: actors.Completed, Output: actors.EmulatedOutput(req.Model, "v1", req.Input), Version: "v1",
		Arrival: time.Second, Dispatch: time.Second + 2*time.Millisecond, Done: time.Second + 5*time.Millisecond, BatchSize: 7}, nil
}

func (f *fakeEng) unblock() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.block {
		f.block = false
		close(f.gate)
	}
}

func (f *fakeEng) inFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

func (f *fakeEng) callsTotal() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

func startRunner(t *testing.T, s *Store, f enginetest.DoNower) *Runner {
	t.Helper()
	r := NewRunner(s, enginetest.Door(f), nil)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitMax)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return r
}

func waitDone(t *testing.T, r *Runner, tenant, id string) Job {
	t.Helper()
	var j Job
	eventually(t, "job "+id+" done", func() bool {
		var err error
		j, err = r.Get(tenant, id)
		if err != nil {
			t.Fatal(err)
		}
		return j.Done()
	})
	return j
}

// checkOutputs checks that every item of a job completed once, with the
// output of its own input, in input order.
func checkOutputs(t *testing.T, r *Runner, tenant, id string, in []string, attempts int) {
	t.Helper()
	_, items, err := r.Items(tenant, id, 0, len(in))
	if err != nil || len(items) != len(in) {
		t.Fatalf("%d items, %v", len(items), err)
	}
	for i, it := range items {
		if it.Index != i || it.Status != Completed || !actors.EmulatedOutputMatches(it.Output, "m", "v1", actors.InputHash(in[i])) ||
			it.Attempts != attempts {
			t.Fatalf("item %d: %+v, want completed output of %q, %d attempts", i, it, in[i], attempts)
		}
	}
}

// Two tenants' jobs run to completion within their windows; every item
// once, in order, with its own output.
func TestRunnerWindows(t *testing.T) {
	cfg := testConfig(t)
	cfg.WindowJob, cfg.WindowTotal = 16, 24
	s := openStore(t, cfg, newClock())
	f := newFake()
	f.block = true
	r := startRunner(t, s, f)
	inA, inB := inputs(500, "a"), inputs(200, "b")
	ja, _, err := r.Submit(batchSpec("alice", inA))
	if err != nil {
		t.Fatal(err)
	}
	jb, _, err := r.Submit(batchSpec("bob", inB))
	if err != nil {
		t.Fatal(err)
	}
	// Blocked, the runner fills the total window and no more.
	eventually(t, "the window filled", func() bool { return f.inFlight() == cfg.WindowTotal })
	if j, _ := r.Get("alice", ja.ID); j.Status() != Running || j.Counts.Running > cfg.WindowJob {
		t.Errorf("alice's job while blocked: %s %+v", j.Status(), j.Counts)
	}
	f.unblock()
	waitDone(t, r, "alice", ja.ID)
	waitDone(t, r, "bob", jb.ID)
	checkOutputs(t, r, "alice", ja.ID, inA, 1)
	checkOutputs(t, r, "bob", jb.ID, inB, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.totalMax > cfg.WindowTotal || f.inflightMax["alice"] > cfg.WindowJob || f.inflightMax["bob"] > cfg.WindowJob {
		t.Errorf("in flight at most %d (alice %d, bob %d): windows %d total, %d per job",
			f.totalMax, f.inflightMax["alice"], f.inflightMax["bob"], cfg.WindowTotal, cfg.WindowJob)
	}
	if len(f.calls) != 700 {
		t.Errorf("%d distinct inputs run, want 700", len(f.calls))
	}
	for in, n := range f.calls {
		if n != 1 {
			t.Errorf("input %s ran %d times", in, n)
		}
	}
}

// Items refused for load are retried, not failed, and the refusals count
// no attempt; past RetryMax they fail with the refusal.
func TestRunnerRetriesRefusals(t *testing.T) {
	cfg := testConfig(t)
	cfg.RetryBackoffMin, cfg.RetryBackoffMax = time.Millisecond, 2*time.Millisecond
	s := openStore(t, cfg, newClock())
	f := newFake()
	f.refusals = 2
	r := startRunner(t, s, f)
	in := inputs(50, "x")
	j, _, _ := r.Submit(batchSpec("a", in))
	waitDone(t, r, "a", j.ID)
	checkOutputs(t, r, "a", j.ID, in, 1)
	if n := f.callsTotal(); n != 150 {
		t.Errorf("%d calls, want 150 (two refusals and a run each)", n)
	}
	// The counters follow the commit that made the job done.
	eventually(t, "stats", func() bool { return r.Stats().Completed == 50 })
	if st := r.Stats(); st.Retries != 100 || st.Failed != 0 || st.Held != 0 {
		t.Errorf("stats %+v: want 100 retries, nothing failed or held", st)
	}
}

func TestRunnerGivesUp(t *testing.T) {
	cfg := testConfig(t)
	cfg.RetryBackoffMin, cfg.RetryBackoffMax, cfg.RetryMax = time.Millisecond, 2*time.Millisecond, 2
	s := openStore(t, cfg, newClock())
	f := newFake()
	f.refusals = 1 << 30
	r := startRunner(t, s, f)
	j2, _, _ := r.Submit(batchSpec("a", inputs(3, "never")))
	got := waitDone(t, r, "a", j2.ID)
	_, items, _ := r.Items("a", j2.ID, 0, 3)
	if got.Status() != Failed || got.Counts.Failed != 3 {
		t.Errorf("job of refused items: %s %+v", got.Status(), got.Counts)
	}
	for _, it := range items {
		if it.Status != Failed || it.Error == nil || it.Error.Code != "queue_full" || it.Error.HTTPStatus != 503 ||
			!strings.Contains(it.Error.Message, "gave up after 2 retries") || it.Attempts != 0 {
			t.Errorf("item %+v err %+v", it, it.Error)
		}
	}
}

// Per-item failures fail only their item.
func TestRunnerItemErrors(t *testing.T) {
	s := openStore(t, testConfig(t), newClock())
	f := newFake()
	f.reply = func(req actors.Request) (actors.Reply, bool) {
		if strings.HasPrefix(req.Input, "bad") {
			return actors.Reply{Outcome: actors.Failed, Reason: actors.ReasonBackend, Err: "poison"}, true
		}
		return actors.Reply{}, false
	}
	r := startRunner(t, s, f)
	j, _, _ := r.Submit(batchSpec("a", []string{"ok-0", "bad-1", "ok-2"}))
	got := waitDone(t, r, "a", j.ID)
	_, items, _ := r.Items("a", j.ID, 0, 3)
	if got.Status() != Completed || got.Counts != (Counts{Total: 3, Completed: 2, Failed: 1}) {
		t.Errorf("job %s %+v", got.Status(), got.Counts)
	}
	if items[1].Status != Failed || items[1].Error.Code != "backend" || items[1].Error.Message != "poison" || items[1].Attempts != 1 ||
		items[0].Status != Completed || items[2].Status != Completed {
		t.Errorf("items %+v", items)
	}
}

// Cancel stops a job: queued items cancelled at once, the ones in flight
// withdrawn from the engine; nothing more is fed.
func TestRunnerCancel(t *testing.T) {
	cfg := testConfig(t)
	cfg.WindowJob, cfg.WindowTotal = 10, 10
	s := openStore(t, cfg, newClock())
	f := newFake()
	f.block = true
	r := startRunner(t, s, f)
	j, _, _ := r.Submit(batchSpec("a", inputs(100, "x")))
	eventually(t, "the window filled", func() bool { return f.inFlight() == 10 })
	if _, err := r.Cancel("b", j.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's cancel: %v", err)
	}
	c, err := r.Cancel("a", j.ID)
	if err != nil || c.Status() != Cancelled {
		t.Fatalf("cancel: %s %v", c.Status(), err)
	}
	got := waitDone(t, r, "a", j.ID)
	if got.Status() != Cancelled || got.Counts != (Counts{Total: 100, Cancelled: 100}) {
		t.Errorf("cancelled job %s %+v", got.Status(), got.Counts)
	}
	if n := f.callsTotal(); n != 10 {
		t.Errorf("%d items fed, want only the 10 in flight at the cancel", n)
	}
	// The runner wrote the 10 it withdrew; the store cancelled the rest.
	eventually(t, "stats", func() bool { return r.Stats().Cancelled == 10 })
	if again, err := r.Cancel("a", j.ID); err != nil || again.Status() != Cancelled || again.Counts != got.Counts {
		t.Errorf("second cancel: %s %+v %v", again.Status(), again.Counts, err)
	}
}

// A stop hands the items in flight back to the store, queued with no
// attempt counted; the next runner finishes the job.
func TestRunnerStopAndResume(t *testing.T) {
	cfg := testConfig(t)
	cfg.WindowJob, cfg.WindowTotal = 10, 10
	c := newClock()
	s, err := Open(cfg, c.now)
	if err != nil {
		t.Fatal(err)
	}
	f := newFake()
	f.block = true
	r := NewRunner(s, enginetest.Door(f), nil)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	in := inputs(40, "x")
	j, _, _ := r.Submit(batchSpec("a", in))
	eventually(t, "the window filled", func() bool { return f.inFlight() == 10 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: withdraw at once
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	got, items, _ := s.Items("a", j.ID, 0, 40)
	if got.Counts != (Counts{Total: 40, Queued: 40}) {
		t.Errorf("after stop: %+v", got.Counts)
	}
	for _, it := range items {
		if it.Attempts != 0 {
			t.Fatalf("item %d: %d attempts after a clean stop", it.Index, it.Attempts)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg, c)
	r2 := startRunner(t, s, newFake())
	waitDone(t, r2, "a", j.ID)
	checkOutputs(t, r2, "a", j.ID, in, 1)
}

// A job past its timeout expires what it has not run.
func TestRunnerDeadline(t *testing.T) {
	c := newClock()
	s := openStore(t, testConfig(t), c)
	sp := batchSpec("a", inputs(20, "x"))
	sp.Timeout = time.Minute
	j, _, err := s.Submit(sp)
	if err != nil {
		t.Fatal(err)
	}
	c.advance(2 * time.Minute)
	f := newFake()
	r := startRunner(t, s, f)
	got := waitDone(t, r, "a", j.ID)
	_, items, _ := r.Items("a", j.ID, 0, 20)
	if got.Status() != Expired || got.Counts.Expired != 20 || f.callsTotal() != 0 {
		t.Errorf("job %s %+v after %d calls", got.Status(), got.Counts, f.callsTotal())
	}
	if items[0].Error == nil || items[0].Error.Code != "deadline" || items[0].Error.HTTPStatus != 504 {
		t.Errorf("item %+v", items[0])
	}
}

// Items waiting to retry hold the window; when they fill it, they must
// still run (a refused job once stalled for ever this way).
func TestRunnerRetriesFillWindow(t *testing.T) {
	cfg := testConfig(t)
	cfg.WindowJob, cfg.WindowTotal = 4, 4
	cfg.RetryBackoffMin, cfg.RetryBackoffMax = time.Millisecond, 2*time.Millisecond
	s := openStore(t, cfg, newClock())
	f := newFake()
	f.refusals = 2
	r := startRunner(t, s, f)
	in := inputs(20, "x")
	j, _, _ := r.Submit(batchSpec("a", in))
	waitDone(t, r, "a", j.ID)
	checkOutputs(t, r, "a", j.ID, in, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.totalMax > 4 {
		t.Errorf("%d in flight, window 4", f.totalMax)
	}
}
