package workerproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/engine"
)

// Config is one device's worker process.
type Config struct {
	// Name names the device in logs and errors ("worker-0").
	Name string
	// Index is the device's index, from 0: the worker gets it in the
	// handshake and as $BATCHD_DEVICE_INDEX.
	Index int
	// Cmd is the program and its arguments; Cmd[0] is looked up in PATH
	// unless it holds a slash (then it is relative to Dir). Required.
	Cmd []string
	// Dir is the worker's working directory; "" is batchd's own.
	Dir string
	// Env is added to batchd's environment for the worker ("KEY=value").
	Env []string
	// BatchMax is the most inputs of one batch, told to the worker.
	BatchMax int
	// FrameMaxBytes bounds one frame either way: a batch batchd would send
	// past it fails as a batch error; a frame the worker announces past it
	// is a fault, refused before it is read.
	FrameMaxBytes int
	// StartTimeout bounds a start: from spawning the process to its
	// answer to the handshake (the model's loading included).
	StartTimeout time.Duration
	// StopTimeout is how long a stopping worker has to exit after its
	// stdin closes, before it is killed.
	StopTimeout time.Duration
	// RestartBackoff and RestartBackoffMax: a start after failures in a row
	// (faults and failed starts since the last good batch) waits
	// RestartBackoff, doubling per failure past the first, up to the max.
	// The first restart after a fault is at once.
	RestartBackoff    time.Duration
	RestartBackoffMax time.Duration
	// RestartsIdleMax bounds the restarts nobody asked for: after a fault,
	// or a death while idle, the worker restarts at once so that it is
	// warm when the device's next batch comes, but only while its
	// failures in a row number fewer than this; past it a start waits for
	// the next batch (which the device actor sends after its own backoff,
	// or after its quarantine).
	RestartsIdleMax int
	// StderrLineMax cuts the worker's stderr lines at this many bytes;
	// StderrLinesPerSecond bounds the lines logged per second (the rest are
	// counted).
	StderrLineMax        int
	StderrLinesPerSecond int
	// Log receives the worker's stderr and its starts and faults. Nil
	// discards them.
	Log *slog.Logger
}

// DefaultConfig returns the defaults of every field but Name, Index and
// Cmd.
func DefaultConfig() Config {
	return Config{
		BatchMax:             100,
		FrameMaxBytes:        64 << 20, // 100 inputs of the default 64 KiB limit, ten times over
		StartTimeout:         60 * time.Second,
		StopTimeout:          5 * time.Second,
		RestartBackoff:       100 * time.Millisecond,
		RestartBackoffMax:    5 * time.Second,
		RestartsIdleMax:      5,
		StderrLineMax:        4096,
		StderrLinesPerSecond: 100,
	}
}

// Limits of the configuration, so that a typo is an error.
const (
	// FrameMaxBytesMax is a frame's largest size the protocol allows (its
	// length is 32 bits; 1 GiB keeps a batch's buffers sane).
	FrameMaxBytesMax = 1 << 30
	// frameMaxBytesMin holds a handshake and a small batch.
	frameMaxBytesMin = 4096
)

// Validate reports the first field that makes the configuration unusable.
func (c Config) Validate() error {
	switch {
	case len(c.Cmd) == 0 || c.Cmd[0] == "":
		return fmt.Errorf("worker config: Cmd: the program to run is missing")
	case c.BatchMax < 1:
		return fmt.Errorf("worker config: BatchMax %d: must be at least 1", c.BatchMax)
	case c.FrameMaxBytes < frameMaxBytesMin || c.FrameMaxBytes > FrameMaxBytesMax:
		return fmt.Errorf("worker config: FrameMaxBytes %d: want %d to %d", c.FrameMaxBytes, frameMaxBytesMin, FrameMaxBytesMax)
	case c.StartTimeout <= 0 || c.StopTimeout <= 0:
		return fmt.Errorf("worker config: StartTimeout and StopTimeout must be positive")
	case c.RestartBackoff <= 0 || c.RestartBackoffMax < c.RestartBackoff:
		return fmt.Errorf("worker config: RestartBackoff %v, RestartBackoffMax %v: want 0 < backoff <= max", c.RestartBackoff, c.RestartBackoffMax)
	case c.RestartsIdleMax < 0:
		return fmt.Errorf("worker config: RestartsIdleMax %d: must not be negative", c.RestartsIdleMax)
	case c.StderrLineMax < 16 || c.StderrLinesPerSecond < 1:
		return fmt.Errorf("worker config: StderrLineMax %d (at least 16) and StderrLinesPerSecond %d (at least 1)", c.StderrLineMax, c.StderrLinesPerSecond)
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("worker config: Env %q: want KEY=value", kv)
		}
	}
	return nil
}

// Expand returns c with "{index}" in Cmd, Dir and the values of Env
// replaced by the device's index.
func (c Config) Expand() Config {
	idx := strconv.Itoa(c.Index)
	r := strings.NewReplacer("{index}", idx)
	c.Cmd = append([]string(nil), c.Cmd...)
	for i := range c.Cmd {
		c.Cmd[i] = r.Replace(c.Cmd[i])
	}
	c.Dir = r.Replace(c.Dir)
	c.Env = append([]string(nil), c.Env...)
	for i := range c.Env {
		c.Env[i] = r.Replace(c.Env[i])
	}
	return c
}

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("worker backend closed")

// Backend is one device whose batches run in a worker process
// (engine.Backend). It starts the process, runs one batch at a time over
// its pipes, and on a fault (the process exited, wrote what the protocol
// does not allow, or did not answer before Run's ctx ended) kills it,
// returns an error wrapping engine.ErrDeviceFault, and starts a new one.
type Backend struct {
	cfg Config
	log *slog.Logger

	// base ends with Close: it cancels starts in progress.
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	running atomic.Int32 // asserts one Run at a time

	mu       sync.Mutex
	cur      *process      // started and handshaken; nil when none
	busy     bool          // a Run holds cur
	starting chan struct{} // non-nil while a start is under way; closed at its end
	startErr error         // why the last start failed
	failures int           // faults and failed starts since the last good batch
	closed   bool

	starts, faults atomic.Int64
}

var _ engine.Backend = (*Backend)(nil)

// New returns the backend of cfg; no process runs until Start or the first
// Run.
func New(cfg Config) (*Backend, error) {
	cfg = cfg.Expand()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = "worker-" + strconv.Itoa(cfg.Index)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, cancel := context.WithCancel(context.Background())
	return &Backend{cfg: cfg, log: log, base: base, cancel: cancel}, nil
}

// Name is the device's name in logs.
func (b *Backend) Name() string { return b.cfg.Name }

// Starts is the number of processes started (handshakes done); Faults the
// number of faults.
func (b *Backend) Starts() int64 { return b.starts.Load() }
func (b *Backend) Faults() int64 { return b.faults.Load() }

// PID is the running worker's process id, 0 when none runs.
func (b *Backend) PID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur == nil {
		return 0
	}
	return b.cur.pid
}

// Start starts the worker and waits, within ctx and StartTimeout, for its
// handshake: a server calls it before it serves, so that a worker that
// cannot start stops the server's start, with the worker's last stderr
// lines in the error.
func (b *Backend) Start(ctx context.Context) error {
	_, err := b.acquire(ctx)
	if err == nil {
		b.mu.Lock()
		b.busy = false
		b.mu.Unlock()
	}
	return err
}

// Run implements engine.Backend.
func (b *Backend) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	if b.running.Add(1) != 1 {
		b.running.Add(-1)
		panic("batchd: worker backend: two batches at once on one device")
	}
	defer b.running.Add(-1)
	if n := len(inputs); n < 1 || n > b.cfg.BatchMax {
		return nil, nil, fmt.Errorf("worker %s: %d inputs, want 1 to %d: %w", b.cfg.Name, n, b.cfg.BatchMax, engine.ErrBatchSize)
	}
	p, err := b.acquire(ctx)
	if err != nil {
		b.faults.Add(1)
		return nil, nil, fmt.Errorf("worker %s: no worker: %w: %w", b.cfg.Name, engine.ErrDeviceFault, err)
	}
	outs, itemErrs, err, fault := p.run(ctx, b.cfg.FrameMaxBytes, model, version, inputs)
	if fault {
		b.faults.Add(1)
		p.abort()
		err = p.deathError(err)
		b.log.Warn(b.cfg.Name+": worker fault; restarting it", "device", b.cfg.Name, "pid", p.pid, "err", err)
		b.discard(p)
		return nil, nil, fmt.Errorf("worker %s (pid %d): %w: %w", b.cfg.Name, p.pid, engine.ErrDeviceFault, err)
	}
	b.mu.Lock()
	b.busy = false
	b.failures = 0
	b.mu.Unlock()
	if err != nil {
		return nil, nil, fmt.Errorf("worker %s: %w", b.cfg.Name, err)
	}
	return outs, itemErrs, nil
}

// acquire returns the running worker, marked busy, starting one if none
// runs and waiting (within ctx) for a start under way.
func (b *Backend) acquire(ctx context.Context) (*process, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	if b.cur != nil && !b.cur.alive() {
		b.discardLocked(b.cur, "exited while idle")
	}
	if b.cur != nil {
		b.busy = true
		p := b.cur
		b.mu.Unlock()
		return p, nil
	}
	started := b.startLocked()
	b.mu.Unlock()
	select {
	case <-started:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the worker to start: %w", ctx.Err())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return nil, ErrClosed
	case b.cur == nil:
		return nil, b.startErr
	}
	b.busy = true
	return b.cur, nil
}

// startLocked starts a worker in the background, unless one is starting,
// after the backoff its failures in a row call for, and returns the
// channel closed at the start's end.
func (b *Backend) startLocked() chan struct{} {
	if b.starting != nil {
		return b.starting
	}
	ch := make(chan struct{})
	b.starting = ch
	wait := time.Duration(0)
	if b.failures > 1 {
		wait = b.cfg.RestartBackoff
		// Doubles per failure; the loop ends at the max.
		for i := 2; i < b.failures && wait < b.cfg.RestartBackoffMax; i++ {
			wait *= 2
		}
		wait = min(wait, b.cfg.RestartBackoffMax)
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		p, err := b.start(wait)
		b.mu.Lock()
		b.starting = nil
		close(ch)
		switch {
		case err == nil && b.closed:
			// Close came during the start: it waits for this goroutine.
			b.mu.Unlock()
			p.stop(b.cfg.StopTimeout)
			return
		case err == nil:
			b.cur = p
			b.starts.Add(1)
			b.watch(p)
		default:
			b.startErr = err
			b.failures++
			b.log.Warn(b.cfg.Name+": worker did not start", "device", b.cfg.Name, "err", err, "failures", b.failures)
		}
		b.mu.Unlock()
	}()
	return ch
}

// start waits wait, then spawns the worker and runs its handshake, bounded
// by StartTimeout and Close.
func (b *Backend) start(wait time.Duration) (*process, error) {
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-b.base.Done():
			t.Stop()
			return nil, ErrClosed
		}
	}
	ctx, cancel := context.WithTimeout(b.base, b.cfg.StartTimeout)
	defer cancel()
	t0 := time.Now()
	p, err := spawn(ctx, &b.cfg, b.log)
	if err != nil {
		return nil, err
	}
	b.log.Info(b.cfg.Name+": worker ready", "device", b.cfg.Name, "pid", p.pid, "protocol", ProtocolVersion,
		"start_ms", time.Since(t0).Milliseconds(), "info", p.info)
	return p, nil
}

// watch notices a worker that dies while idle and restarts it at once
// (within RestartsIdleMax), so the device's next batch finds it warm.
func (b *Backend) watch(p *process) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		select {
		case <-p.exited:
		case <-b.base.Done():
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.cur == p && !b.busy && !b.closed {
			b.discardLocked(p, "exited while idle")
		}
	}()
}

// discard drops p after a fault: it is killed, and a new worker starts.
func (b *Backend) discard(p *process) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.busy = false
	if b.cur == p {
		b.discardLocked(p, "")
	}
}

func (b *Backend) discardLocked(p *process, why string) {
	p.abort()
	b.cur = nil
	b.failures++
	if why != "" {
		b.faults.Add(1)
		b.log.Warn(b.cfg.Name+": worker "+why+"; restarting it", "device", b.cfg.Name, "pid", p.pid,
			"status", exitStatusIfExited(p), "failures", b.failures)
	}
	if !b.closed && b.failures < b.cfg.RestartsIdleMax {
		b.startLocked()
	}
}

func exitStatusIfExited(p *process) string {
	select {
	case <-p.exited:
		return exitStatus(p.waitErr)
	default:
		return "running"
	}
}

// Close stops the worker (its stdin closes; past StopTimeout it is
// killed) and every start under way, and waits for them. Run after Close
// returns ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	p := b.cur
	b.cur = nil
	b.mu.Unlock()
	b.cancel()
	if p != nil {
		p.stop(b.cfg.StopTimeout)
	}
	b.wg.Wait()
	return nil
}
