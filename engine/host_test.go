package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// mailbox is a minimal library for the tests: one goroutine per actor
// draining a buffered channel into the Cell.
type mailbox struct {
	ch   chan any
	done chan struct{}
}

func spawn(t *testing.T, h *host, addr actors.Address, a actors.Actor, b Backend) {
	t.Helper()
	mb := &mailbox{ch: make(chan any, 1024), done: make(chan struct{})}
	c, err := h.NewCell(addr, func() actors.Actor { return a }, func(m any) {
		select {
		case mb.ch <- m:
		case <-mb.done:
		}
	}, b)
	if err != nil {
		t.Fatal(err)
	}
	c.Open()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.Begin()
		for {
			select {
			case m := <-mb.ch:
				c.Handle(m)
			case <-mb.done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(mb.done)
		wg.Wait()
	})
}

type recorder struct {
	mu   sync.Mutex
	msgs []actors.Message
	f    func(ctx actors.Context, msg actors.Message)
}

func (r *recorder) Receive(ctx actors.Context, msg actors.Message) {
	r.mu.Lock()
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
	if r.f != nil {
		r.f(ctx, msg)
	}
}

func (r *recorder) find(pred func(actors.Message) bool) []actors.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []actors.Message
	for _, m := range r.msgs {
		if pred(m) {
			out = append(out, m)
		}
	}
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

func closeHost(t *testing.T, h *host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestJobDoneMapping(t *testing.T) {
	item := errors.New("bad item")
	cases := []struct {
		name     string
		outputs  []string
		itemErrs []error
		err      error
		want     actors.JobDone
	}{
		{"ok", []string{"a", "b"}, nil, nil, actors.JobDone{ID: 1, Outputs: []string{"a", "b"}}},
		{"item error", []string{"a", ""}, []error{nil, item}, nil, actors.JobDone{ID: 1, Outputs: []string{"a", ""}, ItemErrs: []string{"", "bad item"}}},
		{"all items good", []string{"a"}, []error{nil}, nil, actors.JobDone{ID: 1, Outputs: []string{"a"}}},
		{"batch error", nil, nil, errors.New("boom"), actors.JobDone{ID: 1, Err: "boom"}},
		{"device fault", nil, nil, fmt.Errorf("gpu lost: %w", ErrDeviceFault), actors.JobDone{ID: 1, Fault: true}},
		{"cut off", nil, nil, fmt.Errorf("hung: %w", context.DeadlineExceeded), actors.JobDone{ID: 1, Fault: true}},
	}
	for _, c := range cases {
		got := jobDone(1, c.outputs, c.itemErrs, c.err)
		if got.ID != c.want.ID || got.Err != c.want.Err || got.Fault != c.want.Fault ||
			!slices.Equal(got.Outputs, c.want.Outputs) || !slices.Equal(got.ItemErrs, c.want.ItemErrs) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

// blockingBackend hangs on input "hang" until its ctx ends, and counts the
// calls it saw cancelled; it answers anything else at once.
type blockingBackend struct {
	running   atomic.Int32
	overlaps  atomic.Int32
	cancelled atomic.Int32
}

func (b *blockingBackend) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	if b.running.Add(1) > 1 {
		b.overlaps.Add(1)
	}
	defer b.running.Add(-1)
	if inputs[0] == "hang" {
		<-ctx.Done()
		b.cancelled.Add(1)
		return nil, nil, ctx.Err()
	}
	return []string{model + version + inputs[0]}, nil, nil
}

type exec struct{ job actors.Job }

// TestWorkerAbandon: a job started while another hangs abandons it: the
// hung call's context is cancelled, its result is never delivered, and the
// device never runs two calls at once.
func TestWorkerAbandon(t *testing.T) {
	h := newHost(1, time.Time{})
	b := &blockingBackend{}
	r := &recorder{f: func(ctx actors.Context, msg actors.Message) {
		if m, ok := msg.(exec); ok {
			ctx.Exec(m.job)
		}
	}}
	a := actors.Address{ID: 1}
	spawn(t, h, a, r, b)
	h.Send(a, exec{actors.Job{ID: 1, Model: "m", Version: "v", Inputs: []string{"hang"}}})
	eventually(t, "the hung call", func() bool { return b.running.Load() == 1 })
	h.Send(a, exec{actors.Job{ID: 2, Model: "m", Version: "v", Inputs: []string{"x"}}})
	isDone := func(m actors.Message) bool { _, ok := m.(actors.JobDone); return ok }
	eventually(t, "job 2", func() bool { return len(r.find(isDone)) > 0 })
	eventually(t, "the hung call cancelled", func() bool { return b.cancelled.Load() == 1 })
	closeHost(t, h)
	done := r.find(isDone)
	if len(done) != 1 || done[0].(actors.JobDone).ID != 2 || done[0].(actors.JobDone).Outputs[0] != "mvx" {
		t.Errorf("JobDone: %+v, want only job 2's", done)
	}
	if b.overlaps.Load() != 0 {
		t.Error("two backend calls ran at once on one device")
	}
}

// TestCloseStopsEverything: Close stops armed timers and a worker stuck in
// a call, and waits for them; nothing is delivered after.
func TestCloseStopsEverything(t *testing.T) {
	h := newHost(1, time.Time{})
	b := &blockingBackend{}
	r := &recorder{f: func(ctx actors.Context, msg actors.Message) {
		if _, ok := msg.(actors.Start); ok {
			ctx.After(time.Hour, "never")
			ctx.Exec(actors.Job{ID: 1, Inputs: []string{"hang"}})
		}
	}}
	spawn(t, h, actors.Address{ID: 1}, r, b)
	eventually(t, "the hung call", func() bool { return b.running.Load() == 1 })
	closeHost(t, h)
	if b.cancelled.Load() != 1 {
		t.Error("the hung call was not cancelled")
	}
	if err := h.Listen(actors.Address{ID: 9}, func(actors.Message) {}); !errors.Is(err, errRuntimeClosed) {
		t.Errorf("Listen after Close: %v", err)
	}
}

func TestRouting(t *testing.T) {
	h := newHost(1, time.Time{})
	var got []actors.Message
	var mu sync.Mutex
	if err := h.Listen(actors.Address{ID: 5}, func(m actors.Message) { mu.Lock(); got = append(got, m); mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	if err := h.Listen(actors.Address{ID: 5}, func(actors.Message) {}); !errors.Is(err, errAddressTaken) {
		t.Errorf("second Listen: %v", err)
	}
	if err := h.Listen(actors.Address{}, func(actors.Message) {}); err == nil {
		t.Error("Listen at the zero address")
	}
	h.Send(actors.Address{ID: 5}, "hello")
	h.Send(actors.Address{ID: 6}, "nobody")
	h.Send(actors.Address{Node: "other", ID: 5}, "other node")
	if len(got) != 1 || got[0] != "hello" || h.DeadLetters() != 2 {
		t.Errorf("got %v, dead letters %d", got, h.DeadLetters())
	}
	closeHost(t, h)
}

// TestTimerIDsUnique: two actors never get the same timer ID, so one's
// stale ID cannot cancel the other's timer.
func TestTimerIDsUnique(t *testing.T) {
	h := newHost(1, time.Time{})
	var mu sync.Mutex
	ids := map[actors.TimerID]bool{}
	dup := false
	for i := range 2 {
		r := &recorder{f: func(ctx actors.Context, msg actors.Message) {
			if _, ok := msg.(actors.Start); ok {
				for range 100 {
					id := ctx.After(time.Hour, "x")
					mu.Lock()
					dup = dup || ids[id]
					ids[id] = true
					mu.Unlock()
				}
			}
		}}
		spawn(t, h, actors.Address{ID: uint64(i + 1)}, r, nil)
	}
	eventually(t, "the timers", func() bool { mu.Lock(); defer mu.Unlock(); return len(ids) == 200 || dup })
	if dup {
		t.Error("a timer ID was given twice")
	}
	closeHost(t, h)
}

// TestContextOutsideReceive: a Context kept past its Receive panics rather
// than act out of turn.
func TestContextOutsideReceive(t *testing.T) {
	h := newHost(1, time.Time{})
	c, err := h.NewCell(actors.Address{ID: 1}, func() actors.Actor { return &recorder{} }, func(any) {}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Begin()
	defer func() {
		if recover() == nil {
			t.Error("Send outside Receive did not panic")
		}
		closeHost(t, h)
	}()
	c.Send(actors.Address{ID: 1}, "x")
}

// TestSendBeforeOpen: until the adapter opens a cell (its library's spawn
// has returned), messages to it are dead letters and never reach the
// library, whose mailbox may not take them yet (protoactor's then never ran
// the actor at all); once open, they are posted.
func TestSendBeforeOpen(t *testing.T) {
	h := newHost(1, time.Time{})
	var posted atomic.Int64
	c, err := h.NewCell(actors.Address{ID: 1}, func() actors.Actor { return &recorder{} }, func(any) { posted.Add(1) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Send(actors.Address{ID: 1}, "early")
	if posted.Load() != 0 || h.DeadLetters() != 1 {
		t.Errorf("before Open: %d posted, %d dead letters; want 0 and 1", posted.Load(), h.DeadLetters())
	}
	c.Open()
	h.Send(actors.Address{ID: 1}, "late")
	if posted.Load() != 1 || h.DeadLetters() != 1 {
		t.Errorf("after Open: %d posted, %d dead letters; want 1 and 1", posted.Load(), h.DeadLetters())
	}
	// An actor may send to itself from its Start, which the library may
	// deliver before its spawn returns, hence before Open.
	var self atomic.Int64
	s, err := h.NewCell(actors.Address{ID: 2}, func() actors.Actor {
		return funcActor(func(ctx actors.Context, msg actors.Message) {
			if _, ok := msg.(actors.Start); ok {
				ctx.Send(ctx.Self(), "to myself")
			}
		})
	}, func(any) { self.Add(1) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Begin()
	if self.Load() != 1 {
		t.Errorf("a send to itself before Open: %d posted, want 1", self.Load())
	}
	closeHost(t, h)
}

type funcActor func(actors.Context, actors.Message)

func (f funcActor) Receive(ctx actors.Context, msg actors.Message) { f(ctx, msg) }

// TestHostClockEpoch: a host whose clock counts from an epoch reads the
// time since it, so two nodes started apart agree on what time it is; one
// without counts from its start.
func TestHostClockEpoch(t *testing.T) {
	epoch := time.Now().Add(-time.Hour)
	a := newHost(1, epoch)
	if d := a.Now() - time.Hour; d < 0 || d > time.Minute {
		t.Errorf("a clock from an epoch an hour ago reads %v", a.Now())
	}
	if n := newHost(1, time.Time{}).Now(); n > time.Minute {
		t.Errorf("a clock from its start reads %v", n)
	}
}
