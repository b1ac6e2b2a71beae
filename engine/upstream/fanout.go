package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/batchd/batchd/engine"
)

// The body forms of a single call.
const (
	// BodyRaw POSTs the input's bytes; the answer's body is the output.
	BodyRaw = "raw"
	// BodyJSON POSTs {"input": "..."}; the answer is {"output": "..."}.
	BodyJSON = "json"
)

// FanoutConfig is an upstream that takes one input per call.
type FanoutConfig struct {
	Conn
	// Body is BodyRaw or BodyJSON. Conn.URL is a template: "{model}" and
	// "{version}" in it become the batch's model and version.
	Body string
	// Concurrency bounds the calls in flight to the upstream, over all of
	// its devices together.
	Concurrency int
	// Timeout bounds one call (one attempt).
	Timeout time.Duration
	// Attempts bounds the tries of one input (1: no retry). Only a
	// failure the upstream marks retryable is tried again: 429, 503, a
	// refused connection.
	Attempts int
	// Backoff is the first retry's most wait, doubling per retry up to
	// BackoffMax; each wait is drawn uniformly below it (full jitter). A
	// Retry-After the upstream sends raises it, up to BackoffMax.
	Backoff    time.Duration
	BackoffMax time.Duration
	// BatchMax is the most inputs of one batch.
	BatchMax int
	// ResponseMaxBytes bounds one answer's body.
	ResponseMaxBytes int64
}

// DefaultFanoutConfig returns the defaults of every field but URL, Token
// and CAFile.
func DefaultFanoutConfig() FanoutConfig {
	return FanoutConfig{
		Conn:             Conn{ConnsMax: 16, DialTimeout: 5 * time.Second},
		Body:             BodyRaw,
		Concurrency:      16,
		Timeout:          10 * time.Second,
		Attempts:         3,
		Backoff:          50 * time.Millisecond,
		BackoffMax:       2 * time.Second,
		BatchMax:         100,
		ResponseMaxBytes: 1 << 20,
	}
}

// Validate reports the first field that makes the configuration unusable.
func (c FanoutConfig) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("fanout config: URL is missing")
	case c.Body != BodyRaw && c.Body != BodyJSON:
		return fmt.Errorf("fanout config: Body %q: want %q or %q", c.Body, BodyRaw, BodyJSON)
	case c.Concurrency < 1:
		return fmt.Errorf("fanout config: Concurrency %d: must be at least 1", c.Concurrency)
	case c.Timeout <= 0:
		return errors.New("fanout config: Timeout must be positive")
	case c.Attempts < 1:
		return fmt.Errorf("fanout config: Attempts %d: must be at least 1", c.Attempts)
	case c.Backoff <= 0 || c.BackoffMax < c.Backoff:
		return fmt.Errorf("fanout config: Backoff %v, BackoffMax %v: want 0 < backoff <= max", c.Backoff, c.BackoffMax)
	case c.BatchMax < 1:
		return fmt.Errorf("fanout config: BatchMax %d: must be at least 1", c.BatchMax)
	case c.ResponseMaxBytes < 1:
		return fmt.Errorf("fanout config: ResponseMaxBytes %d: must be at least 1", c.ResponseMaxBytes)
	}
	return nil
}

// Fanout is one single-item upstream: its connection pool and the
// concurrency limit its devices (FanoutDevice) share.
type Fanout struct {
	cfg    FanoutConfig
	tr     *http.Transport
	client *http.Client
	sem    chan struct{} // a slot per call in flight

	calls, retries atomic.Int64
}

// NewFanout returns the upstream of cfg.
func NewFanout(cfg FanoutConfig) (*Fanout, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ConnsMax = max(cfg.ConnsMax, cfg.Concurrency)
	// The template's placeholders are not a URL's: check it filled.
	probe := cfg.Conn
	probe.URL = fillURL(cfg.URL, "m", "v")
	tr, err := newTransport(probe)
	if err != nil {
		return nil, fmt.Errorf("fanout config: %w", err)
	}
	return &Fanout{cfg: cfg, tr: tr, client: &http.Client{Transport: tr}, sem: make(chan struct{}, cfg.Concurrency)}, nil
}

// Calls is the number of calls made (retries included); Retries the
// retries among them.
func (f *Fanout) Calls() int64   { return f.calls.Load() }
func (f *Fanout) Retries() int64 { return f.retries.Load() }

// Close drops the pool's idle connections.
func (f *Fanout) Close() { f.tr.CloseIdleConnections() }

// Device returns device i's backend on the upstream.
func (f *Fanout) Device(i int) *FanoutDevice {
	return &FanoutDevice{f: f, name: "fanout-" + strconv.Itoa(i)}
}

func fillURL(tmpl, model, version string) string {
	return strings.NewReplacer("{model}", url.PathEscape(model), "{version}", url.PathEscape(version)).Replace(tmpl)
}

// FanoutDevice is one device on a single-item upstream (engine.Backend).
type FanoutDevice struct {
	f       *Fanout
	name    string
	running atomic.Int32
}

var _ engine.Backend = (*FanoutDevice)(nil)

// Run implements engine.Backend: one call per input, at most Concurrency
// of the upstream's in flight, each retried within Attempts. An input that
// fails fails alone; the batch is a device fault only when its ctx ended
// first (the engine's bound on the batch) or when every input failed
// without reaching the upstream (nothing answers there).
func (d *FanoutDevice) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	if d.running.Add(1) != 1 {
		d.running.Add(-1)
		panic("batchd: fanout backend: two batches at once on one device")
	}
	defer d.running.Add(-1)
	f := d.f
	n := len(inputs)
	if n < 1 || n > f.cfg.BatchMax {
		return nil, nil, fmt.Errorf("%s: %d inputs, want 1 to %d: %w", d.name, n, f.cfg.BatchMax, engine.ErrBatchSize)
	}
	target := fillURL(f.cfg.URL, model, version)
	outs := make([]string, n)
	errs := make([]error, n)
	var unreached atomic.Int32
	var wg sync.WaitGroup
	for i, in := range inputs {
		wg.Go(func() {
			var reached bool
			outs[i], reached, errs[i] = f.item(ctx, target, in)
			if !reached {
				unreached.Add(1)
			}
		})
	}
	wg.Wait()
	failed := false
	for _, e := range errs {
		failed = failed || e != nil
	}
	if err := ctx.Err(); err != nil && failed {
		return nil, nil, fmt.Errorf("%s: %w: the batch's time ran out: %w", d.name, engine.ErrDeviceFault, err)
	}
	if int(unreached.Load()) == n {
		return nil, nil, fmt.Errorf("%s: %w: no input reached %s: %w", d.name, engine.ErrDeviceFault, target, errs[0])
	}
	if !failed {
		errs = nil
	}
	return outs, errs, nil
}

// item runs one input, retrying within Attempts, and says whether any
// try reached the upstream (got an HTTP answer).
func (f *Fanout) item(ctx context.Context, target, input string) (string, bool, error) {
	if f.cfg.Body == BodyJSON && !utf8.ValidString(input) {
		return "", true, errors.New("input is not UTF-8: the upstream is spoken to in JSON (body: raw sends bytes)")
	}
	reached := false
	wait := f.cfg.Backoff
	for attempt := 1; ; attempt++ {
		out, retryAfter, err := f.call(ctx, target, input)
		var se *StatusError
		if err == nil || errors.As(err, &se) {
			reached = true
		}
		if err == nil || !retryable(err) || attempt >= f.cfg.Attempts || ctx.Err() != nil {
			return out, reached, err
		}
		f.retries.Add(1)
		d := time.Duration(rand.Int64N(int64(wait)) + 1)
		d = max(d, min(retryAfter, f.cfg.BackoffMax))
		wait = min(2*wait, f.cfg.BackoffMax)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", reached, fmt.Errorf("%w (retrying after: %w)", ctx.Err(), err)
		}
	}
}

// StatusError is a call's answer other than 200.
type StatusError struct {
	Code int
	Msg  string
}

func (e *StatusError) Error() string {
	return "upstream answered " + strconv.Itoa(e.Code) + " " + http.StatusText(e.Code) + ": " + e.Msg
}

// retryable reports whether the upstream marked err worth a retry: 429 and
// 503 say "later", a refused connection never reached it.
func retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code == http.StatusTooManyRequests || se.Code == http.StatusServiceUnavailable
	}
	return refused(err)
}

// call makes one call, within a slot of the concurrency limit and
// Timeout, and returns the output, or the error and any Retry-After.
func (f *Fanout) call(ctx context.Context, target, input string) (string, time.Duration, error) {
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return "", 0, ctx.Err()
	}
	defer func() { <-f.sem }()
	f.calls.Add(1)
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	body := []byte(input)
	ctype := "application/octet-stream"
	if f.cfg.Body == BodyJSON {
		b, err := json.Marshal(struct {
			Input string `json:"input"`
		}{input})
		if err != nil {
			return "", 0, err
		}
		body, ctype = b, "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", ctype)
	replayable(req)
	if f.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.cfg.Token)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	rb, err := readBounded(resp.Body, f.cfg.ResponseMaxBytes)
	if err != nil {
		return "", 0, err
	}
	if resp.StatusCode != http.StatusOK {
		var ra time.Duration
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			ra = time.Duration(s) * time.Second
		}
		return "", ra, &StatusError{Code: resp.StatusCode, Msg: snippet(rb)}
	}
	if f.cfg.Body == BodyRaw {
		return string(rb), 0, nil
	}
	var r struct {
		Output *string `json:"output"`
	}
	if err := json.Unmarshal(rb, &r); err != nil || r.Output == nil {
		return "", 0, fmt.Errorf("answer %q: want {\"output\": \"...\"}", snippet(rb))
	}
	return *r.Output, 0, nil
}
