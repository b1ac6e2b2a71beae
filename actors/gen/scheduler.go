package gen

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
)

// Scheduler serves one generation model version on a group of devices
// by continuous batching: each device runs one step at a time, and each
// step decodes one token for every sequence running there, plus prefill
// chunks of admitted sequences within the per-step token budget (chunked
// prefill: a long prompt is fed a budget's worth at a time, so it never
// stalls the running sequences' next token).
//
// The KV cache is the admission resource. Each device has BlocksPerDevice
// blocks of BlockTokens tokens; a sequence is admitted to a device only
// when the blocks for its whole context to prefill fit there (leaving
// AdmitHeadroomBlocks free), grows a block when its next decode crosses a
// block edge, and frees every block the step it finishes, or at once when
// it is cancelled or expires (no step of that device runs meanwhile).
//
// When a decode needs a block and none is free, the device preempts by
// recompute: the victim, among its sequences, is the lowest effective
// priority, then the newest admitted. Newest first because it has the
// least work to lose and leaves the oldest to finish (FCFS within a
// level); lowest priority first because that is what priority means. The
// victim's blocks are freed and it goes back to the queue with the tokens
// it already sent, which it prefills again as context. Preemptions are
// bounded: a sequence preempted PreemptMax times comes back with blocks
// reserved for its whole length and is never a victim again.
//
// Admission order is the batcher's: highest effective priority (a queued
// sequence rises a level per PriorityAging waited), then the tenant with
// the least weighted service (tokens fed, divided by weight), then the
// earliest TTFT deadline, then the oldest. Tenants have rate limits and
// in-flight quotas as in the batcher (TenantConfig). A request whose
// first token cannot come by its TTFT deadline any more, even if it were
// admitted at once, is failed early (Expired); one past its total
// deadline too.
//
// The step's prefill budget, after the decodes, goes by effective
// priority, then the earliest TTFT deadline (prefillOrder): among the
// sequences prefilling on the device and the one being admitted, so a
// short prompt due soon goes ahead of a long one due later. Priorities
// and tenant weights decide who is admitted (and so whose service is
// charged); deadlines decide, within a level, whose prefill runs first.
// A queued sequence is admitted to a device only if the cost model
// predicts its first token there by its deadline, behind the prefills
// due before it, without making one of those it goes ahead of late
// (lateIfAdmitted); otherwise it stays queued for another device, or
// fails early at its latest start, and the next in order is tried.
//
// A device whose step faults (or hangs past its watchdog) loses its KV
// cache: its sequences go back to the queue and are recomputed on a device
// from their prompt and the tokens already sent, so the client's stream
// goes on with no token repeated or skipped; after AttemptMax crashes
// under it, a stream ends Failed (attempts). The device restarts after a
// backoff.
//
// The scheduler is driven through a StepContext (Scheduler.Receive);
// a runtime hosts it with an adapter that runs its steps.
type Scheduler struct {
	cfg  Config
	devs []genDevice
	// seqs holds every request in flight, by ID (lookups only).
	seqs map[uint64]*genSeq
	// waiting are the sequences queued for admission, in arrival order.
	waiting []*genSeq
	// queued counts the new requests among waiting (WaitingMax bounds it;
	// sequences back from a preemption or a crash always find a place).
	queued  int
	tenants *actors.TenantTable
	// vtime is the weighted service of the last tenant admitted from a
	// backlog: newcomers start there.
	vtime    float64
	admitSeq uint64
	stepSeq  uint64
	timerGen uint64
	// next is the device kick tries first (rotates, so admissions spread).
	next  int
	stats Stats
}

// Stats are a Scheduler's counters.
type Stats struct {
	Steps, Preemptions, Crashes, Tokens, Prefilled int64
}

type genDevice struct {
	up   bool
	free int
	// running are the sequences admitted here (bounded by SeqsMax).
	running []*genSeq
	// step is the step in flight (0: none); slots its sequences (nil
	// where one ended meanwhile), fed the tokens each fed, sample whether
	// each asked for a token.
	step     uint64
	slots    []*genSeq
	fed      []int
	sample   []bool
	watchdog actors.TimerID
	failures int
	gen      uint64
	// drop lists sequences the device may forget, for the next step.
	drop []uint64
}

type genSeq struct {
	req    Request
	tenant *actors.Tenant
	// sent are the tokens sent to the client: the prefix to recompute.
	sent    []byte
	firstAt time.Duration
	// dev is the device the sequence is admitted to; -1 while queued.
	dev    int
	blocks int
	// kv is the context tokens whose KV its device holds.
	kv int
	// reserved: admitted with blocks for its whole length (PreemptMax).
	reserved bool
	admit    uint64
	preempts int
	// preemptStep is the step being built when it was last preempted: it
	// is not admitted back into that step.
	preemptStep uint64
	attempts    int
	fresh       bool // a new request, counted by queued
	timer       actors.TimerID
	timerGen    uint64
	latestStart time.Duration
}

// context is the sequence's known context: the prompt, then the tokens
// sent.
func (s *genSeq) context() int { return len(s.req.Prompt) + len(s.sent) }

// input is the context token at i.
func (s *genSeq) input(i int) byte {
	if i < len(s.req.Prompt) {
		return s.req.Prompt[i]
	}
	return s.sent[i-len(s.req.Prompt)]
}

// remaining is the context the device has not fed yet: 1 for a decode.
func (s *genSeq) remaining() int { return s.context() - s.kv }

type genSeqTimer struct {
	id  uint64
	gen uint64
}
type genWatchdog struct {
	dev  int
	step uint64
}
type genRestart struct {
	dev int
	gen uint64
}

// NewScheduler returns a scheduler whose devices are all up and empty.
func NewScheduler(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Scheduler{cfg: cfg, devs: make([]genDevice, cfg.Devices), seqs: map[uint64]*genSeq{},
		tenants: actors.NewTenantTable(cfg.TenantsMax, cfg.DefaultTenant, cfg.Tenants)}
	for d := range g.devs {
		g.devs[d] = genDevice{up: true, free: cfg.BlocksPerDevice}
	}
	return g, nil
}

// Receive handles one message.
func (g *Scheduler) Receive(ctx StepContext, msg actors.Message) {
	switch m := msg.(type) {
	case Submit:
		g.submit(ctx, m.Req)
	case Cancel:
		if s := g.seqs[m.ID]; s != nil {
			g.end(ctx, s, actors.Cancelled, actors.ReasonCancelled, "cancelled by the client")
		}
	case StepDone:
		g.stepDone(ctx, m)
	case genSeqTimer:
		if s := g.seqs[m.id]; s != nil && s.timerGen == m.gen {
			s.timer = 0
			g.checkDeadline(ctx, s)
		}
	case genWatchdog:
		if dv := &g.devs[m.dev]; dv.step == m.step && dv.up {
			dv.watchdog = 0
			g.fail(ctx, m.dev, "step hung past its watchdog")
		}
	case genRestart:
		if dv := &g.devs[m.dev]; !dv.up && dv.gen == m.gen {
			dv.up = true
		}
	}
	g.kick(ctx)
}

// Stats returns the scheduler's counters.
func (g *Scheduler) Stats() Stats { return g.stats }

// BlocksUsed is the KV blocks held on device d.
func (g *Scheduler) BlocksUsed(d int) int { return g.cfg.BlocksPerDevice - g.devs[d].free }

// Blocks is the KV blocks the request id holds on the devices' tables
// (0 if it is on none): for checkers, so it reads the tables, not the
// index of requests in flight.
func (g *Scheduler) Blocks(id uint64) int {
	n := 0
	for d := range g.devs {
		for _, s := range g.devs[d].running {
			if s.req.ID == id {
				n += s.blocks
			}
		}
	}
	return n
}

// InFlight is the number of requests queued or running.
func (g *Scheduler) InFlight() int { return len(g.seqs) }

// Waiting is the number of sequences queued for admission (new, or back
// from a preemption or a crash).
func (g *Scheduler) Waiting() int { return len(g.waiting) }

// Running is the number of sequences admitted to a device.
func (g *Scheduler) Running() int {
	n := 0
	for d := range g.devs {
		n += len(g.devs[d].running)
	}
	return n
}

func (g *Scheduler) blocksFor(tokens int) int {
	return (tokens + g.cfg.BlockTokens - 1) / g.cfg.BlockTokens
}

func (g *Scheduler) reject(ctx StepContext, r Request, o actors.Outcome, why actors.Reason, err string, retry time.Duration) {
	ctx.Send(r.ReplyTo, End{ID: r.ID, Outcome: o, Reason: why, Err: err, RetryAfter: retry,
		Version: g.cfg.Version, Arrival: r.Arrival, Done: ctx.Now(), Attempts: 0})
}

func (g *Scheduler) submit(ctx StepContext, r Request) {
	now := ctx.Now()
	if r.Version == "" {
		r.Version = g.cfg.Version
	}
	switch {
	case r.ReplyTo.IsZero():
		return // nobody to answer
	case g.seqs[r.ID] != nil:
		g.reject(ctx, r, actors.Rejected, actors.ReasonInvalid, "duplicate request id", 0)
		return
	case r.Model != g.cfg.Model || r.Version != g.cfg.Version:
		g.reject(ctx, r, actors.Rejected, actors.ReasonUnknownModel, fmt.Sprintf("this scheduler serves %s@%s", g.cfg.Model, g.cfg.Version), 0)
		return
	case len(r.Prompt) < 1 || len(r.Prompt) > g.cfg.PromptMax || r.MaxTokens < 1 || r.MaxTokens > g.cfg.TokensMax:
		g.reject(ctx, r, actors.Rejected, actors.ReasonInvalid, fmt.Sprintf("prompt of %d tokens, max_tokens %d: want 1..%d and 1..%d", len(r.Prompt), r.MaxTokens, g.cfg.PromptMax, g.cfg.TokensMax), 0)
		return
	case !(r.Temperature >= 0) || math.IsInf(r.Temperature, 1):
		// A backend fails a whole step on it, as a device fault.
		g.reject(ctx, r, actors.Rejected, actors.ReasonInvalid, fmt.Sprintf("temperature %v: want a finite number >= 0", r.Temperature), 0)
		return
	case g.blocksFor(len(r.Prompt)+r.MaxTokens) > g.cfg.BlocksPerDevice:
		// The preemption bound reserves a sequence's whole length on one
		// device, so a sequence that could not fit one is refused.
		g.reject(ctx, r, actors.Rejected, actors.ReasonInvalid, "prompt plus max_tokens does not fit a device's KV cache", 0)
		return
	case g.queued >= g.cfg.WaitingMax:
		g.reject(ctx, r, actors.Rejected, actors.ReasonQueueFull, "generation queue full", g.cfg.TTFT)
		return
	}
	r.Priority = min(max(r.Priority, actors.PriorityLow), actors.PriorityHigh)
	if r.TTFTDeadline == 0 {
		r.TTFTDeadline = r.Arrival + g.cfg.TTFT
	}
	// From here on the deadline is the scheduler's: the client's, less
	// the first token's way back to it.
	r.TTFTDeadline -= g.cfg.ReplyMargin
	if r.Deadline == 0 {
		r.Deadline = r.Arrival + g.cfg.Timeout
	}
	t := g.tenant(r.Tenant, now)
	if t == nil {
		g.reject(ctx, r, actors.Rejected, actors.ReasonQueueFull, "too many tenants in flight", g.cfg.TTFT)
		return
	}
	if ok, wait := t.Take(now); !ok {
		g.reject(ctx, r, actors.Rejected, actors.ReasonRateLimited, "tenant over its request rate", wait)
		return
	}
	if most := t.Config().InflightMax; most > 0 && t.Held() >= most {
		g.reject(ctx, r, actors.Rejected, actors.ReasonQuota, "tenant over its requests in flight", g.cfg.TTFT)
		return
	}
	if t.Held() == 0 {
		// Back from idle: level with the tenants being served.
		t.Level(g.vtime)
	}
	t.Hold()
	s := &genSeq{req: r, tenant: t, dev: -1, attempts: 1, fresh: true}
	s.latestStart = r.TTFTDeadline - g.prefillTime(len(r.Prompt))
	g.seqs[r.ID] = s
	g.waiting = append(g.waiting, s)
	g.queued++
	g.checkDeadline(ctx, s)
}

// prefillTime is a lower bound on the time to prefill n tokens and sample
// the first: a budget's worth a step, alone on a device.
func (g *Scheduler) prefillTime(n int) time.Duration {
	var d time.Duration
	for kv := 0; kv < n; {
		c := min(n-kv, g.cfg.StepTokensMax)
		kv += c
		sampled := 0
		if kv == n {
			sampled = 1 // the first token
		}
		d += g.cfg.Cost.Of(c, sampled, kv)
	}
	return d
}

// checkDeadline ends s if its deadline is past, or if it is queued with
// no token sent and its first token can no longer come by its TTFT
// deadline; otherwise it arms s's timer for the next time that may be so.
func (g *Scheduler) checkDeadline(ctx StepContext, s *genSeq) {
	now := ctx.Now()
	if now >= s.req.Deadline {
		g.end(ctx, s, actors.Expired, actors.ReasonDeadline, "deadline passed before the output was complete")
		return
	}
	at := s.req.Deadline
	if len(s.sent) == 0 {
		if s.dev < 0 && now > s.latestStart {
			g.end(ctx, s, actors.Expired, actors.ReasonDeadline, "the first token can no longer come by the TTFT deadline")
			return
		}
		if now <= s.latestStart {
			at = min(at, s.latestStart+1)
		}
	}
	if s.timer != 0 {
		ctx.Cancel(s.timer)
	}
	g.timerGen++
	s.timerGen = g.timerGen
	s.timer = ctx.After(at-now, genSeqTimer{id: s.req.ID, gen: s.timerGen})
}

// tenant returns the named tenant's state, created on first sight within
// TenantsMax (releasing an idle one at the bound); nil if all are busy.
func (g *Scheduler) tenant(name string, now time.Duration) *actors.Tenant {
	return g.tenants.Lookup(name, now, g.vtime)
}

// level is s's effective priority: its own, one higher per PriorityAging
// since it arrived, up to PriorityHigh.
func (g *Scheduler) level(s *genSeq, now time.Duration) int8 {
	p := s.req.Priority
	if p >= actors.PriorityHigh {
		return p
	}
	up := (now - s.req.Arrival) / g.cfg.PriorityAging
	return int8(min(int64(p)+int64(up), int64(actors.PriorityHigh)))
}

// before reports whether queued sequence a is admitted before b.
func (g *Scheduler) before(a, b *genSeq, now time.Duration) bool {
	if la, lb := g.level(a, now), g.level(b, now); la != lb {
		return la > lb
	}
	if a.tenant.Served() != b.tenant.Served() {
		return a.tenant.Served() < b.tenant.Served()
	}
	if a.req.TTFTDeadline != b.req.TTFTDeadline {
		return a.req.TTFTDeadline < b.req.TTFTDeadline
	}
	return a.req.Arrival < b.req.Arrival || a.req.Arrival == b.req.Arrival && a.req.ID < b.req.ID
}

// prefillOrder orders a device's running sequences for their blocks and
// the prefill budget: the higher effective priority, then the earlier
// TTFT deadline, then the older admitted.
func (g *Scheduler) prefillOrder(a, b *genSeq, now time.Duration) int {
	if la, lb := g.level(a, now), g.level(b, now); la != lb {
		return cmp.Compare(lb, la)
	}
	if c := cmp.Compare(a.req.TTFTDeadline, b.req.TTFTDeadline); c != 0 {
		return c
	}
	return cmp.Compare(a.admit, b.admit)
}

// lateSkipsMax bounds the queued sequences one admission pass passes over
// as predicted late.
const lateSkipsMax = 8

// budgetAhead is the step's tokens that go before queued sequence s if it
// were admitted: the decodes' (tokens), then the remaining prefill of
// those of prefills before it in prefillOrder.
func (g *Scheduler) budgetAhead(s *genSeq, prefills []*genSeq, tokens int, now time.Duration) int {
	for _, o := range prefills {
		if g.prefillOrder(o, s, now) < 0 {
			tokens += o.remaining()
		}
	}
	return tokens
}

// lateIfAdmitted reports whether admitting queued sequence s to device d
// now would make a first token late: s's own, or that of a sequence
// prefilling there that s would go ahead of (prefillOrder).
func (g *Scheduler) lateIfAdmitted(d int, s *genSeq, now time.Duration) bool {
	if g.firstTokenAt(d, s, s, now) > s.req.TTFTDeadline {
		return true
	}
	for _, o := range g.devs[d].running {
		if len(o.sent) == 0 && o.remaining() > 1 && g.prefillOrder(s, o, now) < 0 && g.firstTokenAt(d, o, s, now) > o.req.TTFTDeadline {
			return true
		}
	}
	return false
}

// firstTokenAt predicts when sequence t gets its first token on device d
// if queued sequence s (t itself, or another) were admitted there now:
// after the prefill of t's remaining context and of the sequences ahead
// of it in prefillOrder, a step's budget at a time less one token for
// each sequence decoding there, each step costing the cost model's time
// for what it feeds and the KV the device would hold at the end.
func (g *Scheduler) firstTokenAt(d int, t, s *genSeq, now time.Duration) time.Duration {
	// pending is the prefill to feed up to t's first token, all the
	// prefill on the device (the steps feed what is behind t too).
	pending, all, decodes, kv := 0, 0, 0, 0
	for _, o := range append(g.devs[d].running, s) {
		// Every sequence decodes a token a step once its own prefill is
		// done: counted from now on, the prediction leans late.
		kv += o.context()
		decodes++
		r := o.remaining()
		if o == s {
			r = o.context()
		} else if r <= 1 {
			continue
		}
		all += r
		if o == t || g.prefillOrder(o, t, now) < 0 {
			pending += r
		}
	}
	decodes-- // t's own decode starts after its first token
	perStep := g.cfg.StepTokensMax - decodes
	if perStep < 1 {
		return math.MaxInt64
	}
	steps := (pending + perStep - 1) / perStep
	return now + time.Duration(steps)*g.cfg.Cost.Of(min(g.cfg.StepTokensMax, decodes+all), decodes, kv+steps*decodes)
}

// end gives s its terminal state: it frees s's blocks at once (its device
// runs no step of s meanwhile: a step in flight forgets it), and sends
// its End.
func (g *Scheduler) end(ctx StepContext, s *genSeq, o actors.Outcome, why actors.Reason, err string) {
	if s.dev >= 0 {
		g.release(s)
	} else {
		g.unqueue(s)
	}
	if s.timer != 0 {
		ctx.Cancel(s.timer)
	}
	delete(g.seqs, s.req.ID)
	s.tenant.Unhold()
	ctx.Send(s.req.ReplyTo, End{ID: s.req.ID, Outcome: o, Reason: why, Err: err, Version: g.cfg.Version,
		Tokens: len(s.sent), Arrival: s.req.Arrival, FirstToken: s.firstAt, Done: ctx.Now(),
		Preemptions: s.preempts, Attempts: s.attempts})
}

// release takes s off its device: frees its blocks, and tells the device
// to forget it.
func (g *Scheduler) release(s *genSeq) {
	dv := &g.devs[s.dev]
	dv.free += s.blocks
	s.blocks, s.kv = 0, 0
	dv.running = slices.DeleteFunc(dv.running, func(o *genSeq) bool { return o == s })
	if i := slices.Index(dv.slots, s); i >= 0 {
		dv.slots[i] = nil
	}
	dv.drop = append(dv.drop, s.req.ID)
	s.dev = -1
}

func (g *Scheduler) unqueue(s *genSeq) {
	g.waiting = slices.DeleteFunc(g.waiting, func(o *genSeq) bool { return o == s })
	if s.fresh {
		s.fresh = false
		g.queued--
	}
}

// requeue puts s, taken off its device, back in the queue to be
// recomputed from its prompt and the tokens it sent.
func (g *Scheduler) requeue(ctx StepContext, s *genSeq) {
	g.waiting = append(g.waiting, s)
	g.checkDeadline(ctx, s)
}

func (g *Scheduler) preempt(ctx StepContext, s *genSeq) {
	g.release(s)
	s.preempts++
	s.preemptStep = g.stepSeq + 1
	g.stats.Preemptions++
	g.requeue(ctx, s)
}

// victim is the sequence of device d to preempt: not reserved, lowest
// effective priority, then newest admitted. nil if none may be.
func (g *Scheduler) victim(d int, now time.Duration) *genSeq {
	var v *genSeq
	for _, s := range g.devs[d].running {
		if s.reserved {
			continue
		}
		if v == nil {
			v = s
			continue
		}
		if ls, lv := g.level(s, now), g.level(v, now); ls != lv {
			if ls < lv {
				v = s
			}
		} else if s.admit > v.admit {
			v = s
		}
	}
	return v
}

// kick starts a step on every idle device with work, from a rotating
// first device so that admissions spread over the group.
func (g *Scheduler) kick(ctx StepContext) {
	n := len(g.devs)
	for i := range n {
		d := (g.next + i) % n
		if dv := &g.devs[d]; dv.up && dv.step == 0 && (len(dv.running) > 0 || len(g.waiting) > 0) {
			g.schedule(ctx, d)
		}
	}
	g.next = (g.next + 1) % n
}

// schedule builds and starts device d's next step.
func (g *Scheduler) schedule(ctx StepContext, d int) {
	now := ctx.Now()
	dv := &g.devs[d]
	order := slices.Clone(dv.running)
	// Within a level, the earliest TTFT deadline first: the prefill
	// budget goes to the first token due soonest (a recompute's deadline
	// is past, so its stalled stream goes first), then the oldest
	// admitted. Decodes take their blocks in this order too.
	slices.SortFunc(order, func(a, b *genSeq) int { return g.prefillOrder(a, b, now) })
	// Decodes first: each needs a block when its token crosses a block
	// edge; with none free, preempt until one is.
	for _, s := range order {
		if s.dev != d || s.remaining() != 1 {
			continue
		}
		want := g.blocksFor(s.kv+1) - s.blocks
		for want > dv.free && s.dev == d {
			v := g.victim(d, now)
			if v == nil {
				break
			}
			g.preempt(ctx, v)
		}
		if s.dev == d && want > 0 && want <= dv.free {
			dv.free -= want
			s.blocks += want
		}
	}
	var job StepJob
	var seqs []*genSeq
	var fed []int
	var sample []bool
	tokens := 0
	add := func(s *genSeq, n int) {
		in := make([]byte, n)
		for i := range in {
			in[i] = s.input(s.kv + i)
		}
		smp := s.kv+n == s.context()
		job.Slots = append(job.Slots, StepSlot{Seq: s.req.ID, Start: s.kv, Input: string(in), PromptLen: len(s.req.Prompt), Sample: smp,
			Temperature: s.req.Temperature, Seed: s.req.Seed})
		seqs, fed, sample = append(seqs, s), append(fed, n), append(sample, smp)
		tokens += n
		s.tenant.Charge(float64(n))
	}
	for _, s := range order {
		if s.dev == d && s.remaining() == 1 && g.blocksFor(s.kv+1) <= s.blocks {
			add(s, 1)
		}
	}
	// The prefills: the running sequences' and the admitted ones', whose
	// share of the budget is given in prefillOrder once admission is done.
	var prefills []*genSeq
	for _, s := range order {
		if s.dev == d && s.remaining() > 1 {
			prefills = append(prefills, s)
		}
	}
	// Admit queued sequences while budget, sequence slots and blocks last
	// (with Static, only into a device that had nothing running, and a
	// whole batch at once: those past the budget start their prefill in
	// the next steps).
	static := g.cfg.Static && len(dv.running) == 0
	open := !g.cfg.Static || static
	var late []*genSeq
	for open && len(dv.running) < g.cfg.SeqsMax && len(late) < min(len(g.waiting), lateSkipsMax) {
		var s *genSeq
		for _, o := range g.waiting {
			if (s == nil || g.before(o, s, now)) && !slices.Contains(late, o) {
				s = o
			}
		}
		if s.preemptStep == g.stepSeq+1 {
			break // just preempted here: recomputing it at once would undo that
		}
		if !static && g.budgetAhead(s, prefills, tokens, now) >= g.cfg.StepTokensMax {
			// The prefills due before it fill this step's budget: it
			// waits for a step with room (and with it, the rest of the
			// queue, whose order it heads).
			break
		}
		if !g.cfg.Static && len(s.sent) == 0 && g.lateIfAdmitted(d, s, now) {
			// Its first token would come too late on this device behind
			// the prefills due before it: it stays queued (another device
			// may take it, or it fails early at its latest start) and the
			// next in order is tried.
			late = append(late, s)
			continue
		}
		need, headroom := g.blocksFor(s.context()), g.cfg.AdmitHeadroomBlocks
		if s.reserved || s.preempts >= g.cfg.PreemptMax {
			s.reserved = true
			need, headroom = g.blocksFor(len(s.req.Prompt)+s.req.MaxTokens), 0
		}
		if need+headroom > dv.free {
			break
		}
		g.unqueue(s)
		g.vtime = max(g.vtime, s.tenant.Served())
		dv.free -= need
		s.dev, s.blocks, s.kv = d, need, 0
		g.admitSeq++
		s.admit = g.admitSeq
		dv.running = append(dv.running, s)
		prefills = append(prefills, s)
	}
	slices.SortStableFunc(prefills, func(a, b *genSeq) int { return g.prefillOrder(a, b, now) })
	for _, s := range prefills {
		if tokens < g.cfg.StepTokensMax {
			add(s, min(s.remaining(), g.cfg.StepTokensMax-tokens))
		}
	}
	if len(job.Slots) == 0 {
		return
	}
	g.stepSeq++
	job.ID, job.Device, job.Model, job.Version, job.Free = g.stepSeq, d, g.cfg.Model, g.cfg.Version, dv.drop
	dv.drop = nil
	dv.step, dv.slots, dv.fed, dv.sample = job.ID, seqs, fed, sample
	g.stats.Steps++
	g.stats.Prefilled += int64(tokens)
	predicted := g.cfg.Cost.StepCost(job)
	ctx.ExecStep(job)
	dv.watchdog = ctx.After(time.Duration(float64(predicted)*g.cfg.WatchdogMultiple)+g.cfg.WatchdogSlack, genWatchdog{dev: d, step: job.ID})
}

func (g *Scheduler) stepDone(ctx StepContext, m StepDone) {
	d := slices.IndexFunc(g.devs, func(dv genDevice) bool { return dv.step == m.ID && dv.up })
	if d < 0 || m.ID == 0 {
		return // a step abandoned at its watchdog
	}
	dv := &g.devs[d]
	if dv.watchdog != 0 {
		ctx.Cancel(dv.watchdog)
		dv.watchdog = 0
	}
	if m.Fault || m.Err != "" || len(m.Out) != len(dv.slots) {
		why := m.Err
		if m.Fault {
			why = "device fault"
		}
		g.fail(ctx, d, why)
		return
	}
	dv.failures = 0
	seqs, fed, sample := dv.slots, dv.fed, dv.sample
	dv.step, dv.slots, dv.fed, dv.sample = 0, nil, nil, nil
	now := ctx.Now()
	for i, s := range seqs {
		if s == nil {
			continue // ended while the step ran
		}
		s.kv += fed[i]
		if !sample[i] {
			continue
		}
		out := m.Out[i]
		idx := len(s.sent)
		s.sent = append(s.sent, out.Token)
		g.stats.Tokens++
		if idx == 0 {
			s.firstAt = now
		}
		ctx.Send(s.req.ReplyTo, Token{ID: s.req.ID, Index: idx, Byte: out.Token})
		if out.End || len(s.sent) >= s.req.MaxTokens {
			g.end(ctx, s, actors.Completed, actors.ReasonNone, "")
		} else if idx == 0 {
			g.checkDeadline(ctx, s) // from now on only the total deadline counts
		}
	}
}

// fail handles a device that faulted or hung: its KV cache is lost, its
// sequences go back to the queue (or fail, out of attempts), and it
// restarts after a backoff.
func (g *Scheduler) fail(ctx StepContext, d int, why string) {
	dv := &g.devs[d]
	if dv.watchdog != 0 {
		ctx.Cancel(dv.watchdog)
	}
	g.stats.Crashes++
	lost := dv.running
	dv.running, dv.slots, dv.fed, dv.sample, dv.drop = nil, nil, nil, nil, nil
	dv.step, dv.watchdog, dv.up = 0, 0, false
	dv.free = g.cfg.BlocksPerDevice
	dv.failures++
	dv.gen++
	backoff := g.cfg.RestartBackoff << min(dv.failures-1, 6)
	ctx.After(backoff, genRestart{dev: d, gen: dv.gen})
	for _, s := range lost {
		s.dev, s.blocks, s.kv = -1, 0, 0
		if s.attempts >= g.cfg.AttemptMax {
			g.waiting = append(g.waiting, s) // end unqueues it
			g.end(ctx, s, actors.Failed, actors.ReasonAttempts, fmt.Sprintf("device failures used up the %d attempts (last: %s)", g.cfg.AttemptMax, why))
			continue
		}
		s.attempts++
		g.requeue(ctx, s)
	}
}

// Check verifies the scheduler's books, the way Batcher.Check does: every
// device's free blocks plus its sequences' blocks make its capacity, no
// sequence holds fewer blocks than its KV needs, the bounds hold, and
// every sequence is either queued or on exactly one device. For the
// simulator and tests, after every message.
func (g *Scheduler) Check() error {
	seen := 0
	for d := range g.devs {
		dv := &g.devs[d]
		used := 0
		if len(dv.running) > g.cfg.SeqsMax {
			return fmt.Errorf("gen check: device %d runs %d sequences, SeqsMax %d", d, len(dv.running), g.cfg.SeqsMax)
		}
		for _, s := range dv.running {
			if s.dev != d || g.seqs[s.req.ID] != s {
				return fmt.Errorf("gen check: device %d runs sequence %d, which is on %d or not in flight", d, s.req.ID, s.dev)
			}
			if s.blocks < g.blocksFor(s.kv) {
				return fmt.Errorf("gen check: sequence %d holds %d KV tokens in %d blocks", s.req.ID, s.kv, s.blocks)
			}
			used += s.blocks
			seen++
		}
		if dv.free < 0 || used+dv.free != g.cfg.BlocksPerDevice {
			return fmt.Errorf("gen check: device %d: %d blocks held, %d free, capacity %d", d, used, dv.free, g.cfg.BlocksPerDevice)
		}
	}
	fresh := 0
	for _, s := range g.waiting {
		if s.dev != -1 || s.blocks != 0 || g.seqs[s.req.ID] != s {
			return fmt.Errorf("gen check: queued sequence %d is on device %d with %d blocks", s.req.ID, s.dev, s.blocks)
		}
		if s.fresh {
			fresh++
		}
	}
	if fresh != g.queued || g.queued > g.cfg.WaitingMax {
		return fmt.Errorf("gen check: %d new requests queued, counted %d, WaitingMax %d", fresh, g.queued, g.cfg.WaitingMax)
	}
	if seen+len(g.waiting) != len(g.seqs) {
		return fmt.Errorf("gen check: %d running and %d queued, %d in flight", seen, len(g.waiting), len(g.seqs))
	}
	return nil
}
