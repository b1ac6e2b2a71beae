package devicemodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/batchd/batchd/actors"
)

// FaultPlan says which device faults are switched on, as probabilities per
// batch.
//
// The batch-level outcomes are exclusive and drawn from one number, so each
// rate is exactly the probability of its outcome: a batch hangs with
// HangRate, else crashes with CrashRate, else fails whole with
// BatchErrorRate; their sum must not exceed 1. Slowness and item errors are
// drawn on their own and combine with the rest.
type FaultPlan struct {
	// CrashRate is the probability that the device crashes during a batch:
	// the batch ends at a uniform fraction of its latency with a device
	// fault, and no output is valid.
	CrashRate float64
	// HangRate is the probability that a batch hangs: it never completes;
	// only the device actor's watchdog notices.
	HangRate float64
	// SlowRate is the probability that a batch runs slow.
	SlowRate float64
	// SlowFactor multiplies the latency of a slow batch (a crash in a slow
	// batch happens within the slow latency). Must be at least 1 when
	// SlowRate is positive; 4 models a straggler beyond a watchdog at 3x.
	SlowFactor float64
	// BatchErrorRate is the probability that the whole batch fails with an
	// error at its full latency while the device stays usable.
	BatchErrorRate float64
	// ItemErrorRate is the probability that one item fails on its own; the
	// other items of the batch are good. Drawn per item, in batches that do
	// not fail as a whole.
	ItemErrorRate float64
	// PoisonPrefix marks poison inputs: a batch holding an input that starts
	// with it fails whole with an error, every time, at its full latency,
	// healed or not, so splitting the batch is the only way to serve the
	// other items. Empty switches poison off.
	PoisonPrefix string
	// HealAt ends the fault phase: only batches started before it can
	// crash, hang, run slow or fail at random (poison still fails). It lets
	// a run check safety under faults, then liveness once they stop. Zero
	// means the faults never heal.
	HealAt time.Duration
}

// Validate reports the first field that makes the plan unusable.
func (p FaultPlan) Validate() error {
	rates := [...]struct {
		name string
		v    float64
	}{
		{"CrashRate", p.CrashRate}, {"HangRate", p.HangRate}, {"SlowRate", p.SlowRate},
		{"BatchErrorRate", p.BatchErrorRate}, {"ItemErrorRate", p.ItemErrorRate},
	}
	for _, r := range rates {
		if !(r.v >= 0 && r.v <= 1) { // also catches NaN
			return fmt.Errorf("fault plan: %s %v: must be in [0, 1]", r.name, r.v)
		}
	}
	if sum := p.HangRate + p.CrashRate + p.BatchErrorRate; sum > 1 {
		return fmt.Errorf("fault plan: HangRate+CrashRate+BatchErrorRate %v: must not exceed 1", sum)
	}
	if p.SlowRate > 0 && !(p.SlowFactor >= 1 && !math.IsInf(p.SlowFactor, 1)) {
		return fmt.Errorf("fault plan: SlowFactor %v: must be finite and at least 1 when SlowRate is set", p.SlowFactor)
	}
	if p.HealAt < 0 {
		return fmt.Errorf("fault plan: HealAt %v: must not be negative", p.HealAt)
	}
	return nil
}

// Any reports whether any fault is switched on.
func (p FaultPlan) Any() bool {
	return p.CrashRate > 0 || p.HangRate > 0 || p.SlowRate > 0 || p.BatchErrorRate > 0 ||
		p.ItemErrorRate > 0 || p.PoisonPrefix != ""
}

// FaultKind is what a ScheduledFault does to its device.
type FaultKind uint8

const (
	// FaultCrash crashes the device in the middle of a batch: the batch
	// running at the fault's time ends then with a device fault; if the
	// device is idle then, the next batch it starts crashes halfway
	// through. The device actor restarts it with backoff and the batcher
	// re-queues the batch with attempt+1.
	FaultCrash FaultKind = iota + 1
	// FaultHang hangs the device: the batch running at the fault's time (or
	// the next one started) never completes, and only the device actor's
	// watchdog notices.
	FaultHang
	// FaultSlow multiplies by Factor the latency of every batch the device
	// starts in [At, At+For): a thermally throttled or noisy-neighbour GPU.
	FaultSlow
)

func (k FaultKind) String() string {
	switch k {
	case FaultCrash:
		return "crash"
	case FaultHang:
		return "hang"
	case FaultSlow:
		return "slow"
	}
	return "unknown"
}

// ScheduledFault is a fault at a given time on a given device, next to
// FaultPlan's faults at rates: the way to put a crash in the middle of a
// batch at a known moment and watch the recovery.
type ScheduledFault struct {
	// At is when the fault strikes, from the start of the run.
	At time.Duration
	// Device is the index of the device, from 0.
	Device int
	Kind   FaultKind
	// For and Factor are a FaultSlow's span and latency multiple.
	For    time.Duration
	Factor float64
}

// ScheduledFaultsLimit bounds a fault schedule.
const ScheduledFaultsLimit = 1024

// LatencySpreadLimit bounds a device's latency spread: at a σ of 2 the
// slowest of a thousand batches already runs hundreds of times its median.
const LatencySpreadLimit = 2

// spreadFactorMax caps one batch's latency multiple under a spread, so a
// draw far in the tail cannot stall a run for a simulated day.
const spreadFactorMax = 50

// ValidateSchedule checks a fault schedule against a run of the given
// devices whose faults strike before end (zero: no end).
func ValidateSchedule(s []ScheduledFault, devices int, end time.Duration) error {
	if len(s) > ScheduledFaultsLimit {
		return fmt.Errorf("%d scheduled faults: at most %d", len(s), ScheduledFaultsLimit)
	}
	for i, f := range s {
		switch {
		case f.At < 0 || (end > 0 && f.At >= end):
			return fmt.Errorf("FaultSchedule[%d]: At %v: need 0 <= At < Duration (%v)", i, f.At, end)
		case f.Device < 0 || f.Device >= devices:
			return fmt.Errorf("FaultSchedule[%d]: Device %d: need 0 to %d", i, f.Device, devices-1)
		case f.Kind < FaultCrash || f.Kind > FaultSlow:
			return fmt.Errorf("FaultSchedule[%d]: unknown kind %d", i, f.Kind)
		case f.Kind == FaultSlow && (f.For <= 0 || !(f.Factor >= 1) || math.IsInf(f.Factor, 1)):
			return fmt.Errorf("FaultSchedule[%d]: a slow fault needs For > 0 and a finite Factor >= 1", i)
		}
	}
	return nil
}

// FateKind is how a batch on an emulated device ends.
type FateKind uint8

const (
	// FateDone: outputs for every item but those Fate.ItemFail marks.
	FateDone FateKind = iota
	// FateHang: the batch never ends.
	FateHang
	// FateCrash: a device fault after Fate.Took.
	FateCrash
	// FateBatchError: an injected error for the whole batch.
	FateBatchError
	// FatePoison: a poison input failed the whole batch.
	FatePoison
)

// Fate is one batch's outcome on an emulated device, as Model.Draw
// decides it.
type Fate struct {
	Kind FateKind
	// Took is how long the batch runs until it ends (its outputs, its
	// error or its crash); zero when it hangs.
	Took time.Duration
	// Slow is set when the batch may run past its model's latency (a slow
	// batch, a scheduled slow fault, a spread draw above 1): the device
	// actor's watchdog may then restart the device before the batch ends.
	Slow bool
	// ItemFail marks, for a FateDone batch, the items that fail on their
	// own; nil when none can.
	ItemFail []bool
}

// Model is one emulated device: its cost model, its faults at rates
// (FaultPlan), its scheduled faults and its latency spread. Draw is pure: it
// takes the time and the device's random stream, so the simulator and the
// live backend run the same model, each on its own clock.
type Model struct {
	latency actors.LatencyModel
	faults  FaultPlan
	// schedule holds this device's scheduled faults sorted by time, and
	// fired marks the crashes and hangs that have struck.
	schedule []ScheduledFault
	fired    []bool
	// spread is the σ of the log-normal latency factor; 0: none.
	spread float64
}

// New returns a device with the given cost model and faults, or an error
// naming what is invalid. A model that costs nothing is allowed
// (benchmarks of a runtime's own overhead use it); a simulator, whose
// virtual time must move, asks actors.LatencyModel.Validate for more.
func New(latency actors.LatencyModel, faults FaultPlan) (*Model, error) {
	if latency.Base < 0 || latency.PerItem < 0 || latency.PerPaddedByte < 0 {
		return nil, fmt.Errorf("latency model: negative cost")
	}
	if len(latency.Table) > 0 {
		if err := latency.Validate(); err != nil {
			return nil, err
		}
	}
	if err := faults.Validate(); err != nil {
		return nil, err
	}
	return &Model{latency: latency, faults: faults}, nil
}

// SetSchedule gives the device the scheduled faults of its own (those whose
// Device is any other are ignored: the caller passes the run's whole
// schedule with the device's index). They strike whatever the FaultPlan
// says and whether or not it has healed, and they draw no random number, so
// a run without them draws exactly as before.
func (m *Model) SetSchedule(index int, all []ScheduledFault) {
	m.schedule = m.schedule[:0]
	for _, f := range all {
		if f.Device == index {
			m.schedule = append(m.schedule, f)
		}
	}
	slices.SortStableFunc(m.schedule, func(a, b ScheduledFault) int {
		return int(min(max(a.At-b.At, -1), 1))
	})
	m.fired = make([]bool, len(m.schedule))
}

// SetLatencySpread makes the device's batch latency vary: each batch's cost
// is multiplied by exp(σZ − σ²/2), Z standard normal, a log-normal factor
// of mean 1 (the cost model stays right on average, wrong on each batch),
// capped at 50; under a fan-out model each call's is, and the batch ends
// with its last call. σ of zero, the default, switches it off and draws nothing.
func (m *Model) SetLatencySpread(sigma float64) error {
	if !(sigma >= 0 && sigma <= LatencySpreadLimit) {
		return fmt.Errorf("latency spread %v: need 0 to %v", sigma, float64(LatencySpreadLimit))
	}
	m.spread = sigma
	return nil
}

// Draw decides the fate of a batch of inputs started at now.
//
// The random numbers are drawn in a fixed order and number per batch (batch
// outcome, slowness, crash point, then one per item when ItemErrorRate is
// set, then the spread's when set), whatever the outcome and whether healed
// or not, so a batch's fate depends only on the seed and how many batches
// ran before it.
func (m *Model) Draw(now time.Duration, rng *rand.Rand, inputs []string) Fate {
	n := len(inputs)
	uOutcome := rng.Float64()
	uSlow := rng.Float64()
	uCrashAt := 1 - rng.Float64() // (0, 1]: a crash takes some time
	f := m.faults
	faulty := f.HealAt == 0 || now < f.HealAt

	maxLen, poison := 0, false
	for _, in := range inputs {
		maxLen = max(maxLen, len(in))
		if f.PoisonPrefix != "" && strings.HasPrefix(in, f.PoisonPrefix) {
			poison = true
		}
	}
	latency := m.latency.Predict(n, maxLen)
	slow := faulty && uSlow < f.SlowRate
	if slow {
		latency = time.Duration(float64(latency) * f.SlowFactor)
	}
	var itemFail []bool
	if f.ItemErrorRate > 0 {
		itemFail = make([]bool, n)
		for i := range itemFail {
			itemFail[i] = rng.Float64() < f.ItemErrorRate
		}
	}
	// The scheduled faults and the spread come last and only when set, so
	// a run without them draws exactly the numbers it always drew.
	if m.spread > 0 && m.latency.Fanout() {
		// A fanned-out batch: each call varies on its own, and the batch
		// lasts until its last call ends.
		if span, want := m.fanoutSpan(rng, n), time.Duration(m.latency.Waves(n))*m.latency.FanoutCall; span != want {
			latency = max(latency+span-want, 1)
			slow = slow || span > want
		}
	} else if m.spread > 0 {
		if x := min(math.Exp(m.spread*rng.NormFloat64()-m.spread*m.spread/2), spreadFactorMax); x != 1 {
			latency = max(time.Duration(float64(latency)*x), 1)
			// A long draw may pass the watchdog, which restarts the
			// device before the batch ends: as with a slow run.
			slow = slow || x > 1
		}
	}
	var struck ScheduledFault
	var strikes bool
	if len(m.schedule) > 0 {
		if x := m.slowBy(now); x != 1 {
			latency = time.Duration(float64(latency) * x)
			slow = true
		}
		struck, strikes = m.strike(now, now+latency)
	}

	switch {
	case strikes && struck.Kind == FaultHang:
		return Fate{Kind: FateHang, Slow: slow}
	case strikes:
		// A crash mid-batch: at its time if the batch is running then,
		// else halfway through the batch it waited for.
		took := struck.At - now
		if took <= 0 {
			took = max(latency/2, 1)
		}
		return Fate{Kind: FateCrash, Took: took, Slow: slow}
	case poison:
		return Fate{Kind: FatePoison, Took: latency, Slow: slow}
	case faulty && uOutcome < f.HangRate:
		return Fate{Kind: FateHang, Slow: slow}
	case faulty && uOutcome < f.HangRate+f.CrashRate:
		return Fate{Kind: FateCrash, Took: time.Duration(uCrashAt * float64(latency)), Slow: slow}
	case faulty && uOutcome < f.HangRate+f.CrashRate+f.BatchErrorRate:
		return Fate{Kind: FateBatchError, Took: latency, Slow: slow}
	}
	if !faulty {
		itemFail = nil
	}
	return Fate{Kind: FateDone, Took: latency, Slow: slow, ItemFail: itemFail}
}

// fanoutSpan draws the latency of each of n single-item calls (the
// call's mean times the spread's log-normal factor, in input order) and
// returns when the last ends, each call starting on the first of the
// FanoutConcurrency slots to free up: a batch's span is set by its
// stragglers, not by its mean call.
func (m *Model) fanoutSpan(rng *rand.Rand, n int) time.Duration {
	if n == 0 {
		return 0
	}
	slots := make([]time.Duration, min(m.latency.FanoutConcurrency, n))
	for range n {
		x := min(math.Exp(m.spread*rng.NormFloat64()-m.spread*m.spread/2), spreadFactorMax)
		first := 0
		for j, end := range slots {
			if end < slots[first] {
				first = j
			}
		}
		slots[first] += max(time.Duration(float64(m.latency.FanoutCall)*x), 1)
	}
	return slices.Max(slots)
}

// slowBy returns the product of the factors of the slow faults whose span
// holds now.
func (m *Model) slowBy(now time.Duration) float64 {
	x := 1.0
	for _, s := range m.schedule {
		if s.Kind == FaultSlow && s.At <= now && now < s.At+s.For {
			x *= s.Factor
		}
	}
	return x
}

// strike returns the first crash or hang not yet fired that falls before
// the end of a batch running [now, end), marking it fired: a fault whose
// time has passed while the device was idle strikes the next batch.
func (m *Model) strike(now, end time.Duration) (ScheduledFault, bool) {
	for i, s := range m.schedule {
		if m.fired[i] || s.Kind == FaultSlow {
			continue
		}
		if s.At < end {
			m.fired[i] = true
			return s, true
		}
		break // sorted by At: the rest are later still
	}
	return ScheduledFault{}, false
}
