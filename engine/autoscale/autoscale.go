package autoscale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// Config is what a Recommender runs.
type Config struct {
	// Policy is the autoscaling policy (the serve config's autoscale).
	Policy actors.AutoscalerConfig
	// Every is how often the policy reads the signals.
	Every time.Duration
	// Devices is the devices the node runs: the policy's starting fleet
	// (clamped to its bounds) and the recommendation's denominator.
	Devices int
	// Signals reads the batcher's signals (engine.Engine.Signals); each
	// call is bounded by Every.
	Signals func(ctx context.Context) (actors.Signals, error)
	// Runtime makes the actor runtime the policy runs on; nil means
	// engine.LinkedRuntime.
	Runtime engine.NewRuntime
}

// DecisionsMax bounds the decisions a Recommender keeps (the latest).
const DecisionsMax = 32

// Decision is one of the policy's decisions.
type Decision struct {
	// At is when it came (wall clock).
	At      time.Time
	Devices int
	Reason  string
}

// The policy's addresses on its own runtime.
var (
	autoscalerAddr  = actors.Address{ID: 1}
	provisionerAddr = actors.Address{ID: 2}
)

// Recommender is the policy running live. Make it with New, run it with
// Run, stop it with Close; its readers are safe for concurrent use.
type Recommender struct {
	cfg Config
	rt  engine.Runtime

	recommended atomic.Int64
	up, down    atomic.Uint64
	readings    atomic.Uint64

	mu        sync.Mutex
	decisions []Decision // the latest DecisionsMax, oldest first
}

// New validates cfg and starts the policy on its runtime; it reads no
// signals until Run.
func New(cfg Config) (*Recommender, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("autoscale: %w", err)
	}
	switch {
	case cfg.Every <= 0:
		return nil, fmt.Errorf("autoscale: Every %v: must be positive", cfg.Every)
	case cfg.Devices < 1:
		return nil, fmt.Errorf("autoscale: Devices %d: must be positive", cfg.Devices)
	case cfg.Signals == nil:
		return nil, errors.New("autoscale: no Signals")
	}
	newRuntime := cfg.Runtime
	if newRuntime == nil {
		newRuntime = engine.LinkedRuntime
	}
	rt, err := newRuntime(engine.RuntimeOptions{})
	if err != nil {
		return nil, fmt.Errorf("autoscale: runtime: %w", err)
	}
	r := &Recommender{cfg: cfg, rt: rt}
	r.recommended.Store(int64(min(max(cfg.Devices, cfg.Policy.DevicesMin), cfg.Policy.DevicesMax)))
	if err := rt.Listen(provisionerAddr, r.decided); err != nil {
		return nil, errors.Join(fmt.Errorf("autoscale: %w", err), r.Close(context.Background()))
	}
	// A policy restarted after a panic starts from the recommendation it
	// had made.
	spawn := func() actors.Actor {
		a, err := actors.NewAutoscaler(cfg.Policy, provisionerAddr, int(r.recommended.Load()))
		if err != nil {
			panic(err) // validated above
		}
		return a
	}
	if err := rt.Spawn(autoscalerAddr, spawn, nil); err != nil {
		return nil, errors.Join(fmt.Errorf("autoscale: %w", err), r.Close(context.Background()))
	}
	return r, nil
}

// decided is the provisioner's endpoint: it keeps the policy's decision.
func (r *Recommender) decided(msg actors.Message) {
	m, ok := msg.(actors.ScaleTo)
	if !ok {
		return
	}
	if old := r.recommended.Swap(int64(m.Devices)); int64(m.Devices) > old {
		r.up.Add(1)
	} else if int64(m.Devices) < old {
		r.down.Add(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.decisions) == DecisionsMax {
		r.decisions = append(r.decisions[:0], r.decisions[1:]...)
	}
	r.decisions = append(r.decisions, Decision{At: time.Now(), Devices: m.Devices, Reason: m.Reason})
}

// Run reads the signals every Every and hands them to the policy, until
// ctx ends. A reading that fails (the engine busy or closing) is skipped.
func (r *Recommender) Run(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sctx, cancel := context.WithTimeout(ctx, r.cfg.Every)
		sig, err := r.cfg.Signals(sctx)
		cancel()
		if err != nil {
			continue
		}
		r.readings.Add(1)
		r.rt.Send(autoscalerAddr, actors.ScaleSignals{Signals: sig})
	}
}

// Close stops the policy's runtime within ctx. Run must have returned.
func (r *Recommender) Close(ctx context.Context) error {
	if err := r.rt.Close(ctx); err != nil {
		return fmt.Errorf("autoscale: %w", err)
	}
	return nil
}

// DevicesRecommended is the policy's latest recommendation: the node's
// devices, within the policy's bounds, until its first decision.
func (r *Recommender) DevicesRecommended() int { return int(r.recommended.Load()) }

// DevicesCurrent is the devices the node runs.
func (r *Recommender) DevicesCurrent() int { return r.cfg.Devices }

// Decisions counts the policy's decisions up and down.
func (r *Recommender) Decisions() (up, down uint64) { return r.up.Load(), r.down.Load() }

// Readings counts the signals handed to the policy.
func (r *Recommender) Readings() uint64 { return r.readings.Load() }

// Latest returns the latest decisions, oldest first (at most DecisionsMax).
func (r *Recommender) Latest() []Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Decision(nil), r.decisions...)
}
