package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// ErrWithdrawn is the error an Observer sees for an item the runner
// withdrew from the engine before its answer (its job was cancelled, or
// the runner stopped past its bound). It wraps context.Canceled.
var ErrWithdrawn = fmt.Errorf("jobs: item withdrawn from the engine: %w", context.Canceled)

// Runner feeds a Store's queued items to the engine and writes their
// results; see the package doc. Make it with NewRunner, then Start; Stop
// it before closing the store. Submit, Get, Items and Cancel are the API
// the HTTP adapter uses; they are safe for concurrent use.
type Runner struct {
	s   *Store
	eng engine.FrontDoor
	cfg Config
	log *slog.Logger

	// wake is signalled (never blocking) when a job arrives or is
	// cancelled.
	wake chan struct{}
	// results carries the engine's answers to the loop. Its capacity is
	// WindowTotal and at most WindowTotal runs are in flight, each
	// answered at most once, so the engine's callback never blocks on it.
	results chan result
	stopCh  chan struct{}
	done    chan struct{}
	// cancelAll tells the loop to withdraw every run in flight (Stop past
	// its ctx).
	cancelAll context.CancelFunc

	stats runnerStats
	// observer, when set, is told of every engine call (see Observe).
	observer atomic.Pointer[Observer]

	mu        sync.Mutex
	incoming  []Job
	cancelled []string
	started   bool
	stopOnce  sync.Once
}

// Observer is told of one engine call the runner made: req and rep or err
// what Submit took and answered (ErrWithdrawn for a run the runner
// withdrew: its job was cancelled, or the runner stopped), elapsed the
// call's time on the engine clock. It runs on the runner's loop before the
// result is handled, so it must be quick.
type Observer func(req actors.Request, rep actors.Reply, err error, elapsed time.Duration)

// Observe makes f the runner's observer (nil: none), for the engine calls
// that end from now on; safe for concurrent use. The HTTP adapter counts
// the job items in its request metrics with it.
func (r *Runner) Observe(f Observer) {
	if f == nil {
		r.observer.Store(nil)
		return
	}
	r.observer.Store(&f)
}

// Stats are the runner's counters since it started, for /metrics.
type Stats struct {
	// Items written in a terminal state, by state.
	Completed, Failed, Cancelled, Expired uint64
	// Retries counts runs refused for load (or past the SLO) and queued
	// to run again.
	Retries uint64
	// Held is the items in the engine or waiting to retry now; Jobs the
	// unfinished jobs the runner tracks.
	Held, Jobs int64
}

type runnerStats struct {
	completed, failed, cancelled, expired, retries atomic.Uint64
	held, jobs                                     atomic.Int64
}

// Stats returns the runner's counters; safe for concurrent use.
func (r *Runner) Stats() Stats {
	s := &r.stats
	return Stats{
		Completed: s.completed.Load(), Failed: s.failed.Load(), Cancelled: s.cancelled.Load(),
		Expired: s.expired.Load(), Retries: s.retries.Load(), Held: s.held.Load(), Jobs: s.jobs.Load(),
	}
}

// result is one run's end: the engine's answer, or the runner's own
// withdrawal (ErrWithdrawn).
type result struct {
	id      string
	index   uint32
	rep     actors.Reply
	err     error
	elapsed time.Duration // on the engine clock
}

// NewRunner makes a runner over s that submits to eng. log may be nil.
func NewRunner(s *Store, eng engine.FrontDoor, log *slog.Logger) *Runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{
		s:       s,
		eng:     eng,
		cfg:     s.cfg,
		log:     log,
		wake:    make(chan struct{}, 1),
		results: make(chan result, s.cfg.WindowTotal),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// Start loads the unfinished jobs and starts the loop goroutine, which
// Stop stops. The items in flight take no goroutine: the loop hands them
// to the engine with Submit, and the answers come back on a channel.
func (r *Runner) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("jobs: runner started twice")
	}
	act, err := r.s.active()
	if err != nil {
		return err
	}
	if _, err := r.s.Sweep(); err != nil {
		return err
	}
	r.started = true
	ctx, cancel := context.WithCancel(context.Background())
	r.cancelAll = cancel
	go r.loop(ctx, act)
	return nil
}

// stopCutoffMax bounds Stop's wait after it told the loop to withdraw the
// runs in flight: the loop withdraws them at once (Cancel) and the engine
// answers the ones it could not withdraw promptly, so this only guards
// against an engine that does neither.
const stopCutoffMax = 5 * time.Second

// Stop stops feeding, waits until the items in flight are answered and
// written or ctx ends, then withdraws the rest (they stay queued, with no
// attempt counted) and waits for the loop to write them. Idempotent.
func (r *Runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil
	}
	r.stopOnce.Do(func() { close(r.stopCh) })
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
	}
	r.cancelAll()
	t := time.NewTimer(stopCutoffMax)
	defer t.Stop()
	select {
	case <-r.done:
		return nil
	case <-t.C:
		return fmt.Errorf("jobs: stop: runs still in the engine after cancel: %w", ctx.Err())
	}
}

// Submit stores a job (synced before it returns) and wakes the loop; see
// Store.Submit.
func (r *Runner) Submit(sp Spec) (Job, bool, error) {
	j, created, err := r.s.Submit(sp)
	if err != nil || !created {
		return j, created, err
	}
	r.mu.Lock()
	r.incoming = append(r.incoming, j)
	r.mu.Unlock()
	r.signal()
	return j, true, nil
}

// Get returns tenant's job; see Store.Get.
func (r *Runner) Get(tenant, id string) (Job, error) { return r.s.Get(tenant, id) }

// Items returns tenant's job and a page of its items; see Store.Items.
func (r *Runner) Items(tenant, id string, offset, limit int) (Job, []Item, error) {
	return r.s.Items(tenant, id, offset, limit)
}

// Cancel cancels tenant's job: its queued items at once (in the store),
// its items in flight by withdrawing them from the engine (they end
// cancelled, or completed if their reply came first). Idempotent.
func (r *Runner) Cancel(tenant, id string) (Job, error) {
	j, err := r.s.cancel(tenant, id)
	if err != nil {
		return j, err
	}
	r.mu.Lock()
	r.cancelled = append(r.cancelled, id)
	r.mu.Unlock()
	r.signal()
	return j, nil
}

func (r *Runner) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// jobRun is the loop's state of one unfinished job.
type jobRun struct {
	job Job
	// cursor is the next item index to look at for queued items;
	// exhausted, that there are none past it.
	cursor    uint32
	exhausted bool
	inflight  map[uint32]flight
	retries   []retry
	// refusals counts each item's retries in this process.
	refusals  map[uint32]int
	cancelled bool
}

// flight is an item in the engine: the id Submit gave it, the request,
// and when it was submitted (engine clock).
type flight struct {
	id    uint64
	req   actors.Request
	start time.Duration
}

// retry is an item refused for load, due to run again at due.
type retry struct {
	index uint32
	due   time.Time
}

// window is the items of the job held against the windows.
func (j *jobRun) window() int { return len(j.inflight) + len(j.retries) }

// loopState is the loop's: every unfinished job, in submission order.
type loopState struct {
	runs  map[string]*jobRun
	order []string
	// next is where the round robin starts its next pass.
	next int
	// held is the items in flight or waiting to retry, over all jobs.
	held     int
	pending  []outcome
	flushAt  time.Time
	stopping bool
	// failing delays the next step after a failed one.
	failing time.Time
}

func (st *loopState) add(j Job) {
	if st.runs[j.ID] != nil {
		return
	}
	st.runs[j.ID] = &jobRun{job: j, inflight: map[uint32]flight{}, refusals: map[uint32]int{}}
	st.order = append(st.order, j.ID)
}

// stepFailBackoff is the wait after a failed step (a full disk, say)
// before the next try; nothing new is claimed meanwhile, so what waits is
// bounded by the window.
const stepFailBackoff = 100 * time.Millisecond

func (r *Runner) loop(ctx context.Context, act []Job) {
	defer close(r.done)
	st := &loopState{runs: map[string]*jobRun{}}
	for _, j := range act {
		st.add(j)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sweep := time.NewTicker(r.cfg.SweepEvery)
	defer sweep.Stop()
	// stopCh and cutoff are nil once seen: a closed channel in the select
	// would make it spin while the last runs finish.
	stopCh, cutoff := r.stopCh, ctx.Done()
	for {
		r.intake(st)
		now := time.Now()
		wants := r.wants(st, now)
		if st.stopping && ctx.Err() != nil && !st.failing.IsZero() {
			// Stop gave up waiting and the store cannot be written: what
			// is pending stays running in the file, and Open counts it.
			r.log.Error("jobs: stopping with results unwritten", "pending", len(st.pending))
			r.withdrawAll(st)
			return
		}
		if now.After(st.failing) && (len(st.pending) >= r.cfg.FlushItems ||
			(len(st.pending) > 0 && !now.Before(st.flushAt)) ||
			(len(st.pending) == 0 && len(wants) > 0) || (st.stopping && len(st.pending) > 0)) {
			r.step(st, wants, now)
			continue
		}
		if st.stopping && st.held == 0 && len(st.pending) == 0 {
			return
		}
		timer.Reset(r.nextWake(st, now))
		select {
		case res := <-r.results:
			r.received(st, res)
		case <-r.wake:
		case <-timer.C:
		case <-sweep.C:
			if n, err := r.s.Sweep(); err != nil {
				r.log.Error("jobs: retention sweep", "err", err)
			} else if n > 0 {
				r.log.Debug("jobs: retention sweep", "dropped", n)
			}
		case <-stopCh:
			stopCh = nil
			st.stopping = true
			r.dropRetries(st)
		case <-cutoff:
			// Stop waited past its ctx: what is still in the engine is
			// withdrawn, and stays queued for the next start.
			cutoff = nil
			if !st.stopping {
				stopCh = nil
				st.stopping = true
				r.dropRetries(st)
			}
			r.withdrawAll(st)
		}
		// Take whatever else finished, so one step writes it all.
		for more := true; more; {
			select {
			case res := <-r.results:
				r.received(st, res)
			default:
				more = false
			}
		}
	}
}

// nextWake is how long the loop may wait: until the pending results are
// due to be written, the next retry is due, or a failed step may be tried
// again.
func (r *Runner) nextWake(st *loopState, now time.Time) time.Duration {
	next := now.Add(time.Hour)
	if len(st.pending) > 0 && st.flushAt.Before(next) {
		next = st.flushAt
	}
	if !st.stopping {
		for _, run := range st.runs {
			for _, rt := range run.retries {
				if rt.due.Before(next) {
					next = rt.due
				}
			}
		}
	}
	if st.failing.After(now) && st.failing.Before(next) {
		next = st.failing
	}
	return max(next.Sub(now), 0)
}

// intake takes the jobs submitted and cancelled since the last pass.
func (r *Runner) intake(st *loopState) {
	r.mu.Lock()
	in, cs := r.incoming, r.cancelled
	r.incoming, r.cancelled = nil, nil
	r.mu.Unlock()
	for _, j := range in {
		st.add(j)
	}
	for _, id := range cs {
		run := st.runs[id]
		if run == nil {
			continue
		}
		run.cancelled = true
		st.held -= len(run.retries)
		run.retries = nil
		r.withdraw(st, id, run)
	}
}

// withdraw takes run's items in flight back from the engine. One the
// engine gives back ends now, with ErrWithdrawn; one it has answered
// already ends when its answer is received.
func (r *Runner) withdraw(st *loopState, id string, run *jobRun) {
	var back []result
	for index, fl := range run.inflight {
		if r.eng.Cancel(fl.id) {
			back = append(back, result{id: id, index: index, err: ErrWithdrawn, elapsed: r.eng.Now() - fl.start})
		}
	}
	for _, res := range back {
		r.received(st, res)
	}
}

// withdrawAll withdraws every job's items in flight.
func (r *Runner) withdrawAll(st *loopState) {
	for _, id := range st.order {
		if run := st.runs[id]; run != nil {
			r.withdraw(st, id, run)
		}
	}
}

// dropRetries forgets the items waiting to retry (they are queued in the
// store, and the next process runs them).
func (r *Runner) dropRetries(st *loopState) {
	for _, run := range st.runs {
		st.held -= len(run.retries)
		run.retries = nil
	}
}

// wants decides what the next step claims: round robin over the jobs;
// every due retry (it already holds its place in the windows), then new
// items up to the job's window, all within the total window.
func (r *Runner) wants(st *loopState, now time.Time) []want {
	if st.stopping || len(st.order) == 0 {
		return nil
	}
	room := max(r.cfg.WindowTotal-st.held, 0)
	var out []want
	n := len(st.order)
	for i := range n {
		id := st.order[(st.next+i)%n]
		run := st.runs[id]
		if run.cancelled {
			continue
		}
		w := want{id: id, from: run.cursor}
		for _, rt := range run.retries {
			if !rt.due.After(now) {
				w.retry = append(w.retry, rt.index)
			}
		}
		if !run.exhausted {
			w.n = max(min(r.cfg.WindowJob-run.window(), room), 0)
			room -= w.n
		}
		if len(w.retry) == 0 && w.n == 0 {
			continue
		}
		out = append(out, w)
	}
	st.next++
	return out
}

// step writes the pending results and takes the wanted claims in one
// transaction, then starts the claimed runs.
func (r *Runner) step(st *loopState, wants []want, now time.Time) {
	res, err := r.s.step(st.pending, wants)
	if err != nil {
		r.log.Error("jobs: writing results failed; retrying", "pending", len(st.pending), "err", err)
		st.failing = now.Add(stepFailBackoff)
		return
	}
	for _, o := range st.pending {
		switch o.next {
		case Completed:
			r.stats.completed.Add(1)
		case Failed:
			r.stats.failed.Add(1)
		case Cancelled:
			r.stats.cancelled.Add(1)
		case Expired:
			r.stats.expired.Add(1)
		}
	}
	st.pending = st.pending[:0]
	st.failing = time.Time{}
	if res.stale > 0 {
		r.log.Warn("jobs: results for items no longer running dropped", "count", res.stale)
	}
	for _, w := range wants {
		run := st.runs[w.id]
		if run == nil {
			continue
		}
		if len(w.retry) > 0 {
			taken := map[uint32]bool{}
			for _, idx := range w.retry {
				taken[idx] = true
			}
			kept := run.retries[:0]
			for _, rt := range run.retries {
				if !taken[rt.index] {
					kept = append(kept, rt)
				}
			}
			st.held -= len(run.retries) - len(kept)
			run.retries = kept
		}
		if c, ok := res.cursor[w.id]; ok {
			run.cursor, run.exhausted = c, res.exhausted[w.id]
		}
	}
	for _, c := range res.claims {
		r.submit(st, c)
	}
	for _, id := range res.closed {
		if run := st.runs[id]; run != nil {
			run.cancelled = true
			st.held -= len(run.retries)
			run.retries = nil
		}
	}
	r.prune(st)
	r.stats.held.Store(int64(st.held))
	r.stats.jobs.Store(int64(len(st.order)))
}

// prune forgets the jobs with nothing left to do here.
func (r *Runner) prune(st *loopState) {
	kept := st.order[:0]
	for _, id := range st.order {
		run := st.runs[id]
		idle := len(run.inflight) == 0 && len(run.retries) == 0
		if idle && (run.cancelled || run.exhausted) {
			delete(st.runs, id)
			continue
		}
		kept = append(kept, id)
	}
	clear(st.order[len(kept):])
	st.order = kept
}

// submit hands one claimed item to the engine. Its answer comes back on
// r.results, from the engine's callback (which may run before Submit
// returns: the loop reads it only after this).
func (r *Runner) submit(st *loopState, c claim) {
	run := st.runs[c.id]
	if run == nil || st.held >= r.cfg.WindowTotal {
		// The window is checked before claiming: a bug.
		panic(fmt.Sprintf("jobs: claim of %s/%d beyond the window (held %d)", c.id, c.index, st.held))
	}
	j := run.job
	req := actors.Request{
		Tenant: j.Tenant, Model: j.Model, Version: j.Version, Params: j.Params,
		Priority: j.Priority, Input: c.input,
	}
	if !j.Deadline.IsZero() {
		left := j.Deadline.Sub(r.s.now())
		req.Deadline = r.eng.Now() + max(left, time.Millisecond)
	}
	st.held++
	start := r.eng.Now()
	id := r.eng.Submit(req, func(rep actors.Reply, err error) {
		// Never blocks: see results.
		r.results <- result{id: c.id, index: c.index, rep: rep, err: err, elapsed: r.eng.Now() - start}
	})
	run.inflight[c.index] = flight{id: id, req: req, start: start}
}

// received turns a finished run into a pending outcome (or a retry).
func (r *Runner) received(st *loopState, res result) {
	run := st.runs[res.id]
	if run == nil {
		panic(fmt.Sprintf("jobs: result for %s/%d, not in flight", res.id, res.index))
	}
	fl, ok := run.inflight[res.index]
	if !ok {
		panic(fmt.Sprintf("jobs: result for %s/%d, not in flight", res.id, res.index))
	}
	delete(run.inflight, res.index)
	if f := r.observer.Load(); f != nil {
		(*f)(fl.req, res.rep, res.err, res.elapsed)
	}
	st.held--
	o, retryAfter, again := r.classify(st, run, res)
	if again {
		n := run.refusals[res.index] + 1
		run.refusals[res.index] = n
		if n > r.cfg.RetryMax {
			o.next = Failed
			o.err.Message = fmt.Sprintf("gave up after %d retries: %s", n-1, o.err.Message)
		} else if !st.stopping && !run.cancelled {
			run.retries = append(run.retries, retry{index: res.index, due: time.Now().Add(r.backoff(n, retryAfter))})
			st.held++
			r.stats.retries.Add(1)
		}
	}
	if o.next.Terminal() {
		delete(run.refusals, res.index)
	}
	if len(st.pending) == 0 {
		st.flushAt = time.Now().Add(r.cfg.FlushEvery)
	}
	st.pending = append(st.pending, o)
}

// backoff is the wait before the n-th retry: the engine's hint when it
// gave one, else doubling from RetryBackoffMin, within the bounds.
func (r *Runner) backoff(n int, hint time.Duration) time.Duration {
	d := hint
	if d <= 0 {
		d = r.cfg.RetryBackoffMin << min(n-1, 20)
	}
	return min(max(d, r.cfg.RetryBackoffMin), r.cfg.RetryBackoffMax)
}

// classify maps a run's end to the item's next state. again reports a
// refusal worth retrying (the outcome is then Queued, with the error kept
// for when the retries run out).
func (r *Runner) classify(st *loopState, run *jobRun, res result) (o outcome, retryAfter time.Duration, again bool) {
	o = outcome{id: res.id, index: res.index}
	rep := res.rep
	if res.err != nil {
		switch {
		case run.cancelled:
			o.next, o.err = Cancelled, &ItemError{Code: "cancelled", Message: "the job was cancelled", HTTPStatus: 499}
		case st.stopping:
			o.next = Queued // withdrawn by the stop: runs again next time
		default:
			// The engine's own refusals (in-flight bound, closed): load.
			o.next = Queued
			o.err = &ItemError{Code: "overloaded", Message: res.err.Error(), HTTPStatus: 503}
			return o, 0, true
		}
		return o, 0, false
	}
	o.countAttempt = rep.Outcome != actors.Rejected
	o.version = rep.Version
	if rep.Done > 0 {
		o.latency = rep.Done - rep.Arrival
	}
	if rep.Dispatch > 0 {
		o.queue = rep.Dispatch - rep.Arrival
		if rep.Done > 0 {
			o.compute = rep.Done - rep.Dispatch
		}
	}
	o.batchSize = rep.BatchSize
	msg := rep.Err
	if msg == "" {
		msg = rep.Outcome.String()
		if rep.Reason != actors.ReasonNone {
			msg += ": " + rep.Reason.String()
		}
	}
	code := rep.Reason.String()
	switch rep.Outcome {
	case actors.Completed:
		o.next, o.output = Completed, rep.Output
		return o, 0, false
	case actors.Failed:
		if rep.Reason == actors.ReasonNone {
			code = "backend"
		}
		o.next, o.err = Failed, &ItemError{Code: code, Message: msg, HTTPStatus: 500}
		return o, 0, false
	case actors.Cancelled:
		if run.cancelled {
			o.next, o.err = Cancelled, &ItemError{Code: "cancelled", Message: "the job was cancelled", HTTPStatus: 499}
			return o, 0, false
		}
		// Withdrawn by the service (a stop): run it again.
		o.next, o.countAttempt = Queued, false
		o.err = &ItemError{Code: "cancelled", Message: msg, HTTPStatus: 503}
		return o, 0, !st.stopping
	case actors.Expired:
		if d := run.job.Deadline; !d.IsZero() && !r.s.now().Before(d) {
			o.next, o.err = Expired, &ItemError{Code: "deadline", Message: msg, HTTPStatus: 504}
			return o, 0, false
		}
		// Missed the batcher's SLO under load: a job is patient.
		o.next, o.err = Queued, &ItemError{Code: "deadline", Message: msg, HTTPStatus: 504}
		return o, 0, true
	}
	switch rep.Reason {
	case actors.ReasonInvalid:
		o.next, o.err = Failed, &ItemError{Code: code, Message: msg, HTTPStatus: 400}
		return o, 0, false
	case actors.ReasonUnknownModel:
		o.next, o.err = Failed, &ItemError{Code: code, Message: msg, HTTPStatus: 404}
		return o, 0, false
	case actors.ReasonRateLimited, actors.ReasonQuota:
		o.next, o.err = Queued, &ItemError{Code: code, Message: msg, HTTPStatus: 429}
		return o, rep.RetryAfter, true
	}
	o.next, o.err = Queued, &ItemError{Code: code, Message: msg, HTTPStatus: 503}
	return o, rep.RetryAfter, true
}
