package gen

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/gen"
	"github.com/batchd/batchd/sim"
)

// The run's addresses: the scheduler, and one address for every client
// (no actor: the World shows its messages to the ledger and drops them).
var (
	schedAddr  = actors.Address{ID: 1}
	clientAddr = actors.Address{ID: 2}
)

// violationsMax bounds the violations a run keeps.
const violationsMax = 20

// Run runs cfg: arrivals for cfg.Duration, then a drain until nothing is
// left, and returns the report with every invariant violation it saw.
func Run(cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r, err := newRun(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.w.Run(); err != nil {
		return nil, fmt.Errorf("sim gen: %w", err)
	}
	return r.report(), nil
}

type run struct {
	cfg  Config
	w    *sim.World
	g    *gen.Scheduler
	h    *host
	l    *ledger
	cost gen.Cost
}

func newRun(cfg Config) (*run, error) {
	// Each tenant's weight reaches the scheduler as its TenantConfig,
	// unless Gen names the tenant itself.
	cfg.Gen.Tenants = slices.Clone(cfg.Gen.Tenants)
	for _, t := range cfg.Tenants {
		if !slices.ContainsFunc(cfg.Gen.Tenants, func(c actors.TenantConfig) bool { return c.Name == t.Name }) {
			cfg.Gen.Tenants = append(cfg.Gen.Tenants, actors.TenantConfig{Name: t.Name, Weight: t.Weight})
		}
	}
	g, err := gen.NewScheduler(cfg.Gen)
	if err != nil {
		return nil, err
	}
	w := sim.NewWorld(sim.DefaultWorldConfig(cfg.Seed))
	r := &run{cfg: cfg, w: w, g: g, cost: cfg.Cost}
	if r.cost == (gen.Cost{}) {
		r.cost = cfg.Gen.Cost
	}
	r.l = newLedger(r)
	r.h = newHost(r)
	w.Observe(r.l)
	w.Spawn(schedAddr, r.h)
	r.arrivals()
	return r, nil
}

// Arrival is one request of a run's workload: its arrival time (the
// request's Arrival), and when its client cancels it (0: never).
type Arrival struct {
	Req      gen.Request
	CancelAt time.Duration
}

// Arrivals draws cfg's workload: every tenant's Poisson arrivals with
// their prompts, and the cancels, in arrival order. Each comes from a
// stream named after cfg.Seed, so one seed gives one workload: the
// simulator runs it, and a live run replays it (prompt, and so the
// emulated generator's output length, and arrival time alike). Its
// requests' ReplyTo is the zero address; the run sets its own.
func Arrivals(cfg Config) []Arrival {
	var all []Arrival
	prompts := sim.NewStream(cfg.Seed, "gen/prompts")
	cancels := sim.NewStream(cfg.Seed, "gen/cancels")
	var id uint64
	for ti, t := range cfg.Tenants {
		if t.Rate <= 0 {
			continue
		}
		rng := sim.NewStream(cfg.Seed, "gen/arrivals/"+t.Name)
		at := time.Duration(0)
		for len(all) < cfg.RequestsMax {
			at += time.Duration(rng.ExpFloat64() / t.Rate * float64(time.Second))
			if at >= cfg.Duration {
				break
			}
			id++
			n := cfg.PromptLen.Draw(prompts)
			p := make([]byte, n)
			for i := range p {
				p[i] = 'a' + byte(prompts.IntN(26))
			}
			all = append(all, Arrival{Req: gen.Request{
				ID: id<<8 | uint64(ti), Tenant: t.Name, Model: cfg.Gen.Model, Priority: t.Priority,
				Prompt: string(p), MaxTokens: cfg.MaxTokens, Arrival: at,
			}})
		}
	}
	slices.SortFunc(all, func(a, b Arrival) int {
		if a.Req.Arrival != b.Req.Arrival {
			return int(a.Req.Arrival - b.Req.Arrival)
		}
		return int(a.Req.ID) - int(b.Req.ID)
	})
	for i := range all {
		if cfg.CancelFrac > 0 && cancels.Float64() < cfg.CancelFrac {
			all[i].CancelAt = all[i].Req.Arrival + time.Duration(cancels.Float64()*float64(cfg.CancelWithin))
		}
	}
	return all
}

// arrivals injects the workload's requests and cancels.
func (r *run) arrivals() {
	for _, a := range Arrivals(r.cfg) {
		a.Req.ReplyTo = clientAddr
		r.l.offer(a.Req)
		r.w.Inject(a.Req.Arrival, schedAddr, gen.Submit{Req: a.Req})
		if a.CancelAt > 0 {
			r.w.Inject(a.CancelAt, schedAddr, gen.Cancel{ID: a.Req.ID})
		}
	}
}

// host makes the scheduler an actor of the World and runs its steps on
// emulated generators, one per device, checking what the device sees.
type host struct {
	r      *run
	devs   []*simDevice
	faults interface{ Float64() float64 }
	// kv samples: the time and blocks used over the group after each
	// message.
	kvAt       []time.Duration
	kvUsed     []int
	kvPeak     int
	crashes    int
	hangs      int
	stepTokens int64
}

type simDevice struct {
	emu *gen.Emulated
	// step in flight (0: none); hung: the device hangs until the
	// scheduler restarts it.
	step uint64
	hung bool
	// held are the sequences the device was given and not told to free,
	// with the crashes that hit each while held (for the independent
	// preemption count).
	held map[uint64]bool
}

func newHost(r *run) *host {
	h := &host{r: r, faults: r.w.Stream("gen/faults")}
	for range r.cfg.Gen.Devices {
		h.devs = append(h.devs, &simDevice{emu: gen.NewEmulated(r.cfg.OutLen, r.cfg.Gen.BlockTokens), held: map[uint64]bool{}})
	}
	return h
}

// stepCtx is the StepContext the scheduler gets: the World's Context, plus
// ExecStep on this host.
type stepCtx struct {
	actors.Context
	h *host
}

func (c stepCtx) ExecStep(job gen.StepJob) { c.h.exec(c.Context, job) }

func (h *host) Receive(ctx actors.Context, msg actors.Message) {
	if m, ok := msg.(doneMsg); ok {
		if dv := h.devs[m.dev]; dv.step == m.res.ID {
			dv.step = 0
		}
		msg = m.res
	}
	h.r.g.Receive(stepCtx{ctx, h}, msg)
	if err := h.r.g.Check(); err != nil {
		h.r.l.violate(KindKV, ctx.Now(), "%v", err)
	}
	used := 0
	for d := range h.devs {
		u := h.r.g.BlocksUsed(d)
		if u > h.r.cfg.Gen.BlocksPerDevice {
			h.r.l.violate(KindKV, ctx.Now(), "device %d: scheduler holds %d blocks of %d", d, u, h.r.cfg.Gen.BlocksPerDevice)
		}
		used += u
	}
	if n := len(h.kvUsed); n == 0 || h.kvUsed[n-1] != used {
		h.kvAt, h.kvUsed = append(h.kvAt, ctx.Now()), append(h.kvUsed, used)
	}
	h.kvPeak = max(h.kvPeak, used)
}

// exec runs job on its device: a fault draw, then the emulated step, whose
// StepDone comes back to the scheduler after the step's cost.
func (h *host) exec(ctx actors.Context, job gen.StepJob) {
	cfg := h.r.cfg
	now := ctx.Now()
	dv := h.devs[job.Device]
	if dv.hung {
		// The scheduler gave up on the hung step and restarted the device.
		dv.hung, dv.step = false, 0
	}
	if dv.step != 0 {
		h.r.l.violate(KindBudget, now, "device %d: step %d starts while step %d runs", job.Device, job.ID, dv.step)
	}
	tokens := 0
	for _, s := range job.Slots {
		tokens += len(s.Input)
		if rec := h.r.l.recs[s.Seq]; rec != nil {
			rec.fed += len(s.Input)
		}
		if s.Start == 0 {
			h.r.l.admitted(s.Seq)
		}
		dv.held[s.Seq] = true
	}
	for _, id := range job.Free {
		delete(dv.held, id)
	}
	h.stepTokens += int64(tokens)
	if tokens > cfg.Gen.StepTokensMax || tokens == 0 {
		h.r.l.violate(KindBudget, now, "step %d feeds %d tokens, budget %d", job.ID, tokens, cfg.Gen.StepTokensMax)
	}
	cost := h.r.cost.StepCost(job)
	dv.step = job.ID
	if now < cfg.FaultsUntil && cfg.CrashP+cfg.HangP > 0 {
		switch x := h.faults.Float64(); {
		case x < cfg.CrashP:
			h.lose(dv)
			h.crashes++
			ctx.After(cost/2, doneMsg{dev: job.Device, res: gen.StepDone{ID: job.ID, Fault: true}})
			return
		case x < cfg.CrashP+cfg.HangP:
			h.lose(dv)
			h.hangs++
			dv.hung = true
			return
		}
	}
	res := dv.emu.Step(job)
	if res.Err != "" {
		h.r.l.violate(KindStream, now, "device %d: %s", job.Device, res.Err)
	}
	// What the device really holds must fit its blocks: the KV of every
	// sequence it keeps, rounded up to blocks.
	if b := dv.emu.Blocks(); b > cfg.Gen.BlocksPerDevice {
		h.r.l.violate(KindKV, now, "device %d holds %d KV blocks after step %d, capacity %d", job.Device, b, job.ID, cfg.Gen.BlocksPerDevice)
	}
	// A sequence that ended before this step holds no KV on the device
	// after it: the scheduler told the device to free it.
	for _, id := range slices.Sorted(mapKeys(dv.held)) {
		if rec := h.r.l.recs[id]; rec != nil && rec.end != nil {
			h.r.l.violate(KindFreed, now, "device %d still holds the KV of request %d after step %d; it ended %v at %v", job.Device, id, job.ID, rec.end.Outcome, rec.end.Done)
		}
	}
	ctx.After(cost, doneMsg{dev: job.Device, res: res})
}

// doneMsg is a step's result on its way back: the host clears the
// device's step and hands the StepDone to the scheduler.
type doneMsg struct {
	dev int
	res gen.StepDone
}

// lose is a crash or hang of dv: its memory is gone, and every sequence it
// held loses its KV through no preemption.
func (h *host) lose(dv *simDevice) {
	dv.emu.Reset()
	for _, id := range slices.Sorted(mapKeys(dv.held)) {
		h.r.l.crashed(id)
	}
	clear(dv.held)
}

func mapKeys(m map[uint64]bool) func(func(uint64) bool) {
	return func(yield func(uint64) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// percentiles of a sample, in milliseconds.
type Percentiles struct {
	P50, P95, P99, Max float64
}

func pct(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return float64(s[max(i, 0)]) / 1e6
	}
	return Percentiles{P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: float64(s[len(s)-1]) / 1e6}
}
