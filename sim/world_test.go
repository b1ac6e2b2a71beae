package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"pgregory.net/rapid"
)

func addr(id uint64) actors.Address { return actors.Address{ID: id} }

// actorFunc adapts a function to actors.Actor.
type actorFunc func(ctx actors.Context, msg actors.Message)

func (f actorFunc) Receive(ctx actors.Context, msg actors.Message) { f(ctx, msg) }

// delivery is one observed delivery.
type delivery struct {
	at       time.Duration
	from, to actors.Address
	msg      actors.Message
}

type recorder struct{ got []delivery }

func (r *recorder) Deliver(at time.Duration, from, to actors.Address, msg actors.Message) {
	r.got = append(r.got, delivery{at, from, to, msg})
}

// orderMsg carries the index of the Send/After/Inject call that scheduled
// it; indexes grow in scheduling order, like the World's sequence numbers.
type orderMsg struct{ idx int }

// TestOrderMatchesReference: on random schedules of sends, timers (some of
// them cancelled), injections and stepwise RunUntil, deliveries come in
// exactly the order of a reference sort by (time, scheduling order), each at
// its time, and cancelled timers never. rapid explores and shrinks small
// schedules; the seeded loop adds a few hundred long ones.
func TestOrderMatchesReference(t *testing.T) {
	t.Run("rapid", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			checkOrder(t, 300, func(label string, lo, hi int) int { return rapid.IntRange(lo, hi).Draw(t, label) })
		})
	})
	t.Run("seeded", func(t *testing.T) {
		for seed := range uint64(200) {
			r := NewStream(seed, "order")
			checkOrder(t, 3000, func(_ string, lo, hi int) int { return lo + r.IntN(hi-lo+1) })
		}
	})
}

// checkOrder runs one random schedule; draw returns a number in [lo, hi].
func checkOrder(t interface{ Fatalf(string, ...any) }, budgetMax int, draw func(label string, lo, hi int) int) {
	pick := func(label string, from ...int) int { return from[draw(label, 0, len(from)-1)] }
	netDelay := time.Duration(pick("netDelay", 0, 0, 1, 3))
	w := NewWorld(WorldConfig{Seed: 1, NetDelay: netDelay})
	const actorsN = 3
	budget := draw("budget", 0, budgetMax)

	var (
		at        []time.Duration // by idx
		cancelled = map[int]bool{}
		delivered = map[int]bool{}
		order     []int
		timerIdx  = map[actors.TimerID]int{}
		timersOf  = make([][]actors.TimerID, actorsN+1)
	)
	newIdx := func(when time.Duration) int {
		at = append(at, when)
		return len(at) - 1
	}
	act := func(self uint64) actorFunc {
		return func(ctx actors.Context, msg actors.Message) {
			if m, ok := msg.(orderMsg); ok {
				if ctx.Now() != at[m.idx] {
					t.Fatalf("event %d delivered at %v, scheduled for %v", m.idx, ctx.Now(), at[m.idx])
				}
				if cancelled[m.idx] {
					t.Fatalf("cancelled timer %d delivered", m.idx)
				}
				delivered[m.idx] = true
				order = append(order, m.idx)
			}
			for k := draw("fanout", 0, 3); k > 0 && budget > 0; k-- {
				budget--
				switch draw("kind", 0, 2) {
				case 0:
					to := addr(uint64(draw("to", 1, actorsN)))
					ctx.Send(to, orderMsg{newIdx(ctx.Now() + netDelay)})
				case 1:
					d := time.Duration(pick("after", 0, 0, 1, 2, 5))
					i := newIdx(ctx.Now() + d)
					id := ctx.After(d, orderMsg{i})
					timerIdx[id] = i
					timersOf[self] = append(timersOf[self], id)
				case 2:
					own := timersOf[self]
					if len(own) == 0 {
						continue
					}
					id := own[draw("cancel", 0, len(own)-1)]
					ctx.Cancel(id) // may be stale: fired or cancelled already
					if i := timerIdx[id]; !delivered[i] {
						cancelled[i] = true
					}
				}
			}
		}
	}
	for id := uint64(1); id <= actorsN; id++ {
		w.Spawn(addr(id), act(id))
	}
	for steps := draw("steps", 1, 5); steps > 0; steps-- {
		for range draw("injects", 0, 3) {
			when := w.Now() + time.Duration(draw("injectAt", 0, 4))
			to := addr(uint64(draw("injectTo", 1, actorsN)))
			w.Inject(when, to, orderMsg{newIdx(when)})
		}
		until := w.Now() + time.Duration(draw("until", 0, 6))
		if err := w.RunUntil(until); err != nil {
			t.Fatalf("RunUntil: %v", err)
		}
		if w.Now() != until {
			t.Fatalf("clock at %v after RunUntil(%v)", w.Now(), until)
		}
	}
	if err := w.Run(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	var want []int
	for i := range at {
		if !cancelled[i] {
			want = append(want, i)
		}
	}
	slices.SortStableFunc(want, func(a, b int) int {
		if at[a] != at[b] {
			return int(at[a] - at[b])
		}
		return a - b
	})
	if !slices.Equal(order, want) {
		t.Fatalf("delivery order\n got %v\nwant %v", order, want)
	}
	if w.Pending() != 0 {
		t.Fatalf("Pending() = %d after Run", w.Pending())
	}
}

type tick struct{ n int }

func TestTimerFiresAtItsTime(t *testing.T) {
	w := NewWorld(DefaultWorldConfig(1))
	var fired []time.Duration
	w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
		switch msg.(type) {
		case actors.Start:
			ctx.After(30*time.Millisecond, tick{})
			ctx.After(10*time.Millisecond, tick{})
			ctx.After(-time.Second, tick{}) // negative counts as zero
		case tick:
			fired = append(fired, ctx.Now())
		}
	}))
	rec := &recorder{}
	w.Observe(rec)
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 10 * time.Millisecond, 30 * time.Millisecond}
	if !slices.Equal(fired, want) {
		t.Fatalf("timers fired at %v, want %v", fired, want)
	}
	for _, d := range rec.got {
		if _, ok := d.msg.(tick); ok && (d.from != addr(1) || d.to != addr(1)) {
			t.Fatalf("timer delivered from %v to %v, want from == to == self", d.from, d.to)
		}
	}
	if w.Now() != 30*time.Millisecond {
		t.Fatalf("clock at %v after Run, want the last event's time", w.Now())
	}
}

func TestTimerCancel(t *testing.T) {
	w := NewWorld(DefaultWorldConfig(1))
	var fired []int
	var keep, drop actors.TimerID
	w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
		switch m := msg.(type) {
		case actors.Start:
			drop = ctx.After(5*time.Millisecond, tick{1})
			keep = ctx.After(10*time.Millisecond, tick{2})
			ctx.After(1*time.Millisecond, tick{0})
		case tick:
			fired = append(fired, m.n)
			if m.n == 0 {
				ctx.Cancel(drop)
				ctx.Cancel(drop) // twice: harmless
			}
		}
	}))
	if err := w.RunUntil(2 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := w.Pending(); got != 1 {
		t.Fatalf("Pending() = %d with one live timer and one cancelled, want 1", got)
	}
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fired, []int{0, 2}) {
		t.Fatalf("fired %v, want [0 2]: the cancelled timer must not fire", fired)
	}
	if keep == drop || keep == 0 || drop == 0 {
		t.Fatalf("timer IDs %d, %d: want distinct and non-zero", keep, drop)
	}
	if w.timers.queued() != 0 || w.timers.cancelled != 0 {
		t.Fatalf("timer bookkeeping not empty after Run: %d queued, %d cancelled", w.timers.queued(), w.timers.cancelled)
	}
}

// TestStaleCancelHarmless: cancelling a fired timer, an unknown ID, the zero
// ID, or another actor's timer changes nothing.
func TestStaleCancelHarmless(t *testing.T) {
	w := NewWorld(DefaultWorldConfig(1))
	var fired1, fired2 []int
	var t1, t2 actors.TimerID
	w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
		switch m := msg.(type) {
		case actors.Start:
			t1 = ctx.After(time.Millisecond, tick{1})
		case tick:
			fired1 = append(fired1, m.n)
			ctx.Cancel(t1)    // fired already
			ctx.Cancel(12345) // unknown
			ctx.Cancel(0)     // names no timer
			ctx.Cancel(t2)    // not ours
			ctx.Send(addr(2), "next")
		}
	}))
	w.Spawn(addr(2), actorFunc(func(ctx actors.Context, msg actors.Message) {
		switch m := msg.(type) {
		case actors.Start:
			t2 = ctx.After(5*time.Millisecond, tick{2})
		case tick:
			fired2 = append(fired2, m.n)
		}
	}))
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fired1, []int{1}) || !slices.Equal(fired2, []int{2}) {
		t.Fatalf("fired %v and %v, want [1] and [2]", fired1, fired2)
	}
	if w.timers.cancelled != 0 || w.timers.queued() != 0 {
		t.Fatalf("stale cancels left bookkeeping: %d cancelled, %d queued", w.timers.cancelled, w.timers.queued())
	}
}

// fixedExec completes every job after d with one output per input, or hangs.
type fixedExec struct {
	d    time.Duration
	hang bool
	runs []time.Duration
}

func (e *fixedExec) Run(now time.Duration, job actors.Job) (time.Duration, actors.JobDone, bool) {
	e.runs = append(e.runs, now)
	out := make([]string, len(job.Inputs))
	for i, in := range job.Inputs {
		out[i] = actors.EmulatedOutput(job.Model, job.Version, in)
	}
	return now + e.d, actors.JobDone{ID: job.ID, Outputs: out}, e.hang
}

func TestExecDeliversJobDone(t *testing.T) {
	w := NewWorld(DefaultWorldConfig(1))
	dev := NewDevice(actors.FixedLatency(100*time.Millisecond), FaultPlan{}, w.Stream("device/1"))
	w.SetExecutor(addr(1), dev) // before Spawn is fine
	inputs := []string{"a", "bb", "ccc"}
	var got []actors.JobDone
	var at []time.Duration
	w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
		switch m := msg.(type) {
		case actors.Start:
			ctx.After(7*time.Millisecond, tick{})
		case tick:
			ctx.Exec(actors.Job{ID: 42, Model: "m", Version: "v2", Inputs: inputs})
		case actors.JobDone:
			got = append(got, m)
			at = append(at, ctx.Now())
		}
	}))
	rec := &recorder{}
	w.Observe(rec)
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || at[0] != 107*time.Millisecond {
		t.Fatalf("got %d JobDone at %v, want one at 107ms", len(got), at)
	}
	if got[0].ID != 42 || got[0].Fault || got[0].Err != "" || got[0].ItemErrs != nil {
		t.Fatalf("JobDone %+v: want ID 42 and no failure", got[0])
	}
	for i, in := range inputs {
		if want := actors.EmulatedOutput("m", "v2", in); got[0].Outputs[i] != want {
			t.Fatalf("output %d = %q, want %q", i, got[0].Outputs[i], want)
		}
	}
	last := rec.got[len(rec.got)-1]
	if last.from != addr(1) || last.to != addr(1) {
		t.Fatalf("JobDone delivered from %v to %v, want from == to == self", last.from, last.to)
	}
	if dev.Jobs() != 1 || dev.BusyTime() != 100*time.Millisecond {
		t.Fatalf("device ran %d jobs for %v, want 1 for 100ms", dev.Jobs(), dev.BusyTime())
	}
}

func TestExecHangNeverDelivers(t *testing.T) {
	w := NewWorld(DefaultWorldConfig(1))
	exec := &fixedExec{d: time.Millisecond, hang: true}
	w.SetExecutor(addr(1), exec)
	done := 0
	w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
		switch msg.(type) {
		case actors.Start:
			ctx.Exec(actors.Job{ID: 1, Inputs: []string{"x"}})
		case actors.JobDone:
			done++
		}
	}))
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	if done != 0 || len(exec.runs) != 1 || w.Pending() != 0 {
		t.Fatalf("hung job: %d JobDone, %d runs, %d pending; want 0, 1, 0", done, len(exec.runs), w.Pending())
	}
}

func TestExecPanics(t *testing.T) {
	cases := []struct {
		name string
		exec Executor
		want string
	}{
		{"no executor", nil, "no executor"},
		{"done before now", badExec{done: -1, id: 1}, "before it started"},
		{"wrong job ID", badExec{done: 5, id: 2}, "JobDone for job 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := NewWorld(DefaultWorldConfig(1))
			if c.exec != nil {
				w.SetExecutor(addr(1), c.exec)
			}
			w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
				ctx.Exec(actors.Job{ID: 1, Inputs: []string{"x"}})
			}))
			expectPanic(t, c.want, func() { _ = w.Run() })
		})
	}
}

type badExec struct {
	done time.Duration
	id   uint64
}

func (e badExec) Run(now time.Duration, job actors.Job) (time.Duration, actors.JobDone, bool) {
	return e.done, actors.JobDone{ID: e.id}, false
}

// TestSendFIFOPerSender: with a network delay, messages from one sender to
// one receiver arrive in the order sent, each NetDelay after its send.
func TestSendFIFOPerSender(t *testing.T) {
	w := NewWorld(WorldConfig{Seed: 1, NetDelay: 2 * time.Millisecond})
	var got []int
	var gotAt []time.Duration
	w.Spawn(addr(2), actorFunc(func(ctx actors.Context, msg actors.Message) {
		if m, ok := msg.(tick); ok {
			got = append(got, m.n)
			gotAt = append(gotAt, ctx.Now())
		}
	}))
	w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
		switch m := msg.(type) {
		case actors.Start:
			for i := range 5 {
				ctx.Send(addr(2), tick{i})
			}
			ctx.After(time.Millisecond, tick{100})
		case tick:
			ctx.Send(addr(2), tick{m.n})
		}
	}))
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int{0, 1, 2, 3, 4, 100}) {
		t.Fatalf("received %v, want sending order", got)
	}
	if gotAt[0] != 2*time.Millisecond || gotAt[5] != 3*time.Millisecond {
		t.Fatalf("received at %v, want 2ms and, for the last, 3ms", gotAt)
	}
}

// TestObserveAndDeadLetters: observers see every delivery in order, with the
// right addresses, before Receive; a message to an address nobody holds
// reaches observers and is counted as a dead letter.
func TestObserveAndDeadLetters(t *testing.T) {
	w := NewWorld(DefaultWorldConfig(1))
	var calls []string
	w.Observe(observerFunc(func(at time.Duration, from, to actors.Address, msg actors.Message) {
		calls = append(calls, fmt.Sprintf("A %v %d->%d %T", at, from.ID, to.ID, msg))
	}))
	w.Observe(observerFunc(func(at time.Duration, from, to actors.Address, msg actors.Message) {
		calls = append(calls, "B")
	}))
	client := actors.Address{Node: "n2", ID: 99}
	w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
		calls = append(calls, fmt.Sprintf("recv %T", msg))
		if s, ok := msg.(actors.Submit); ok {
			ctx.Send(s.Req.ReplyTo, actors.Reply{ID: s.Req.ID, Outcome: actors.Completed})
		}
	}))
	var replyTo actors.Address
	w.Observe(observerFunc(func(at time.Duration, from, to actors.Address, msg actors.Message) {
		if _, ok := msg.(actors.Reply); ok {
			replyTo = to
		}
	}))
	w.Inject(3*time.Millisecond, addr(1), actors.Submit{Req: actors.Request{ID: 7, ReplyTo: client}})
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"A 0s 1->1 actors.Start", "B", "recv actors.Start",
		"A 3ms 0->1 actors.Submit", "B", "recv actors.Submit",
		"A 3ms 1->99 actors.Reply", "B",
	}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls\n got %q\nwant %q", calls, want)
	}
	if replyTo != client {
		t.Fatalf("reply observed to %v, want %v", replyTo, client)
	}
	if w.DeadLetters() != 1 || w.Events() != 3 {
		t.Fatalf("%d dead letters of %d events, want 1 of 3", w.DeadLetters(), w.Events())
	}
}

// TestSpawnAfterSend: a message sent to an address before anybody is
// spawned there reaches whoever is there when it is delivered.
func TestSpawnAfterSend(t *testing.T) {
	w := NewWorld(DefaultWorldConfig(1))
	w.Inject(5, addr(9), tick{1})
	got := 0
	w.Spawn(addr(9), actorFunc(func(ctx actors.Context, msg actors.Message) {
		if _, ok := msg.(tick); ok {
			got++
		}
	}))
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	if got != 1 || w.DeadLetters() != 0 {
		t.Fatalf("got %d ticks, %d dead letters; want 1, 0", got, w.DeadLetters())
	}
}

type observerFunc func(at time.Duration, from, to actors.Address, msg actors.Message)

func (f observerFunc) Deliver(at time.Duration, from, to actors.Address, msg actors.Message) {
	f(at, from, to, msg)
}

// pingPong builds a small world with randomness everywhere: random think
// times from the actors' own streams, and a faulty device executing jobs.
func pingPong(seed uint64, rounds int) *World {
	w := NewWorld(DefaultWorldConfig(seed))
	faults := FaultPlan{CrashRate: 0.1, BatchErrorRate: 0.1, ItemErrorRate: 0.2, SlowRate: 0.2, SlowFactor: 3}
	w.SetExecutor(addr(2), NewDevice(actors.FixedLatency(10*time.Millisecond), faults, w.Stream("device/2")))
	left := rounds
	player := func(peer actors.Address) actorFunc {
		return func(ctx actors.Context, msg actors.Message) {
			switch m := msg.(type) {
			case actors.Start:
				if ctx.Self() == addr(1) {
					ctx.Send(peer, actors.Submit{Req: actors.Request{ID: 1}})
				}
			case actors.Submit:
				if left--; left <= 0 {
					return
				}
				think := time.Duration(ctx.Rand().IntN(1000)) * time.Microsecond
				ctx.After(think, tick{int(m.Req.ID)})
				if ctx.Self() == addr(2) {
					ctx.Exec(actors.Job{ID: m.Req.ID, Model: "m", Inputs: []string{"a", "b"}})
				}
			case tick:
				ctx.Send(peer, actors.Submit{Req: actors.Request{ID: uint64(m.n) + 1}})
			}
		}
	}
	w.Spawn(addr(1), player(addr(2)))
	w.Spawn(addr(2), player(addr(1)))
	return w
}

func TestTraceHashDeterministic(t *testing.T) {
	run := func(seed uint64) (uint64, int64) {
		w := pingPong(seed, 200)
		if err := w.Run(); err != nil {
			t.Fatal(err)
		}
		return w.TraceHash(), w.Events()
	}
	h1, n1 := run(1)
	h1b, n1b := run(1)
	h2, _ := run(2)
	if h1 != h1b || n1 != n1b {
		t.Fatalf("same seed, different traces: %x (%d events) vs %x (%d events)", h1, n1, h1b, n1b)
	}
	if h1 == h2 {
		t.Fatalf("seeds 1 and 2 gave the same trace hash %x", h1)
	}
	if n1 < 400 {
		t.Fatalf("only %d events: the scenario did not run", n1)
	}
}

// TestTraceHashSeesMessageFields: two runs that differ in one message field
// only (same times, addresses and types) hash differently.
func TestTraceHashSeesMessageFields(t *testing.T) {
	msgs := []struct{ a, b actors.Message }{
		{actors.Submit{Req: actors.Request{ID: 1}}, actors.Submit{Req: actors.Request{ID: 2}}},
		{actors.Reply{ID: 1, Outcome: actors.Completed}, actors.Reply{ID: 1, Outcome: actors.Failed}},
		{actors.RunBatch{Batch: actors.Batch{ID: 1, Items: []actors.Item{{Req: actors.Request{ID: 1}}}}},
			actors.RunBatch{Batch: actors.Batch{ID: 1, Items: []actors.Item{{Req: actors.Request{ID: 2}}}}}},
		{actors.JobDone{ID: 1}, actors.JobDone{ID: 1, Fault: true}},
		{actors.BatchAborted{BatchID: 1}, actors.BatchAborted{BatchID: 1, Pending: []uint64{3}}},
		{actors.DeviceReady{Incarnation: 1}, actors.DeviceReady{Incarnation: 2}},
		{actors.Start{}, actors.Drain{}},
	}
	hash := func(m actors.Message) uint64 {
		w := NewWorld(DefaultWorldConfig(1))
		w.Inject(1, addr(1), m)
		if err := w.Run(); err != nil {
			t.Fatal(err)
		}
		return w.TraceHash()
	}
	for _, m := range msgs {
		if hash(m.a) == hash(m.b) {
			t.Errorf("%#v and %#v hash the same", m.a, m.b)
		}
	}
}

func TestRunUntil(t *testing.T) {
	w := NewWorld(DefaultWorldConfig(1))
	var seen []time.Duration
	w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
		seen = append(seen, ctx.Now())
	}))
	for _, at := range []time.Duration{10, 20, 30} {
		w.Inject(at, addr(1), tick{})
	}
	if err := w.RunUntil(20); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []time.Duration{0, 10, 20}) || w.Now() != 20 || w.Pending() != 1 {
		t.Fatalf("after RunUntil(20): seen %v, now %v, pending %d", seen, w.Now(), w.Pending())
	}
	if err := w.RunUntil(25); err != nil {
		t.Fatal(err)
	}
	if w.Now() != 25 || len(seen) != 3 {
		t.Fatalf("after RunUntil(25): now %v, seen %v", w.Now(), seen)
	}
	expectPanic(t, "never goes back", func() { _ = w.RunUntil(24) })
	expectPanic(t, "before now", func() { w.Inject(24, addr(1), tick{}) })
}

func TestEventsMax(t *testing.T) {
	w := NewWorld(WorldConfig{Seed: 1, EventsMax: 100})
	// A livelock: a zero-delay timer that re-arms itself for ever.
	w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
		ctx.After(0, tick{})
	}))
	err := w.Run()
	if !errors.Is(err, ErrEventsMax) {
		t.Fatalf("Run() = %v, want ErrEventsMax", err)
	}
	if w.Events() != 100 || w.Pending() != 1 {
		t.Fatalf("stopped after %d events with %d pending, want 100 and 1", w.Events(), w.Pending())
	}
	if err := w.RunUntil(5); !errors.Is(err, ErrEventsMax) || w.Now() != 0 {
		t.Fatalf("RunUntil past the limit = %v at %v, want ErrEventsMax and the clock unmoved", err, w.Now())
	}
}

func TestPendingMax(t *testing.T) {
	w := NewWorld(WorldConfig{Seed: 1, PendingMax: 10})
	for i := range 11 {
		w.Inject(time.Duration(i), addr(1), tick{})
	}
	if err := w.Run(); !errors.Is(err, ErrPendingMax) {
		t.Fatalf("Run() = %v, want ErrPendingMax", err)
	}
	if w.Events() != 0 {
		t.Fatalf("%d events delivered past the pending limit, want 0", w.Events())
	}
}

func TestProgrammingErrorsPanic(t *testing.T) {
	noop := actorFunc(func(actors.Context, actors.Message) {})
	t.Run("duplicate spawn", func(t *testing.T) {
		w := NewWorld(DefaultWorldConfig(1))
		w.Spawn(addr(1), noop)
		expectPanic(t, "already taken", func() { w.Spawn(addr(1), noop) })
	})
	t.Run("zero address", func(t *testing.T) {
		w := NewWorld(DefaultWorldConfig(1))
		expectPanic(t, "zero address", func() { w.Spawn(actors.Address{}, noop) })
	})
	t.Run("negative net delay", func(t *testing.T) {
		expectPanic(t, "NetDelay", func() { NewWorld(WorldConfig{NetDelay: -1}) })
	})
	t.Run("context kept past Receive", func(t *testing.T) {
		w := NewWorld(DefaultWorldConfig(1))
		var kept actors.Context
		w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) { kept = ctx }))
		if err := w.Run(); err != nil {
			t.Fatal(err)
		}
		expectPanic(t, "outside its Receive", func() { kept.Send(addr(1), tick{}) })
	})
	t.Run("run inside Receive", func(t *testing.T) {
		w := NewWorld(DefaultWorldConfig(1))
		w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) { _ = w.Run() }))
		expectPanic(t, "inside an actor", func() { _ = w.Run() })
	})
}

// TestReceiveNotReentrant: a Send inside Receive only enqueues; the receiver
// runs after the sender's Receive returns, even at zero delay and to itself.
func TestReceiveNotReentrant(t *testing.T) {
	w := NewWorld(DefaultWorldConfig(1))
	depth, maxDepth, n := 0, 0, 0
	w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
		depth++
		maxDepth = max(maxDepth, depth)
		if n++; n < 10 {
			ctx.Send(ctx.Self(), tick{})
		}
		depth--
	}))
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	if maxDepth != 1 || n != 10 {
		t.Fatalf("max Receive depth %d over %d calls, want 1 over 10", maxDepth, n)
	}
}

func TestStreams(t *testing.T) {
	a, b := NewStream(7, "x"), NewStream(7, "x")
	c, d := NewStream(7, "y"), NewStream(8, "x")
	same, diffName, diffSeed := true, 0, 0
	for range 64 {
		va, vc, vd := a.Uint64(), c.Uint64(), d.Uint64()
		if va != b.Uint64() {
			same = false
		}
		if va == vc {
			diffName++
		}
		if va == vd {
			diffSeed++
		}
	}
	if !same || diffName > 0 || diffSeed > 0 {
		t.Fatalf("streams: same name same seed equal=%v; collisions with other name %d, other seed %d", same, diffName, diffSeed)
	}
	// Each actor's Rand is its own stream, fixed by seed and address.
	w := NewWorld(DefaultWorldConfig(7))
	var got [2]uint64
	for i := range got {
		id := uint64(i + 1)
		w.Spawn(addr(id), actorFunc(func(ctx actors.Context, msg actors.Message) { got[id-1] = ctx.Rand().Uint64() }))
	}
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	if got[0] == got[1] || got[0] != NewStream(7, "actor/1").Uint64() {
		t.Fatalf("actor streams %x, %x: want distinct, and actor 1's = Stream(\"actor/1\")", got[0], got[1])
	}
}

func expectPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one mentioning %q", want)
		}
		if !strings.Contains(fmt.Sprint(r), want) {
			t.Fatalf("panic %q, want one mentioning %q", r, want)
		}
	}()
	f()
}

// ping is a pointer-free message; the benchmarks box one value up front
// and resend it, as an actor forwarding a message would.
type ping struct{ n uint32 }

// BenchmarkWorldEvents measures the event loop alone, with trivial actors.
// ring: two actors ping-pong at zero network delay (every event through the
// ring). netdelay: the same with a 1µs network delay (every event through a
// heap of one). timers-1k and timers-1M: an actor keeps 1024 (or 2^20)
// timers of random length queued, setting a new one as each fires, so every
// event goes through the timer table and a heap of that size; a million
// does not fit in cache, as with a traffic generator that schedules every
// arrival up front.
func BenchmarkWorldEvents(b *testing.B) {
	var box actors.Message = ping{1}
	pingPongBench := func(b *testing.B, netDelay time.Duration) {
		w := NewWorld(WorldConfig{Seed: 1, NetDelay: netDelay, EventsMax: 1 << 62})
		left := b.N
		player := func(peer actors.Address) actorFunc {
			return func(ctx actors.Context, msg actors.Message) {
				if _, ok := msg.(actors.Start); ok && ctx.Self() != addr(1) {
					return
				}
				if left--; left > 0 {
					ctx.Send(peer, box)
				}
			}
		}
		w.Spawn(addr(1), player(addr(2)))
		w.Spawn(addr(2), player(addr(1)))
		b.ReportAllocs()
		b.ResetTimer()
		if err := w.Run(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(w.Events())/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("ring", func(b *testing.B) { pingPongBench(b, 0) })
	b.Run("netdelay", func(b *testing.B) { pingPongBench(b, time.Microsecond) })
	timers := func(b *testing.B, queued int) {
		w := NewWorld(WorldConfig{Seed: 1, EventsMax: 1 << 62})
		left := b.N
		w.Spawn(addr(1), actorFunc(func(ctx actors.Context, msg actors.Message) {
			n := 1
			if _, ok := msg.(actors.Start); ok {
				n = queued
			}
			for range n {
				if left--; left >= 0 {
					ctx.After(time.Duration(1+ctx.Rand().IntN(1_000_000))*time.Microsecond, box)
				}
			}
		}))
		// Fill the queue and the timer table up to their working size.
		if err := w.RunUntil(0); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		if err := w.Run(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(w.Events()-1)/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("timers-1k", func(b *testing.B) { timers(b, 1<<10) })
	b.Run("timers-64k", func(b *testing.B) { timers(b, 1<<16) })
	b.Run("timers-1M", func(b *testing.B) { timers(b, 1<<20) })
}
