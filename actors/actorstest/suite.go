package actorstest

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// Runtime is what the suite needs of a runtime under test. Each subtest
// gets a fresh one; the factory should register its cleanup with t.Cleanup.
type Runtime interface {
	// Spawn starts an actor at addr. newActor makes its value: once, and
	// again for each restart where the runtime supervises. exec, when not
	// nil, runs the actor's Exec jobs.
	Spawn(addr actors.Address, newActor func() actors.Actor, exec Executor)
	// Inject delivers msg to the actor at to from outside any actor.
	// Messages injected one after another arrive in that order.
	Inject(to actors.Address, msg actors.Message)
	// Await lets the runtime run until cond holds and reports whether it
	// did within the runtime's bound (virtual for a simulator, a generous
	// real-time one for a live runtime). cond reads only what the suite's
	// actors recorded under a lock.
	Await(cond func() bool) bool
	// Sleep lets at least d of the runtime's time pass.
	Sleep(d time.Duration)
	// Supervised reports whether a panicking actor is restarted.
	Supervised() bool
	// Locker returns a new lock for what the suite's actors record: a live
	// runtime runs them on its goroutines while the checks read on the
	// test's, so it returns a mutex; a single-threaded runtime may return
	// one that does nothing. The runtime owns concurrency, here as for the
	// actors.
	Locker() Locker
}

// Executor is what a job does on the runtime's executor: how long it takes
// for these inputs, or that it hangs (never completes on its own). Its
// outputs are actors.EmulatedOutput of each input.
type Executor func(inputs []string) (delay time.Duration, hang bool)

// Outputs are the outputs an Executor's job answers.
func Outputs(model, version string, inputs []string) []string {
	out := make([]string, len(inputs))
	for i, in := range inputs {
		out[i] = actors.EmulatedOutput(model, version, in)
	}
	return out
}

// Run runs the suite, each case as a subtest with a fresh runtime.
func Run(t *testing.T, newRuntime func(t *testing.T) Runtime) {
	cases := []struct {
		name string
		f    func(t *testing.T, rt Runtime)
	}{
		{"FIFOPerSender", testFIFO},
		{"TimerNotBeforeDelay", testTimerDelay},
		{"TimerCancel", testTimerCancel},
		{"TimerStaleCancel", testStaleCancel},
		{"ExecJobDone", testExec},
		{"ExecHangDoesNotBlock", testExecHang},
		{"NowNeverGoesBack", testNow},
		{"RestartAfterPanic", testRestart},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.f(t, newRuntime(t)) })
	}
}

func addr(id uint64) actors.Address { return actors.Address{ID: id} }

// Locker is the lock a Runtime provides (sync.Locker's shape).
type Locker interface {
	Lock()
	Unlock()
}

// journal is what the suite's actors record, under the runtime's lock: they
// may run on the runtime's goroutines, the checks on the test's.
type journal struct {
	mu   Locker
	evs  []event
	errs []string
}

type event struct {
	who  uint64 // the actor's address ID
	inc  int    // its incarnation, where it counts them
	kind string
	at   time.Duration
	v    any
}

func (j *journal) add(e event) {
	j.mu.Lock()
	j.evs = append(j.evs, e)
	j.mu.Unlock()
}

// fail records a violation seen inside an actor; the test reports it.
func (j *journal) fail(format string, args ...any) {
	j.mu.Lock()
	j.errs = append(j.errs, fmt.Sprintf(format, args...))
	j.mu.Unlock()
}

func (j *journal) all(kind string) []event {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []event
	for _, e := range j.evs {
		if e.kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func (j *journal) count(kind string) int { return len(j.all(kind)) }

func (j *journal) has(kind string) func() bool {
	return func() bool { return j.count(kind) > 0 }
}

func (j *journal) check(t *testing.T) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.errs {
		t.Error(e)
	}
}

func await(t *testing.T, rt Runtime, what string, cond func() bool) {
	t.Helper()
	if !rt.Await(cond) {
		t.Fatalf("gave up waiting for %s", what)
	}
}

// funcActor is an actor made of a function, for the suite's small probes.
type funcActor func(ctx actors.Context, msg actors.Message)

func (f funcActor) Receive(ctx actors.Context, msg actors.Message) { f(ctx, msg) }

func once(a actors.Actor) func() actors.Actor { return func() actors.Actor { return a } }

// Messages of the suite's probes.
type (
	seq struct {
		from, n uint64
		sentAt  time.Duration
	}
	burst struct {
		to actors.Address
		n  uint64
	}
	arm struct {
		tag string
		d   time.Duration
	}
	fire struct {
		tag     string
		armedAt time.Duration
		d       time.Duration
	}
	cancelNow  struct{ tag string }
	cancelThis struct{ id actors.TimerID }
	run        struct{ job actors.Job }
	boom       struct{}
	ping       struct{}
	goMsg      struct{}
)

// testFIFO: messages from one sender to one receiver arrive in the order
// sent, with several senders interleaving, and injected messages too. The
// receiver's clock is never behind the sender's at the send.
func testFIFO(t *testing.T, rt Runtime) {
	const n = 500
	const senders = 3
	j := &journal{mu: rt.Locker()}
	recv := addr(1)
	rt.Spawn(recv, once(funcActor(func(ctx actors.Context, msg actors.Message) {
		if m, ok := msg.(seq); ok {
			if now := ctx.Now(); now < m.sentAt {
				j.fail("received at %v a message sent at %v: the clock went back", now, m.sentAt)
			}
			j.add(event{who: m.from, kind: "seq", v: m.n})
		}
	})), nil)
	for s := uint64(0); s < senders; s++ {
		rt.Spawn(addr(10+s), once(funcActor(func(ctx actors.Context, msg actors.Message) {
			if m, ok := msg.(burst); ok {
				for i := uint64(0); i < m.n; i++ {
					ctx.Send(m.to, seq{from: ctx.Self().ID, n: i, sentAt: ctx.Now()})
				}
			}
		})), nil)
	}
	for s := uint64(0); s < senders; s++ {
		rt.Inject(addr(10+s), burst{to: recv, n: n})
	}
	for i := uint64(0); i < n; i++ {
		rt.Inject(recv, seq{from: 0, n: i})
	}
	await(t, rt, "every message", func() bool { return j.count("seq") == (senders+1)*n })
	next := map[uint64]uint64{}
	for _, e := range j.all("seq") {
		if got := e.v.(uint64); got != next[e.who] {
			t.Fatalf("from sender %d: got message %d, want %d (out of order or lost)", e.who, got, next[e.who])
		}
		next[e.who]++
	}
	j.check(t)
}

// timerActor arms timers on arm and records their firing.
func timerActor(j *journal) funcActor {
	return func(ctx actors.Context, msg actors.Message) {
		switch m := msg.(type) {
		case arm:
			ctx.After(m.d, fire{tag: m.tag, armedAt: ctx.Now(), d: m.d})
		case fire:
			j.add(event{kind: "fire", at: ctx.Now(), v: m})
		}
	}
}

// testTimerDelay: a timer fires, and not before its delay has passed on the
// runtime clock; a negative delay counts as zero.
func testTimerDelay(t *testing.T, rt Runtime) {
	j := &journal{mu: rt.Locker()}
	a := addr(1)
	rt.Spawn(a, once(timerActor(j)), nil)
	delays := []time.Duration{-time.Millisecond, 0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}
	for i, d := range delays {
		rt.Inject(a, arm{tag: fmt.Sprint(i), d: d})
	}
	await(t, rt, "every timer", func() bool { return j.count("fire") == len(delays) })
	for _, e := range j.all("fire") {
		f := e.v.(fire)
		if waited := e.at - f.armedAt; waited < max(f.d, 0) {
			t.Errorf("timer of %v fired after %v", f.d, waited)
		}
	}
}

// testTimerCancel: a timer cancelled in the Receive that armed it, or in a
// later one before it is due, is never delivered; others still are.
func testTimerCancel(t *testing.T, rt Runtime) {
	const later = 200 * time.Millisecond
	j := &journal{mu: rt.Locker()}
	a := addr(1)
	var pending actors.TimerID
	var armedAt time.Duration
	rt.Spawn(a, once(funcActor(func(ctx actors.Context, msg actors.Message) {
		switch m := msg.(type) {
		case goMsg:
			now := ctx.Now()
			ctx.Cancel(ctx.After(0, fire{tag: "cancelled-at-once"}))
			ctx.Cancel(ctx.After(30*time.Millisecond, fire{tag: "cancelled-same-receive"}))
			pending, armedAt = ctx.After(later, fire{tag: "cancelled-later"}), now
			ctx.Send(ctx.Self(), cancelNow{})
			ctx.After(later+100*time.Millisecond, fire{tag: "sentinel"})
		case cancelNow:
			j.add(event{kind: "cancelled", at: ctx.Now() - armedAt})
			ctx.Cancel(pending)
		case fire:
			j.add(event{kind: m.tag, at: ctx.Now()})
		}
	})), nil)
	rt.Inject(a, goMsg{})
	await(t, rt, "the sentinel timer", j.has("sentinel"))
	for _, tag := range []string{"cancelled-at-once", "cancelled-same-receive"} {
		if j.count(tag) > 0 {
			t.Errorf("timer %q was delivered after Cancel", tag)
		}
	}
	c := j.all("cancelled")
	switch {
	case len(c) != 1:
		t.Fatalf("the cancelling message was handled %d times", len(c))
	case c[0].at >= later:
		// The machine was too slow for the check to mean anything.
		t.Logf("cancel ran %v after arming, not before the timer was due (%v): not checked", c[0].at, later)
	case j.count("cancelled-later") > 0:
		t.Errorf("timer cancelled %v after arming, %v before it was due, was delivered", c[0].at, later-c[0].at)
	}
}

// testStaleCancel: cancelling a timer that fired, twice, an unknown ID, the
// zero ID or another actor's timer does nothing, and timers keep working.
func testStaleCancel(t *testing.T, rt Runtime) {
	j := &journal{mu: rt.Locker()}
	a, b := addr(1), addr(2)
	var first actors.TimerID
	rt.Spawn(a, once(funcActor(func(ctx actors.Context, msg actors.Message) {
		switch m := msg.(type) {
		case goMsg:
			first = ctx.After(time.Millisecond, fire{tag: "first"})
		case fire:
			j.add(event{kind: m.tag})
			if m.tag == "first" {
				ctx.Cancel(first)
				ctx.Cancel(first)
				ctx.Cancel(0)
				ctx.Cancel(actors.TimerID(1 << 60))
				ctx.After(time.Millisecond, fire{tag: "second"})
				// Ask b to cancel a's timer with b's own Cancel.
				ctx.Send(b, cancelThis{id: ctx.After(50*time.Millisecond, fire{tag: "mine"})})
			}
		}
	})), nil)
	rt.Spawn(b, once(funcActor(func(ctx actors.Context, msg actors.Message) {
		switch m := msg.(type) {
		case cancelThis:
			ctx.After(20*time.Millisecond, fire{tag: "b"})
			ctx.Cancel(m.id) // not b's: must not touch a's timer, nor b's own
		case fire:
			j.add(event{kind: "b-fired"})
		}
	})), nil)
	rt.Inject(a, goMsg{})
	await(t, rt, "the timers after the stale cancellations", func() bool {
		return j.count("second") == 1 && j.count("mine") == 1 && j.count("b-fired") == 1
	})
	if n := j.count("first"); n != 1 {
		t.Errorf("first timer delivered %d times", n)
	}
}

// execActor runs jobs on run and records their JobDone with the time taken.
func execActor(j *journal) funcActor {
	started := map[uint64]time.Duration{}
	return func(ctx actors.Context, msg actors.Message) {
		switch m := msg.(type) {
		case run:
			started[m.job.ID] = ctx.Now()
			ctx.Exec(m.job)
		case actors.JobDone:
			j.add(event{kind: "done", at: ctx.Now() - started[m.ID], v: m})
		case arm:
			ctx.After(m.d, fire{tag: m.tag})
		case fire:
			j.add(event{kind: m.tag})
		}
	}
}

func slowOrHang(inputs []string) (time.Duration, bool) {
	for _, in := range inputs {
		if strings.HasPrefix(in, "hang") {
			return 0, true
		}
		if strings.HasPrefix(in, "slow") {
			return 200 * time.Millisecond, false
		}
	}
	return 10 * time.Millisecond, false
}

func doneFor(j *journal, id uint64) []actors.JobDone {
	var out []actors.JobDone
	for _, e := range j.all("done") {
		if d := e.v.(actors.JobDone); d.ID == id {
			out = append(out, d)
		}
	}
	return out
}

// testExec: a job's completion comes back as one JobDone with the job's ID
// and the executor's outputs, not before the job's time.
func testExec(t *testing.T, rt Runtime) {
	j := &journal{mu: rt.Locker()}
	a := addr(1)
	rt.Spawn(a, once(execActor(j)), slowOrHang)
	jobs := []actors.Job{
		{ID: 7, Model: "m", Version: "v1", Inputs: []string{"a", "b", "c"}},
		{ID: 8, Model: "m", Version: "v2", Inputs: []string{"only"}},
	}
	for _, job := range jobs {
		rt.Inject(a, run{job: job})
		await(t, rt, fmt.Sprintf("JobDone %d", job.ID), func() bool { return len(doneFor(j, job.ID)) > 0 })
	}
	for _, job := range jobs {
		got := doneFor(j, job.ID)
		if len(got) != 1 {
			t.Fatalf("job %d: %d JobDone", job.ID, len(got))
		}
		d := got[0]
		if d.Err != "" || d.Fault || d.ItemErrs != nil {
			t.Errorf("job %d failed: %+v", job.ID, d)
		}
		if want := Outputs(job.Model, job.Version, job.Inputs); !slices.Equal(d.Outputs, want) {
			t.Errorf("job %d: outputs %q, want %q", job.ID, d.Outputs, want)
		}
	}
	for _, e := range j.all("done") {
		if e.at < 10*time.Millisecond {
			t.Errorf("job %d done %v after Exec, before its 10ms", e.v.(actors.JobDone).ID, e.at)
		}
	}
}

// testExecHang: while a job hangs the actor still gets its messages, and a
// job started after the actor gave up on the hung one (as a Device does
// after its watchdog) completes; the hung job is never reported.
func testExecHang(t *testing.T, rt Runtime) {
	j := &journal{mu: rt.Locker()}
	a := addr(1)
	rt.Spawn(a, once(execActor(j)), slowOrHang)
	rt.Inject(a, run{job: actors.Job{ID: 1, Model: "m", Version: "v", Inputs: []string{"hang"}}})
	rt.Inject(a, arm{tag: "tick", d: 20 * time.Millisecond})
	await(t, rt, "a timer while the job hangs", j.has("tick"))
	rt.Inject(a, run{job: actors.Job{ID: 2, Model: "m", Version: "v", Inputs: []string{"x", "y"}}})
	await(t, rt, "the job after the hung one", func() bool { return len(doneFor(j, 2)) > 0 })
	if d := doneFor(j, 2)[0]; !slices.Equal(d.Outputs, Outputs("m", "v", []string{"x", "y"})) || d.Fault || d.Err != "" {
		t.Errorf("job after the hang: %+v", d)
	}
	if d := doneFor(j, 1); len(d) > 0 {
		t.Errorf("the hung job was reported: %+v", d)
	}
}

// testNow: the clock each actor reads never goes back, across messages,
// timers and job completions.
func testNow(t *testing.T, rt Runtime) {
	j := &journal{mu: rt.Locker()}
	a := addr(1)
	var last time.Duration
	var seen atomic.Int64
	rt.Spawn(a, once(funcActor(func(ctx actors.Context, msg actors.Message) {
		now := ctx.Now()
		if now < last {
			j.fail("Now went back from %v to %v on %T", last, now, msg)
		}
		last = now
		seen.Add(1)
		if _, ok := msg.(goMsg); ok {
			for i := 0; i < 20; i++ {
				ctx.After(time.Duration(ctx.Rand().IntN(10))*time.Millisecond, ping{})
				ctx.Send(ctx.Self(), ping{})
			}
			ctx.Exec(actors.Job{ID: 1, Model: "m", Version: "v", Inputs: []string{"x"}})
		}
	})), slowOrHang)
	rt.Inject(a, goMsg{})
	// Start, go, 20 sends, 20 timers and one JobDone.
	await(t, rt, "every message", func() bool { return seen.Load() == 43 })
	j.check(t)
}

// testRestart: a panicking actor is restarted with a fresh value that gets
// Start again and serves messages, and it sees nothing of its last
// incarnation: no timer armed by it, no result of a job it started (even
// one whose ID the new incarnation reuses, as a fresh Device does).
func testRestart(t *testing.T, rt Runtime) {
	if !rt.Supervised() {
		t.Skip("this runtime has no supervision: a panic in an actor propagates out of the runtime, by design")
	}
	j := &journal{mu: rt.Locker()}
	a := addr(1)
	var incarnations atomic.Int32
	newActor := func() actors.Actor {
		inc := int(incarnations.Add(1))
		return funcActor(func(ctx actors.Context, msg actors.Message) {
			switch m := msg.(type) {
			case actors.Start:
				j.add(event{kind: "start", inc: inc})
				if inc == 1 {
					ctx.After(100*time.Millisecond, fire{tag: "stale-timer"})
					ctx.Exec(actors.Job{ID: 1, Model: "m", Version: "v", Inputs: []string{"slow-old"}})
				} else {
					ctx.Exec(actors.Job{ID: 1, Model: "m", Version: "v", Inputs: []string{"new"}})
					ctx.After(300*time.Millisecond, fire{tag: "sentinel"})
				}
			case boom:
				panic("actorstest: boom")
			case ping:
				j.add(event{kind: "ping", inc: inc})
			case fire:
				j.add(event{kind: m.tag, inc: inc})
			case actors.JobDone:
				j.add(event{kind: "done", inc: inc, v: m})
			}
		})
	}
	rt.Spawn(a, newActor, slowOrHang)
	await(t, rt, "the first Start", j.has("start"))
	rt.Inject(a, boom{})
	rt.Inject(a, ping{})
	await(t, rt, "the restart", func() bool { return j.count("start") == 2 })
	await(t, rt, "a message served after the restart", j.has("ping"))
	await(t, rt, "the new incarnation's sentinel timer", j.has("sentinel"))
	for _, e := range j.all("start") {
		if e.inc < 1 || e.inc > 2 {
			t.Errorf("Start delivered to incarnation %d", e.inc)
		}
	}
	if p := j.all("ping"); p[0].inc != 2 {
		t.Errorf("ping after the panic served by incarnation %d", p[0].inc)
	}
	if n := j.count("stale-timer"); n > 0 {
		t.Errorf("a timer of the first incarnation fired %d times after the restart", n)
	}
	done := j.all("done")
	if len(done) != 1 {
		t.Fatalf("%d JobDone after the restart, want 1 (the new incarnation's)", len(done))
	}
	if d := done[0].v.(actors.JobDone); done[0].inc != 2 || !slices.Equal(d.Outputs, Outputs("m", "v", []string{"new"})) {
		t.Errorf("JobDone %+v to incarnation %d, want the new job's outputs", d, done[0].inc)
	}
}
