package record

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
)

// Entry is one line of a recording. Its JSON field names are the file
// format; sim.ReadReplay reads the same names.
type Entry struct {
	// ArrivalS is the arrival in seconds since the recording started, on
	// the engine clock (the clock deadlines and latencies are on).
	ArrivalS float64 `json:"arrival_s"`
	// Time is the arrival's wall-clock time, RFC 3339 with nanoseconds.
	Time      time.Time `json:"time"`
	Tenant    string    `json:"tenant"`
	Model     string    `json:"model"`
	Version   string    `json:"version,omitempty"`
	Params    string    `json:"params,omitempty"`
	Priority  int8      `json:"priority,omitempty"`
	TimeoutMs float64   `json:"timeout_ms,omitempty"`
	InputLen  int       `json:"input_len"`
	// Input is the input text, only with Config.Inputs.
	Input string `json:"input,omitempty"`
	// Outcome is the reply's outcome (completed, failed, rejected,
	// expired, cancelled), or "error" when the engine answered with an
	// error instead of a reply (the client went away, the engine closed).
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	Error   string `json:"error,omitempty"`
	// LatencyMs is the engine's time from arrival to reply; QueueMs
	// (arrival to dispatch) and ComputeMs (dispatch to done) split it for
	// requests that reached a device.
	LatencyMs float64 `json:"latency_ms"`
	QueueMs   float64 `json:"queue_ms,omitempty"`
	ComputeMs float64 `json:"compute_ms,omitempty"`
	BatchSize int     `json:"batch_size,omitempty"`
	Attempts  int     `json:"attempts,omitempty"`
}

// OutcomeError is Entry.Outcome for a request the engine answered with an
// error rather than a reply.
const OutcomeError = "error"

// BytesMaxDefault is the default bound on a recording: 1 GiB, about five
// million lines without inputs.
const BytesMaxDefault = 1 << 30

// lineMax bounds one line: a line longer than this (an input of more than
// about 1 MiB, with Inputs) is left out and counted.
const lineMax = 4 << 20

// Config configures a Recorder.
type Config struct {
	// Inputs records each request's input text. Off by default: the
	// inputs are the clients' data, and replay needs only their length.
	Inputs bool
	// BytesMax bounds the bytes written. The line that would cross it is
	// not written, nor any after it; one warning is logged. Zero means
	// BytesMaxDefault.
	BytesMax int64
	// Logger gets the warning when the bound is reached and when a write
	// fails. Nil: nothing is logged.
	Logger *slog.Logger
	// WallNow is the wall clock for Entry.Time; nil means time.Now.
	WallNow func() time.Time
}

// Recorder is an engine.FrontDoor that records every request it passes to
// the one it wraps. Its methods are safe for concurrent use.
type Recorder struct {
	next    engine.FrontDoor
	cfg     Config
	startAt time.Duration // the engine clock at the start

	mu      sync.Mutex
	w       *bufio.Writer
	closer  io.Closer
	written int64
	full    bool
	closed  bool
	err     error // the first write error; recording stops at it
	lines   int64
	skipped int64

	// submitted are the requests Submit passed on and the engine has not
	// answered yet, by id, so that one Cancel withdraws is recorded too
	// (its done is never called).
	submitMu  sync.Mutex
	submitted map[uint64]*submitted
}

// submitted is what Submit keeps of a request until its answer.
type submitted struct {
	req      actors.Request
	at       time.Duration
	wall     time.Time
	id       uint64
	answered bool
}

var _ engine.FrontDoor = (*Recorder)(nil)

// New returns a Recorder that passes requests to next and writes their
// lines to out, buffered. If out is an io.Closer, Close closes it.
func New(next engine.FrontDoor, out io.Writer, cfg Config) (*Recorder, error) {
	if next == nil || out == nil {
		return nil, errors.New("record: need a front door and a writer")
	}
	if cfg.BytesMax < 0 {
		return nil, fmt.Errorf("record: BytesMax %d: must not be negative", cfg.BytesMax)
	}
	if cfg.BytesMax == 0 {
		cfg.BytesMax = BytesMaxDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WallNow == nil {
		cfg.WallNow = time.Now
	}
	r := &Recorder{next: next, cfg: cfg, startAt: next.Now(), w: bufio.NewWriterSize(out, 64<<10), submitted: map[uint64]*submitted{}}
	if c, ok := out.(io.Closer); ok {
		r.closer = c
	}
	return r, nil
}

// Now is the wrapped front door's clock.
func (r *Recorder) Now() time.Duration { return r.next.Now() }

// Do passes req to the wrapped front door and records the outcome.
func (r *Recorder) Do(ctx context.Context, req actors.Request) (actors.Reply, error) {
	wall := r.cfg.WallNow()
	at := r.next.Now()
	rep, err := r.next.Do(ctx, req)
	r.write(r.entry(req, at, wall, rep, err))
	return rep, err
}

// Submit passes req to the wrapped front door and records the outcome
// when it comes, before done is called (on the goroutine that calls done:
// the line goes into the buffer under a mutex, and a full buffer is
// written to the file then).
func (r *Recorder) Submit(req actors.Request, done func(actors.Reply, error)) uint64 {
	p := &submitted{req: req, at: r.next.Now(), wall: r.cfg.WallNow()}
	id := r.next.Submit(req, func(rep actors.Reply, err error) {
		r.submitMu.Lock()
		p.answered = true
		if p.id != 0 {
			delete(r.submitted, p.id)
		}
		r.submitMu.Unlock()
		r.write(r.entry(p.req, p.at, p.wall, rep, err))
		done(rep, err)
	})
	r.submitMu.Lock()
	if !p.answered {
		p.id = id
		r.submitted[id] = p
	}
	r.submitMu.Unlock()
	return id
}

// errWithdrawn is what a recording says of a request Cancel withdrew: the
// caller stopped waiting, as a Do whose ctx was cancelled says.
var errWithdrawn = context.Canceled

// Cancel withdraws the request Submit returned id for (see
// engine.FrontDoor); a withdrawn request is recorded as an error, as Do
// records one whose ctx ended.
func (r *Recorder) Cancel(id uint64) bool {
	if !r.next.Cancel(id) {
		return false
	}
	r.submitMu.Lock()
	p := r.submitted[id]
	delete(r.submitted, id)
	r.submitMu.Unlock()
	if p != nil {
		r.write(r.entry(p.req, p.at, p.wall, actors.Reply{}, errWithdrawn))
	}
	return true
}

// entry builds the line of one request. at is the engine clock when the
// recorder saw the request; the reply's own Arrival, when there is one, is
// the engine's and wins.
func (r *Recorder) entry(req actors.Request, at time.Duration, wall time.Time, rep actors.Reply, err error) Entry {
	arrival := at
	if err == nil && rep.Arrival > 0 {
		wall = wall.Add(rep.Arrival - at)
		arrival = rep.Arrival
	}
	e := Entry{
		ArrivalS: max(arrival-r.startAt, 0).Seconds(),
		Time:     wall,
		Tenant:   req.Tenant,
		Model:    req.Model,
		Version:  req.Version,
		Params:   req.Params,
		Priority: req.Priority,
		InputLen: len(req.Input),
	}
	if req.Deadline > 0 {
		// The deadline is on the engine clock, set by the caller at about
		// the time the recorder read it.
		e.TimeoutMs = ms(max(req.Deadline-at, 0))
	}
	if r.cfg.Inputs {
		e.Input = req.Input
	}
	if err != nil {
		e.Outcome, e.Error = OutcomeError, err.Error()
		e.LatencyMs = ms(max(r.next.Now()-at, 0))
		return e
	}
	e.Outcome = rep.Outcome.String()
	if rep.Reason != actors.ReasonNone {
		e.Reason = rep.Reason.String()
	}
	e.Error = rep.Err
	if rep.Version != "" {
		e.Version = rep.Version
	}
	if rep.Done > 0 {
		e.LatencyMs = ms(rep.Done - rep.Arrival)
	} else {
		e.LatencyMs = ms(max(r.next.Now()-arrival, 0))
	}
	if rep.Dispatch > 0 {
		e.QueueMs = ms(rep.Dispatch - rep.Arrival)
		if rep.Done >= rep.Dispatch {
			e.ComputeMs = ms(rep.Done - rep.Dispatch)
		}
	}
	e.BatchSize, e.Attempts = rep.BatchSize, rep.Attempts
	return e
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// write appends one line, unless the bound or an earlier error stopped the
// recording.
func (r *Recorder) write(e Entry) {
	line, err := json.Marshal(e)
	if err != nil {
		// Entry holds strings and numbers only; a marshal error is a bug.
		panic(fmt.Sprintf("record: marshal: %v", err))
	}
	line = append(line, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed || r.err != nil || r.full:
		r.skipped++
		return
	case len(line) > lineMax:
		r.skipped++
		return
	case r.written+int64(len(line)) > r.cfg.BytesMax:
		r.full = true
		r.skipped++
		r.cfg.Logger.Warn("record: size bound reached; recording stopped", "bytes", r.written, "bound", r.cfg.BytesMax, "lines", r.lines)
		return
	}
	n, err := r.w.Write(line)
	r.written += int64(n)
	if err != nil {
		r.err = fmt.Errorf("record: write: %w", err)
		r.cfg.Logger.Warn("record: write failed; recording stopped", "err", err)
		return
	}
	r.lines++
}

// Stats are a recording's counts so far.
type Stats struct {
	// Lines and Bytes are what was written (or buffered for writing).
	Lines, Bytes int64
	// Skipped are the requests left out: past the bound, after a write
	// error or Close, or with a line longer than 4 MiB.
	Skipped int64
	// Full reports that the bound was reached.
	Full bool
}

// Stats returns the counts so far.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{Lines: r.lines, Bytes: r.written, Skipped: r.skipped, Full: r.full}
}

// Close flushes the buffered lines and closes the writer if it is an
// io.Closer. Requests still passing through afterwards are served and not
// recorded. It returns the first write error of the recording, if any.
// Closing twice is harmless.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	errs := []error{r.err}
	if r.err == nil {
		if err := r.w.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("record: flush: %w", err))
		}
	}
	if r.closer != nil {
		if err := r.closer.Close(); err != nil {
			errs = append(errs, fmt.Errorf("record: close: %w", err))
		}
	}
	return errors.Join(errs...)
}
