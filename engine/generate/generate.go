package generate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/gen"
	"github.com/batchd/batchd/engine"
)

// Node is the actor address node of the generation runtime's actors.
const Node = "gen"

// replyAddr is where every request's Tokens and gen.End go: one listener,
// which hands each to its request's stream by ID.
var replyAddr = actors.Address{Node: Node, ID: 1}

// Config configures a Service.
type Config struct {
	// Models are the generation models served, each by a scheduler of its
	// own on Gen.Devices devices of its own.
	Models []string
	// Gen is every model's scheduler configuration (Gen.Model is set per
	// model). Gen.Cost is also the emulated devices' true step time.
	Gen gen.Config
	// OutLen is the emulated generator's output length distribution.
	OutLen gen.Lognormal
	// NewStep, when set, makes each device's generation backend (called
	// once per device of each model, by model name and device index):
	// its tokens are the backend's, and a step takes the backend's own
	// compute time, with no wait for the cost model (which the scheduler
	// still predicts with). Nil: the emulated generator
	// (gen.Emulated), each step taking Gen.Cost's time.
	NewStep func(model string, device int) (Step, error)
	// InFlightMax bounds the requests in Generate at once, over all
	// models; past it a request is refused (503) before it reaches a
	// mailbox. Zero: per model, Gen.WaitingMax plus every device's
	// SeqsMax.
	InFlightMax int
	// ReplyGrace is how long past a request's deadline Generate waits for
	// its gen.End before it answers 504 itself (a scheduler restarted by
	// its supervision under it). Default 5 s.
	ReplyGrace time.Duration
	// Scale is the autoscaling recommendation's policy (Stats.
	// DevicesRecommended, /metrics). Zero: gen.DefaultScaleConfig.
	Scale gen.ScaleConfig
	// NewRuntime makes the actor runtime. Nil: engine.LinkedRuntime.
	NewRuntime engine.NewRuntime
	// Seed seeds the runtime's actors' random streams.
	Seed uint64
	// Logger receives the actor library's warnings. Nil discards them.
	Logger *slog.Logger
}

// Validate reports the first setting that makes the service unusable.
func (c Config) Validate() error {
	if len(c.Models) == 0 {
		return errors.New("generate: no models")
	}
	for i, m := range c.Models {
		if m == "" || slices.Contains(c.Models[:i], m) {
			return fmt.Errorf("generate: model %d %q: empty or repeated", i, m)
		}
	}
	g := c.Gen
	g.Model = c.Models[0]
	if err := g.Validate(); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if err := c.OutLen.Validate(); err != nil {
		return fmt.Errorf("generate: output length: %w", err)
	}
	if c.InFlightMax < 0 || c.ReplyGrace < 0 {
		return fmt.Errorf("generate: InFlightMax %d, ReplyGrace %v: must not be negative", c.InFlightMax, c.ReplyGrace)
	}
	return nil
}

// Step is a device's generation backend: it runs one step at a time, on
// its device's worker goroutine, and forgets every sequence on Reset (a
// new scheduler incarnation knows nothing of what the old one held).
type Step interface {
	gen.Step
	Reset()
}

// Service is the live generation of some models: their schedulers on a
// runtime of their own, their device workers, and the streams of the
// requests in flight. Make it with New, stop it with Close. Its methods
// are safe for concurrent use.
type Service struct {
	cfg    Config
	rt     engine.Runtime
	models map[string]*model
	names  []string
	// slots bounds the requests in Generate (a semaphore).
	slots chan struct{}
	ids   atomic.Uint64
	// streams are the requests in flight, by ID.
	mu       sync.Mutex
	streams  map[uint64]*stream
	draining atomic.Bool
	met      *metrics

	stopWorkers context.CancelFunc
	workers     sync.WaitGroup
}

// model is one model's scheduler and devices, and the gauges its actor
// publishes after each message.
type model struct {
	name string
	addr actors.Address
	cfg  gen.Config
	devs []*device
	// incs counts the scheduler's incarnations; a step carries its
	// incarnation, and the worker resets its device's state at a new one.
	incs atomic.Uint64
	// Published by the actor after each message it handles.
	inFlight, running, waiting, blocksUsed atomic.Int64
	preemptions, crashes, tokens, steps    atomic.Int64
	// The autoscaling signal, published at most every pressureEvery.
	pressure atomic.Pointer[gen.Pressure]
	// The workers' step timing: steps run, the time past each emulated
	// step's due end at which its sleep returned (Go timers under load),
	// and the time from a step's result sent to the worker's next step
	// handed over (the scheduler's round trip).
	stepsRun, lateNs, handoverNs, handovers atomic.Int64
}

// pressureEvery bounds how often a scheduler's actor computes its
// autoscaling signal while requests are queued (O(n log n) in its queue;
// with none queued it costs little and is computed after every message).
const pressureEvery = 100 * time.Millisecond

// New starts the schedulers and their devices' workers.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReplyGrace == 0 {
		cfg.ReplyGrace = 5 * time.Second
	}
	if cfg.Scale == (gen.ScaleConfig{}) {
		cfg.Scale = gen.DefaultScaleConfig()
	}
	if cfg.InFlightMax == 0 {
		cfg.InFlightMax = len(cfg.Models) * (cfg.Gen.WaitingMax + cfg.Gen.Devices*cfg.Gen.SeqsMax)
	}
	newRT := cfg.NewRuntime
	if newRT == nil {
		newRT = engine.LinkedRuntime
	}
	rt, err := newRT(engine.RuntimeOptions{Seed: cfg.Seed, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("generate: runtime: %w", err)
	}
	s := &Service{cfg: cfg, rt: rt, models: map[string]*model{}, names: slices.Clone(cfg.Models),
		slots: make(chan struct{}, cfg.InFlightMax), streams: map[uint64]*stream{}}
	s.met = newMetrics(s)
	wctx, stop := context.WithCancel(context.Background())
	s.stopWorkers = stop
	fail := func(err error) (*Service, error) {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return nil, errors.Join(err, s.Close(cctx))
	}
	if err := rt.Listen(replyAddr, s.deliver); err != nil {
		return fail(fmt.Errorf("generate: %w", err))
	}
	for i, name := range cfg.Models {
		m := &model{name: name, addr: actors.Address{Node: Node, ID: uint64(16 + i)}, cfg: cfg.Gen}
		m.cfg.Model = name
		for d := range m.cfg.Devices {
			dv := &device{index: d, m: m, rt: rt, cost: m.cfg.Cost, wake: make(chan struct{}, 1), emulated: cfg.NewStep == nil}
			if dv.emulated {
				dv.gen = gen.NewEmulated(cfg.OutLen, m.cfg.BlockTokens)
			} else if dv.gen, err = cfg.NewStep(name, d); err != nil {
				return fail(fmt.Errorf("generate: %s device %d: %w", name, d, err))
			}
			m.devs = append(m.devs, dv)
			s.workers.Go(func() { dv.loop(wctx) })
		}
		s.models[name] = m
		if err := rt.Spawn(m.addr, m.newActor, nil); err != nil {
			return fail(fmt.Errorf("generate: spawn %s: %w", name, err))
		}
	}
	return s, nil
}

// Models implements openai.Generator.
func (s *Service) Models() []string { return slices.Clone(s.names) }

// Drain refuses new requests (503) from now on; those in flight go on.
func (s *Service) Drain() { s.draining.Store(true) }

// Close stops the runtime (its actors and timers) and the device workers,
// within ctx. Requests still in Generate end at their ctx or deadline.
func (s *Service) Close(ctx context.Context) error {
	s.draining.Store(true)
	err := s.rt.Close(ctx)
	s.stopWorkers()
	done := make(chan struct{})
	go func() {
		s.workers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, fmt.Errorf("generate: device workers still running: %w", ctx.Err()))
	}
	return err
}

// Stats is one model's state as its scheduler last published it.
type Stats struct {
	InFlight, Running, Waiting int
	// BlocksUsed is the KV blocks held over the model's devices, of
	// Blocks.
	BlocksUsed, Blocks                  int
	Preemptions, Crashes, Tokens, Steps int64
	// Pressure is the autoscaling signal (KV use, the queued requests'
	// TTFT slack), as of at most pressureEvery ago; DevicesRecommended
	// the devices Config.Scale recommends under it, of Devices.
	Pressure                    gen.Pressure
	Devices, DevicesRecommended int
	// StepLateMean is the mean time past its predicted end at which a
	// step ended: an emulated step's wait returned (what the timers add),
	// a real backend's step its compute (the cost model's error, negative
	// where it predicts too slow); HandoverMean the mean time from a
	// step's result sent to the device's next step handed over (idle
	// time included, when the device had nothing to do). What a live run
	// adds to the simulator's steps, for the figures.
	StepLateMean, HandoverMean time.Duration
}

// Stats returns model's state (the zero Stats for a model not served).
func (s *Service) Stats(name string) Stats {
	m := s.models[name]
	if m == nil {
		return Stats{}
	}
	st := Stats{
		InFlight: int(m.inFlight.Load()), Running: int(m.running.Load()), Waiting: int(m.waiting.Load()),
		BlocksUsed: int(m.blocksUsed.Load()), Blocks: m.cfg.Devices * m.cfg.BlocksPerDevice,
		Preemptions: m.preemptions.Load(), Crashes: m.crashes.Load(), Tokens: m.tokens.Load(), Steps: m.steps.Load(),
		Devices: m.cfg.Devices,
	}
	if p := m.pressure.Load(); p != nil {
		st.Pressure = *p
	}
	if n := m.stepsRun.Load(); n > 0 {
		st.StepLateMean = time.Duration(m.lateNs.Load() / n)
	}
	if n := m.handovers.Load(); n > 0 {
		st.HandoverMean = time.Duration(m.handoverNs.Load() / n)
	}
	st.DevicesRecommended = gen.Recommend(st.Pressure, st.Devices, s.cfg.Scale)
	return st
}

// newActor makes a fresh scheduler: the first, or one per restart by the
// runtime's supervision.
func (m *model) newActor() actors.Actor {
	g, err := gen.NewScheduler(m.cfg)
	if err != nil {
		panic(fmt.Sprintf("generate: %s: %v", m.name, err)) // validated in New
	}
	return &schedActor{m: m, g: g, inc: m.incs.Add(1), pressureAt: -1}
}

// schedActor is the scheduler as a runtime actor: it gives the scheduler a
// StepContext and publishes its gauges.
type schedActor struct {
	m   *model
	g   *gen.Scheduler
	inc uint64
	// pressureAt is when it last published its pressure (-1: never).
	pressureAt time.Duration
}

// stepResult is a step's StepDone on its way back from a worker, with the
// incarnation that started it.
type stepResult struct {
	inc  uint64
	done gen.StepDone
}

func (a *schedActor) Receive(ctx actors.Context, msg actors.Message) {
	switch m := msg.(type) {
	case actors.Start:
		a.publish(ctx.Now())
		return
	case stepResult:
		if m.inc != a.inc {
			return // a step of an incarnation that panicked
		}
		msg = m.done
	}
	a.g.Receive(stepCtx{Context: ctx, a: a}, msg)
	a.publish(ctx.Now())
}

func (a *schedActor) publish(now time.Duration) {
	m, g := a.m, a.g
	if a.pressureAt < 0 || now-a.pressureAt >= pressureEvery || g.Waiting() == 0 {
		a.pressureAt = now
		p := g.Pressure(now)
		m.pressure.Store(&p)
	}
	used := 0
	for d := range m.cfg.Devices {
		used += g.BlocksUsed(d)
	}
	st := g.Stats()
	m.inFlight.Store(int64(g.InFlight()))
	m.running.Store(int64(g.Running()))
	m.waiting.Store(int64(g.Waiting()))
	m.blocksUsed.Store(int64(used))
	m.preemptions.Store(st.Preemptions)
	m.crashes.Store(st.Crashes)
	m.tokens.Store(st.Tokens)
	m.steps.Store(st.Steps)
}

// stepCtx is the StepContext the scheduler gets: the runtime's Context,
// and ExecStep on the model's device workers.
type stepCtx struct {
	actors.Context
	a *schedActor
}

func (c stepCtx) ExecStep(job gen.StepJob) {
	devs := c.a.m.devs
	if job.Device < 0 || job.Device >= len(devs) {
		panic(fmt.Sprintf("generate: step %d on device %d of %d", job.ID, job.Device, len(devs)))
	}
	devs[job.Device].exec(c.a.inc, job)
}

// device is one device: a worker goroutine that runs one step at a time,
// on the emulated generator taking the step's predicted time, or on the
// backend NewStep made taking its own.
type device struct {
	index int
	m     *model
	rt    engine.Runtime
	cost  gen.Cost
	wake  chan struct{} // capacity 1

	mu   sync.Mutex
	next *pendingStep // the step handed over and not started

	// emulated: gen is the emulated generator, and a step waits out its
	// predicted time.
	emulated bool

	// Owned by the worker goroutine.
	gen Step
	inc uint64
}

type pendingStep struct {
	inc uint64
	job gen.StepJob
	at  time.Time // handed over
}

// exec hands job to the worker; it does not block.
func (d *device) exec(inc uint64, job gen.StepJob) {
	d.mu.Lock()
	d.next = &pendingStep{inc: inc, job: job, at: time.Now()}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// loop runs the steps handed over until ctx ends.
func (d *device) loop(ctx context.Context) {
	var sent time.Time // when the last step's result was sent
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		}
		d.mu.Lock()
		p := d.next
		d.next = nil
		d.mu.Unlock()
		if p == nil {
			continue
		}
		if p.inc != d.inc {
			d.gen.Reset() // a new scheduler knows nothing of what this one held
			d.inc = p.inc
		}
		start := time.Now()
		if !sent.IsZero() && p.inc == d.inc {
			d.m.handoverNs.Add(int64(p.at.Sub(sent)))
			d.m.handovers.Add(1)
		}
		due := start.Add(d.cost.StepCost(p.job))
		done := d.gen.Step(p.job)
		if d.emulated && sleepUntil(ctx, due) != nil {
			return
		}
		d.m.lateNs.Add(int64(time.Since(due)))
		d.m.stepsRun.Add(1)
		sent = time.Now()
		d.rt.Send(d.m.addr, stepResult{inc: p.inc, done: done})
	}
}

// sleepUntil waits until t as precisely as the engine's timers fire
// (engine.AfterFunc), or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	ch := make(chan struct{})
	tm := engine.AfterFunc(d, func() { close(ch) })
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		tm.Stop()
		return ctx.Err()
	}
}
