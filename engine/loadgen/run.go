package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/valyala/fasthttp"
)

// responseMaxBytes bounds how much of a response body is read.
const responseMaxBytes = 1 << 20

// generator is one run.
type generator struct {
	cfg      Config
	conns    *conns
	endpoint string
	// The request body is prefix + input + suffix.
	prefix, suffix []byte

	start, measureFrom, end time.Time

	seq atomic.Uint64
	rec *recorder
	// grpc, when Config.GRPC is set, sends the load over gRPC instead.
	grpc *grpcLoad
}

// Run sends the load cfg describes and returns its report. Sending stops at
// cfg.Duration or when ctx ends; requests in flight then are still awaited,
// up to cfg.Timeout. Every goroutine Run starts has ended when it returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg, err := fitOpenFiles(cfg, openFilesMax())
	if err != nil {
		return nil, err
	}
	g, err := newGenerator(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.GRPC != "" {
		if g.grpc, err = newGRPCLoad(cfg); err != nil {
			return nil, err
		}
		defer g.grpc.close()
	}

	idle, err := g.holdIdle(cfg.IdleConns)
	defer func() {
		for _, c := range idle {
			c.close()
		}
	}()
	if err != nil {
		return nil, err
	}

	cpu0 := selfCPU()
	g.start = time.Now()
	g.measureFrom = g.start.Add(cfg.Warmup)
	g.end = g.start.Add(cfg.Duration)
	g.rec = newRecorder(cfg, g.start, g.measureFrom, g.end)

	// Answers are awaited after the sending ends, a Ctrl-C (ctx)
	// included; the run is cut short only after the grace of one Timeout
	// (and graceSlack).
	stopRSS := g.sampleRSS()

	var wg sync.WaitGroup
	if cfg.Connections > 0 {
		g.closedLoop(ctx, &wg)
	} else {
		g.openLoop(ctx, &wg)
	}
	sendingEnded := time.Now()
	if ctx.Err() == nil {
		// Sending ran its course: the measured window is the configured
		// one, though the open loop returns at its last due time, a little
		// before the end (which overstated the offered rate by up to a gap).
		sendingEnded = g.end
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	grace := time.NewTimer(cfg.Timeout + graceSlack)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		g.conns.cutAll()
		<-done
	}
	stopRSS()
	rep := g.rec.report(sendingEnded, time.Now())
	rep.setCPU((selfCPU() - cpu0).Seconds(), time.Since(g.start).Seconds(), int64(g.seq.Load()), runtime.NumCPU())
	rep.ConnectionsOpened = g.conns.dials.Load() - int64(len(idle))
	rep.IdleConns = len(idle)
	return rep, nil
}

// request makes req the infer request of input.
func (g *generator) request(req *fasthttp.Request, input string) {
	req.SetRequestURI(g.endpoint)
	req.Header.SetMethod(http.MethodPost)
	req.Header.SetContentType("application/json")
	if g.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+g.cfg.APIKey)
	}
	req.AppendBody(g.prefix)
	req.AppendBodyString(input)
	req.AppendBody(g.suffix)
}

// holdIdle opens n kept-alive connections and sends one request on each
// (Config.IdleConns), and returns them, open and idle.
func (g *generator) holdIdle(n int) ([]*conn, error) {
	var held []*conn
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	for i := range n {
		req.Reset()
		g.request(req, makeInput(uint64(i), g.cfg.InputLen))
		c := g.conns.open()
		held = append(held, c)
		if _, err := c.exchange(req, resp, time.Now().Add(g.cfg.Timeout)); err != nil {
			return held, fmt.Errorf("load: idle connection %d of %d: %w", i+1, n, err)
		}
		if resp.StatusCode() != http.StatusOK || c.c == nil {
			return held, fmt.Errorf("load: idle connection %d of %d: status %d (closed %v)", i+1, n, resp.StatusCode(), c.c == nil)
		}
		// Idle from now on: no deadline for the run to trip on.
		if err := c.arm(time.Time{}); err != nil {
			return held, fmt.Errorf("load: idle connection %d of %d: %w", i+1, n, err)
		}
	}
	return held, nil
}

// graceSlack is how much longer than one Timeout the run waits for the
// answers once sending has ended: a request handed out at the end leaves a
// little later (a worker must wake), and its own Timeout, not the run's
// cutoff, should end it. Without it, on a busy machine, the last request
// of a run against a server that never answers was counted cancelled
// rather than timed out.
const graceSlack = 250 * time.Millisecond

func newGenerator(cfg Config) (*generator, error) {
	base, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("load: URL: %w", err)
	}
	endpoint := base.JoinPath("v1", "models", cfg.Model, "infer").String()
	host := base.Host
	if base.Port() == "" {
		host = net.JoinHostPort(base.Hostname(), map[string]string{"http": "80", "https": "443"}[base.Scheme])
	}
	var tlsConf *tls.Config
	if base.Scheme == "https" {
		tlsConf = &tls.Config{ServerName: base.Hostname()}
	}
	suffix := []byte(`"`)
	if cfg.Version != "" {
		v, _ := json.Marshal(cfg.Version)
		suffix = append(append(suffix, `,"version":`...), v...)
	}
	if cfg.TimeoutMs > 0 {
		suffix = append(append(suffix, `,"timeout_ms":`...), strconv.Itoa(cfg.TimeoutMs)...)
	}
	suffix = append(suffix, '}')
	return &generator{
		cfg:      cfg,
		conns:    newConns(host, tlsConf),
		endpoint: endpoint,
		prefix:   []byte(`{"input":"`),
		suffix:   suffix,
	}, nil
}

// openLoop sends requests at their intended times until the end or ctx.
// Workers (at most InFlightMax) are started as the load needs them and take
// intended times from a bounded backlog; a time due when the backlog is
// full is dropped and counted. It returns when sending has stopped; wg
// tracks the workers still answering.
//
// A worker connects before it takes a time, and a time is taken by the
// first worker free, old or new: the pool of a keep-alive client such as
// net/http's Transport, which dials when no connection is idle but sends on
// whichever is ready first. A new worker is started only when the idle and
// the connecting ones together are fewer than the times waiting. Before
// (a worker took its time first and then dialled), each time due while
// every worker was busy waited for a new connection, its dial counted in
// its trip. Neither way stops a generator whose cores are too busy to read
// its answers in time from growing toward InFlightMax: its workers stay
// busy, so it starts more (RESULTS.md, the open loop's tail).
func (g *generator) openLoop(ctx context.Context, wg *sync.WaitGroup) {
	cfg := g.cfg
	backlog := int(min(float64(backlogMax), max(1024, cfg.Rate*cfg.Duration.Seconds()+1)))
	if cfg.backlog > 0 {
		backlog = cfg.backlog
	}
	due := make(chan time.Time, backlog)
	// idle workers wait for a time; connecting ones will soon.
	var idle, connecting atomic.Int64
	workers := 0
	startWorker := func() {
		wg.Add(1)
		connecting.Add(1)
		go func() {
			defer wg.Done()
			c := g.conns.open()
			defer c.close()
			// A failed dial is not lost: the exchange dials again and
			// records its error against the request. Over gRPC the
			// load's own connections carry it, and c is not used.
			if g.grpc == nil {
				_ = c.dial()
			}
			connecting.Add(-1)
			for {
				idle.Add(1)
				t, ok := <-due
				idle.Add(-1)
				if !ok {
					return
				}
				g.one(c, t)
			}
		}()
	}
	defer close(due)

	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6c6f6164))
	mean := float64(time.Second) / cfg.Rate
	gap := func() time.Duration {
		if cfg.Arrival == Fixed {
			return time.Duration(mean)
		}
		return time.Duration(rng.ExpFloat64() * mean)
	}
	// Fixed arrivals are placed by index, so rounding does not drift.
	next, i := g.start, int64(0)
	advance := func() {
		i++
		if cfg.Arrival == Fixed {
			next = g.start.Add(time.Duration(float64(i) * mean))
			return
		}
		next = next.Add(gap())
	}
	if cfg.Arrival == Poisson {
		next = next.Add(gap())
	}
	for next.Before(g.end) {
		// Everything due is handed out at once: a send that is late all
		// the same (a worker must wake) counts its latency from its
		// intended time.
		now := time.Now()
		for !next.After(now) && next.Before(g.end) {
			if idle.Load()+connecting.Load() <= int64(len(due)) && workers < cfg.InFlightMax {
				startWorker()
				workers++
			}
			select {
			case due <- next:
			default:
				g.rec.drop(next)
			}
			advance()
		}
		if !next.Before(g.end) {
			return
		}
		// Not a Go timer: those wake up to a millisecond late on Linux,
		// and every request would carry that lag in its latency.
		if SleepUntil(ctx, next) != nil {
			return
		}
	}
}

// closedLoop runs Connections senders, each sending its next request as
// soon as the last is answered, until the end or ctx.
func (g *generator) closedLoop(ctx context.Context, wg *sync.WaitGroup) {
	for range g.cfg.Connections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := g.conns.open()
			defer c.close()
			for ctx.Err() == nil {
				now := time.Now()
				if !now.Before(g.end) {
					return
				}
				g.one(c, now)
			}
		}()
	}
	select {
	case <-time.After(time.Until(g.end)):
	case <-ctx.Done():
	}
}

// one sends one request intended for time intended on c, and records it.
func (g *generator) one(c *conn, intended time.Time) {
	if g.grpc != nil {
		g.oneGRPC(intended)
		return
	}
	n := g.seq.Add(1)
	input := makeInput(n, g.cfg.InputLen)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	g.request(req, input)
	r := result{intended: intended, sent: time.Now()}
	arrived, err := c.exchange(req, resp, r.sent.Add(g.cfg.Timeout))
	r.done, r.arrived = time.Now(), arrived
	if err != nil {
		r.errClass, r.err = classify(err), err
		g.rec.record(r)
		return
	}
	r.status = resp.StatusCode()
	switch {
	case r.status != http.StatusOK:
	case g.cfg.Check:
		r.wrong, r.server = g.checkOutput(resp.Body(), input)
	case g.cfg.SlowOver > 0:
		// Outputs not checked (a real model's), but the split is asked
		// for: it needs the server's own timeline.
		r.server = serverTimesOf(resp.Body())
	}
	g.rec.record(r)
}

// serverTimes is what a 200 says of its own timeline, in milliseconds.
type serverTimes struct {
	LatencyMs float64 `json:"latency_ms"`
	QueueMs   float64 `json:"queue_ms"`
	ComputeMs float64 `json:"compute_ms"`
	BatchSize int     `json:"batch_size"`
}

// serverTimesOf is the timeline a 200's body reports; zero when it has
// none (the split then leaves the request out).
func serverTimesOf(body []byte) serverTimes {
	var t serverTimes
	if json.Unmarshal(body, &t) != nil {
		return serverTimes{}
	}
	return t
}

// checkOutput reports whether a 200's body does not carry the emulated
// backend's output for this input on the model and version it says served
// it, and returns the timeline the body reports.
func (g *generator) checkOutput(body []byte, input string) (wrong bool, t serverTimes) {
	var out struct {
		Output  string `json:"output"`
		Model   string `json:"model"`
		Version string `json:"version"`
		serverTimes
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return true, serverTimes{}
	}
	model := out.Model
	if model == "" {
		model = g.cfg.Model
	}
	return out.Output != actors.EmulatedOutput(model, out.Version, input), out.serverTimes
}

// makeInput is request n's input: n in decimal, padded with 'x' to size
// bytes (its last size digits when longer), so each input is distinct and
// needs no JSON escaping.
func makeInput(n uint64, size int) string {
	b := make([]byte, 0, max(size, 20))
	b = strconv.AppendUint(b, n, 10)
	if len(b) > size {
		return string(b[len(b)-size:])
	}
	for len(b) < size {
		b = append(b, 'x')
	}
	return string(b)
}

// classify names a transport error's kind for the report.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, errCut):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "no free connection"
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "connection reset"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no local port"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "too many open files"
	}
	return "other"
}

// sampleRSS samples RSSPID's VmRSS every Interval until the returned stop
// is called; stop waits for the sampler to end.
func (g *generator) sampleRSS() (stop func()) {
	if g.cfg.RSSPID <= 0 {
		return func() {}
	}
	path := "/proc/" + strconv.Itoa(g.cfg.RSSPID) + "/status"
	statPath := "/proc/" + strconv.Itoa(g.cfg.RSSPID) + "/stat"
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(g.cfg.Interval)
		defer t.Stop()
		for {
			kib, err := readRSS(path)
			g.rec.rss(time.Now(), kib, err)
			if cpu, err := readCPU(statPath); err == nil {
				g.rec.cpu(cpu)
			}
			select {
			case <-t.C:
			case <-quit:
				// A last CPU reading, so the server's CPU covers the
				// whole run and not up to an Interval less.
				if cpu, err := readCPU(statPath); err == nil {
					g.rec.cpu(cpu)
				}
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

// readRSS reads VmRSS, in KiB, from a /proc/PID/status file.
func readRSS(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("rss: %w", err)
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := bytes.Fields(v)
			if len(f) == 0 {
				break
			}
			kib, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("rss: %s: %w", path, err)
			}
			return kib, nil
		}
	}
	return 0, fmt.Errorf("rss: %s: no VmRSS line", path)
}

// clockTick is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// 100 on every Linux platform Go supports.
const clockTick = 10 * time.Millisecond

// readCPU reads a process's CPU time, user and system, from
// /proc/PID/stat.
func readCPU(path string) (time.Duration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("cpu: %w", err)
	}
	// The command name (field 2) may hold spaces; fields after its
	// closing parenthesis are plain. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu: %s: no command field", path)
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu: %s: short", path)
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cpu: %s: bad utime or stime", path)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// ms converts microseconds to milliseconds, rounded to the microsecond.
func ms(us int64) float64 { return math.Round(float64(us)) / 1000 }

// openFilesSpare is what a run keeps of the open-file limit for other
// than its connections: the process's own files, the RSS sampler's,
// connections being replaced.
const openFilesSpare = 64

// fitOpenFiles fits a REST run to the files the process may open (limit;
// 0: unknown). Each connection of a closed loop, and each request in
// flight of an open loop, holds a connection of its own; past the limit
// every dial fails ("too many open files") and the run's figures are the
// generator's, not the server's. A closed loop that does not fit is
// refused; an open loop's InFlightMax is lowered to fit (the report's
// in_flight_max says what it ran with), since its default may not fit a
// machine. gRPC runs multiplex their requests over a few connections.
func fitOpenFiles(cfg Config, limit int) (Config, error) {
	if cfg.GRPC != "" || limit <= 0 {
		return cfg, nil
	}
	fit := limit - openFilesSpare - cfg.IdleConns
	if cfg.IdleConns > 0 && fit < 1 {
		return cfg, fmt.Errorf("load: --idle-conns %d needs a connection each, and this process may open %d files (ulimit -n), %d of them kept for other use: lower --idle-conns or raise the limit", cfg.IdleConns, limit, openFilesSpare)
	}
	if cfg.Connections > 0 {
		if cfg.Connections > fit {
			return cfg, fmt.Errorf("load: --connections %d needs a connection each, and this process may open %d files (ulimit -n), %d of them kept for other use: lower --connections or raise the limit", cfg.Connections, limit, openFilesSpare)
		}
		return cfg, nil
	}
	if cfg.InFlightMax > fit {
		if fit < 1 {
			return cfg, fmt.Errorf("load: this process may open %d files (ulimit -n): too few for a connection", limit)
		}
		cfg.InFlightMax = fit
	}
	return cfg, nil
}
