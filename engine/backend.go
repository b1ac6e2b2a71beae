package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/devicemodel"
)

// Backend runs one batch on one device. It is what a device actor's jobs
// (actors.Context.Exec) run through; a runtime adapter calls it from the
// device's own worker goroutine, one batch at a time.
//
// Run returns one output per input, or fails: itemErrs is nil or holds one
// entry per input (non-nil where that item failed on its own; the others'
// outputs are good); err non-nil means the whole batch failed, and wrapping
// ErrDeviceFault says the device itself failed and must restart. Run must
// return soon after ctx is done: that is how a hung batch is abandoned.
// Run must not panic: a panic is a bug and takes the process down, like a
// panic on any goroutine.
type Backend interface {
	Run(ctx context.Context, model, version string, inputs []string) (outputs []string, itemErrs []error, err error)
}

var (
	// ErrDeviceFault marks a batch error that means the device itself failed
	// (crashed, lost its context): no output is valid and the device actor
	// restarts it. Backends wrap it.
	ErrDeviceFault = errors.New("device fault")
	// ErrBatchSize is returned for a batch of no inputs or more than the
	// backend takes.
	ErrBatchSize = errors.New("batch size out of range")
	// ErrItem is the per-item error of the emulated backend's injected item
	// faults.
	ErrItem = errors.New("emulated backend: injected item error")
	// ErrBatch is the whole-batch error of the emulated backend's injected
	// batch faults and poison inputs.
	ErrBatch = errors.New("emulated backend: injected batch error")
)

// EmulatedConfig configures an Emulated backend.
type EmulatedConfig struct {
	// Latency is the time a batch takes: Latency.Predict(n, longest input).
	// Default: the seeds' fixed 100 ms. The zero model costs nothing, which
	// benchmarks of the engine's own overhead use.
	Latency actors.LatencyModel
	// BatchMax is the most inputs one batch may hold; more is an error
	// (ErrBatchSize). Default 100, the seeds' batchstring.
	BatchMax int
	// FaultPlan is the faults at rates, the simulator's own model (see
	// devicemodel.FaultPlan): a hang blocks Run until its ctx is done, a crash
	// returns an error wrapping ErrDeviceFault part way through the batch,
	// a batch error or a poison input fails the batch with ErrBatch at its
	// full latency, an item error fails one item with ErrItem, a slow batch
	// takes SlowFactor times its latency; HealAt, from NewEmulated, ends
	// all but poison.
	devicemodel.FaultPlan
	// Schedule is the run's scheduled faults (crash, hang, slow at given
	// times from NewEmulated); this device takes those for its Index.
	Schedule []devicemodel.ScheduledFault
	// Index is the device's index in the engine, from 0, for Schedule.
	Index int
	// LatencySpread is the σ of a log-normal factor on each batch's
	// latency (mean 1; see devicemodel.Model.SetLatencySpread); 0: none.
	LatencySpread float64
	// Seed seeds the backend's own random stream, from which its faults are
	// drawn.
	Seed uint64
}

// DefaultEmulatedConfig returns the seeds' batchstring: 1 to 100 inputs at a
// fixed 100 ms, no faults.
func DefaultEmulatedConfig() EmulatedConfig {
	return EmulatedConfig{
		Latency:  actors.FixedLatency(100 * time.Millisecond),
		BatchMax: 100,
	}
}

// Validate reports the first field that makes the configuration unusable.
func (c EmulatedConfig) Validate() error {
	_, err := c.model()
	return err
}

// model is the device model the configuration describes.
func (c EmulatedConfig) model() (*devicemodel.Model, error) {
	if c.BatchMax < 1 {
		return nil, fmt.Errorf("emulated config: BatchMax %d: must be at least 1", c.BatchMax)
	}
	m, err := devicemodel.New(c.Latency, c.FaultPlan)
	if err != nil {
		return nil, fmt.Errorf("emulated config: %w", err)
	}
	if err := m.SetLatencySpread(c.LatencySpread); err != nil {
		return nil, fmt.Errorf("emulated config: %w", err)
	}
	if err := devicemodel.ValidateSchedule(c.Schedule, math.MaxInt, 0); err != nil {
		return nil, fmt.Errorf("emulated config: %w", err)
	}
	m.SetSchedule(c.Index, c.Schedule)
	return m, nil
}

// Emulated is the seeds' batchstring on one emulated GPU: a batch of 1 to
// BatchMax inputs costs the configured latency, its faults are drawn from
// the simulator's device model (devicemodel.Model) on the wall clock since
// NewEmulated, and each output is
// actors.EmulatedOutput(model, version, input), so a reply carrying another
// request's output, or the right input run on the wrong version, is
// detected. It runs one batch at a time, and asserts it: a second Run while
// one is in flight panics, since it means two workers drive one device.
type Emulated struct {
	cfg   EmulatedConfig
	start time.Time // the device's time zero, for HealAt and Schedule

	running atomic.Int32

	// The device goroutine that calls Run changes when a worker is replaced,
	// so the model and its random stream are guarded.
	mu    sync.Mutex
	model *devicemodel.Model
	rng   *rand.Rand

	batches atomic.Int64
}

var _ Backend = (*Emulated)(nil)

// NewEmulated returns an emulated device, or an error naming the bad
// setting.
func NewEmulated(cfg EmulatedConfig) (*Emulated, error) {
	m, err := cfg.model()
	if err != nil {
		return nil, err
	}
	return &Emulated{cfg: cfg, start: time.Now(), model: m, rng: rand.New(rand.NewPCG(cfg.Seed, 0x62617463686465))}, nil
}

// Batches is the number of batches Run has started.
func (e *Emulated) Batches() int64 { return e.batches.Load() }

// Run implements Backend.
func (e *Emulated) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	if e.running.Add(1) != 1 {
		e.running.Add(-1)
		panic("batchd: emulated backend: two batches at once on one device")
	}
	defer e.running.Add(-1)

	n := len(inputs)
	if n < 1 || n > e.cfg.BatchMax {
		return nil, nil, fmt.Errorf("emulated backend: %d inputs, want 1 to %d: %w", n, e.cfg.BatchMax, ErrBatchSize)
	}
	e.batches.Add(1)
	e.mu.Lock()
	fate := e.model.Draw(time.Since(e.start), e.rng, inputs)
	e.mu.Unlock()
	switch fate.Kind {
	case devicemodel.FateHang:
		<-ctx.Done()
		return nil, nil, fmt.Errorf("emulated backend: hung: %w", ctx.Err())
	case devicemodel.FateCrash:
		if err := sleep(ctx, fate.Took); err != nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("emulated backend: injected crash: %w", ErrDeviceFault)
	case devicemodel.FatePoison:
		if err := sleep(ctx, fate.Took); err != nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("emulated backend: poison input: %w", ErrBatch)
	case devicemodel.FateBatchError:
		if err := sleep(ctx, fate.Took); err != nil {
			return nil, nil, err
		}
		return nil, nil, ErrBatch
	}
	if err := sleep(ctx, fate.Took); err != nil {
		return nil, nil, err
	}
	outputs := make([]string, n)
	var itemErrs []error
	for i, in := range inputs {
		if fate.ItemFail != nil && fate.ItemFail[i] {
			if itemErrs == nil {
				itemErrs = make([]error, n)
			}
			itemErrs[i] = ErrItem
			continue
		}
		outputs[i] = actors.EmulatedOutput(model, version, in)
	}
	return outputs, itemErrs, nil
}

// sleep waits d, or until ctx is done (see preciseUntil: on a Go timer alone
// every emulated 100 ms batch took 100.4-100.7 ms, a device that much slower
// than its latency model and the live engine that much behind the
// simulator).
func sleep(ctx context.Context, d time.Duration) error {
	err := ctx.Err()
	if d > 0 {
		err = preciseUntil(ctx, time.Now().Add(d))
	}
	if err != nil {
		return fmt.Errorf("emulated backend: abandoned: %w", err)
	}
	return nil
}

// boundedBackend gives every batch a context that ends after Multiple times
// its predicted latency. A device actor's watchdog abandons a run long
// before (at its WatchdogMultiple, 3 by default), but the actor cannot tell
// the worker that is stuck in the call; without this bound a backend call
// that hangs would hold the worker until the device's next job or the
// engine's shutdown. A run cut off by the bound is reported as a device
// fault by the runtime.
type boundedBackend struct {
	b        Backend
	latency  actors.LatencyModel
	multiple int
	floor    time.Duration
}

func (b boundedBackend) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	longest := 0
	for _, in := range inputs {
		longest = max(longest, len(in))
	}
	limit := max(time.Duration(b.multiple)*b.latency.Predict(len(inputs), longest), b.floor)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	return b.b.Run(ctx, model, version, inputs)
}
