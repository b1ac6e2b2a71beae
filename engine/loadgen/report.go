package loadgen

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// result is one request's fate.
type result struct {
	intended, sent, done time.Time
	// arrived is when the response reached the socket (see stampConn);
	// zero where that is not known.
	arrived  time.Time
	status   int    // 0: no response
	errClass string // transport error kind, "" if none
	err      error
	wrong    bool // a 200 with another input's output
	server   serverTimes
}

// Classes of outcome with a histogram each.
const (
	classOK       = iota // 200
	classRejected        // 429 or 503: load the server shed
	classOther           // any other status, or a transport error
	classes
)

var classNames = [classes]string{"ok", "rejected", "other"}

// histMaxUs bounds recorded latencies: a run and its grace, in µs.
const histMaxUs = int64(2*DurationMax/time.Microsecond) + 1

// errSamplesMax bounds the example error messages kept.
const errSamplesMax = 8

// recorder accumulates results; its methods are safe for concurrent use.
type recorder struct {
	cfg                     Config
	start, measureFrom, end time.Time

	mu      sync.Mutex
	latency [classes]*hdr.Histogram // from intended send time
	service [classes]*hdr.Histogram // from actual send time
	// atSocket is from intended send time to the response's arrival at
	// the socket, or its read where the socket gave no time; stamped
	// counts the requests whose arrival time the socket gave.
	atSocket [classes]*hdr.Histogram
	stamped  int64
	lag      *hdr.Histogram // actual - intended send time
	readLag  *hdr.Histogram // read - arrival at the socket (stamped responses)
	// What 200s report of their time inside the server (with Check).
	srvLatency, srvQueue, srvCompute *hdr.Histogram
	batchItems, batchCount           int64
	// splitAll and splitSlow add up where the measured 200s (all, and
	// those over SlowOver) spent their time.
	splitAll, splitSlow splitSum
	status              map[int]int64
	errs                map[string]int64
	errSample           []string
	wrong               int64
	dropped             int64
	sent                int64 // measured requests, dropped ones excluded
	window              [classes]int64
	intervals           []Interval
	rssErr              string
	// cpuFirst and cpuLast are the sampled process's CPU time at the
	// first and last sample.
	cpuFirst, cpuLast time.Duration
	cpuSeen           bool
}

// Interval is one slice of the run's time series, by completion time.
type Interval struct {
	// T is the interval's end, seconds since the start.
	T        float64 `json:"t_s"`
	OK       int64   `json:"ok"`
	Rejected int64   `json:"rejected"`
	Other    int64   `json:"other"`
	Dropped  int64   `json:"dropped,omitempty"`
	// Slow counts the measured 200s slower than Config.SlowOver that
	// completed in the interval, and LatencyMaxMs is the slowest measured
	// request's latency: where in the run a tail happened (a start-up, a
	// stall) that the percentiles cannot say.
	Slow         int64   `json:"slow,omitempty"`
	LatencyMaxMs float64 `json:"latency_max_ms,omitempty"`
	// RSSKiB is the sampled process's VmRSS in the interval (last sample).
	RSSKiB int64 `json:"rss_kib,omitempty"`
}

func newRecorder(cfg Config, start, measureFrom, end time.Time) *recorder {
	r := &recorder{
		cfg: cfg, start: start, measureFrom: measureFrom, end: end,
		lag:        hdr.New(1, histMaxUs, 3),
		readLag:    hdr.New(1, histMaxUs, 3),
		srvLatency: hdr.New(1, histMaxUs, 3),
		srvQueue:   hdr.New(1, histMaxUs, 3),
		srvCompute: hdr.New(1, histMaxUs, 3),
		status:     map[int]int64{},
		errs:       map[string]int64{},
	}
	for c := range r.latency {
		r.latency[c] = hdr.New(1, histMaxUs, 3)
		r.service[c] = hdr.New(1, histMaxUs, 3)
		r.atSocket[c] = hdr.New(1, histMaxUs, 3)
	}
	return r
}

// interval returns the time-series slot of t, growing the series.
func (r *recorder) interval(t time.Time) *Interval {
	i := max(int(t.Sub(r.start)/r.cfg.Interval), 0)
	// Bounded: results come at most a Timeout after the end.
	for len(r.intervals) <= i {
		n := len(r.intervals) + 1
		r.intervals = append(r.intervals, Interval{T: (time.Duration(n) * r.cfg.Interval).Seconds()})
	}
	return &r.intervals[i]
}

func (r *recorder) drop(intended time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.interval(intended).Dropped++
	if !intended.Before(r.measureFrom) {
		r.dropped++
	}
}

func (r *recorder) record(res result) {
	class := classOther
	switch {
	case res.errClass != "":
	case res.status == http.StatusOK:
		class = classOK
	case res.status == http.StatusTooManyRequests || res.status == http.StatusServiceUnavailable:
		class = classRejected
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	iv := r.interval(res.done)
	switch class {
	case classOK:
		iv.OK++
	case classRejected:
		iv.Rejected++
	default:
		iv.Other++
	}
	if !res.done.Before(r.measureFrom) && !res.done.After(r.end) {
		r.window[class]++
	}
	if res.intended.Before(r.measureFrom) {
		return // warmup
	}
	r.sent++
	latency := res.done.Sub(res.intended)
	slow := class == classOK && r.cfg.SlowOver > 0 && latency > r.cfg.SlowOver
	iv.LatencyMaxMs = max(iv.LatencyMaxMs, float64(latency.Microseconds())/1000)
	if slow {
		iv.Slow++
	}
	_ = r.latency[class].RecordValue(max(latency.Microseconds(), 1))
	_ = r.service[class].RecordValue(max(res.done.Sub(res.sent).Microseconds(), 1))
	// arrived is the kernel's wall-clock time, with no monotonic reading,
	// so this difference is taken on the wall clock: a step of the clock
	// during a run would show in it.
	at := res.done
	if !res.arrived.IsZero() {
		at = res.arrived
		r.stamped++
		_ = r.readLag.RecordValue(max(res.done.Sub(at).Microseconds(), 1))
	}
	_ = r.atSocket[class].RecordValue(max(at.Sub(res.intended).Microseconds(), 1))
	_ = r.lag.RecordValue(max(res.sent.Sub(res.intended).Microseconds(), 1))
	if res.errClass != "" {
		r.errs[res.errClass]++
		if len(r.errSample) < errSamplesMax {
			r.errSample = append(r.errSample, res.err.Error())
		}
	} else {
		r.status[res.status]++
	}
	if res.wrong {
		r.wrong++
	}
	if st := res.server; st.BatchSize > 0 {
		r.splitAll.add(res, at)
		if slow {
			r.splitSlow.add(res, at)
		}
		_ = r.srvLatency.RecordValue(max(int64(st.LatencyMs*1000), 1))
		_ = r.srvQueue.RecordValue(max(int64(st.QueueMs*1000), 1))
		_ = r.srvCompute.RecordValue(max(int64(st.ComputeMs*1000), 1))
		r.batchItems += int64(st.BatchSize)
		r.batchCount++
	}
}

func (r *recorder) rss(t time.Time, kib int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if r.rssErr == "" {
			r.rssErr = err.Error()
		}
		return
	}
	r.interval(t).RSSKiB = kib
}

func (r *recorder) cpu(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.cpuSeen {
		r.cpuFirst, r.cpuSeen = d, true
	}
	r.cpuLast = d
}

// Report is a run's outcome. Latencies are in milliseconds.
type Report struct {
	Mode string `json:"mode"` // "open" or "closed"
	// URL is the target: the HTTP URL, or grpc://HOST:PORT with the RPC.
	URL         string  `json:"url"`
	Model       string  `json:"model"`
	Arrival     string  `json:"arrival,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Connections int     `json:"connections,omitempty"`
	InFlightMax int     `json:"in_flight_max,omitempty"`
	DurationS   float64 `json:"duration_s"`
	WarmupS     float64 `json:"warmup_s,omitempty"`
	// ElapsedS is from the start until the last answer came back.
	ElapsedS float64 `json:"elapsed_s"`

	Requests Counts `json:"requests"`
	// Status counts responses by HTTP status code; Errors counts requests
	// that got no response, by kind; ErrorSamples quotes a few of them.
	Status       map[string]int64 `json:"status"`
	Errors       map[string]int64 `json:"errors,omitempty"`
	ErrorSamples []string         `json:"error_samples,omitempty"`

	Throughput Throughput `json:"throughput"`
	// Latency is measured from each request's intended send time
	// (open loop) or actual send time (closed loop), by outcome class.
	Latency map[string]Percentiles `json:"latency_ms"`
	// Service is measured from the actual send time, by outcome class.
	Service map[string]Percentiles `json:"service_ms"`
	// AtSocket is Latency up to when each response reached the client's
	// socket rather than when the generator read it: on Linux the kernel
	// says (SO_TIMESTAMPNS), which leaves the generator's own scheduling
	// out. AtSocketStamped counts the requests it said so for; the others
	// count to their read, as in Latency.
	AtSocket        map[string]Percentiles `json:"at_socket_ms"`
	AtSocketStamped int64                  `json:"at_socket_stamped"`
	// SendLag is how late requests left against their intended time: the
	// generator's own lag. A large p99 here means the generator, not the
	// server, was the bottleneck.
	SendLag Percentiles `json:"send_lag_ms"`
	// ReadLag is how long answers waited in the generator's sockets
	// before it read them (of the AtSocketStamped ones): the generator's
	// lag on the way back. A large p99 here, against the latency's, means
	// the generator fell behind its answers and its figures are its own
	// (ReadLagWarn).
	ReadLag *Percentiles `json:"read_lag_ms,omitempty"`
	// Server is what the 200s said of their time in the server (with
	// Check): end to end inside it, queue wait and compute, and the mean
	// batch size a request ran in. Latency minus Server.Latency is HTTP,
	// the network stack and the generator.
	Server *ServerTimes `json:"server,omitempty"`
	// Split is where the 200s' time went, on average (with Check).
	Split *Split `json:"split,omitempty"`

	// ConnectionsOpened is how many HTTP connections the generator
	// dialled over the run: about one per in-flight request an open loop
	// needed at its peak, and each a connection the server holds.
	ConnectionsOpened int64 `json:"connections_opened,omitempty"`
	// IdleConns is how many kept-alive connections the run held idle
	// beside its load (Config.IdleConns), not among ConnectionsOpened.
	IdleConns int `json:"idle_conns,omitempty"`

	// GeneratorCPUS is the CPU time the generator itself used, in
	// seconds: on a machine it shares with the server, the load it can
	// offer is bounded by what this leaves.
	GeneratorCPUS float64 `json:"generator_cpu_s"`
	// GeneratorCPUUSPerRequest is GeneratorCPUS per request it made,
	// warmup included, in microseconds.
	GeneratorCPUUSPerRequest float64 `json:"generator_cpu_us_per_request"`
	// GeneratorCores is how many CPUs the generator may run on (its
	// affinity), and GeneratorBusy the share of their time it used over
	// the run. Near 1, the generator, not the server, may have been what
	// limited the run (see GeneratorBusyWarn).
	GeneratorCores int        `json:"generator_cores"`
	GeneratorBusy  float64    `json:"generator_busy"`
	RSS            *RSS       `json:"rss,omitempty"`
	Intervals      []Interval `json:"intervals"`
}

// setCPU fills in the CPU figures: the generator's cpuS of CPU over wallS
// of run on cores CPUs, and its and the sampled server's (RSS) CPU per
// request of the requests made.
func (rep *Report) setCPU(cpuS, wallS float64, requests int64, cores int) {
	rep.GeneratorCPUS, rep.GeneratorCores = cpuS, cores
	if requests > 0 {
		rep.GeneratorCPUUSPerRequest = cpuS / float64(requests) * 1e6
		if rep.RSS != nil {
			rep.RSS.CPUUSPerRequest = rep.RSS.CPUS / float64(requests) * 1e6
		}
	}
	if wallS > 0 && cores > 0 {
		rep.GeneratorBusy = cpuS / (wallS * float64(cores))
	}
}

// GeneratorBusyWarn is the GeneratorBusy from which the table warns that
// the generator may have been the limit. Pinned to one core, in a closed
// loop against the net/http baseline server (which answers at once), the
// generator ran 83-84% busy at 45-47k req/s (2026-11-21): such a run may
// measure the generator as much as the server.
const GeneratorBusyWarn = 0.8

// ReadLagWarn: the table warns that the generator read its answers late
// when the p99 of ReadLag is over ReadLagWarnMin and over this share of
// the ok latency's p99. A generator on one core, against batchd serve
// --latency 5ms at 14,000 req/s, read the answers of a bad run 323 ms late
// on average (while it used 51% of its core, under GeneratorBusyWarn) and
// reported p99 0.5-1 s that the server never saw (RESULTS.md).
const (
	ReadLagWarn    = 0.1
	ReadLagWarnMin = time.Millisecond
)

// connectionsSpiralled reports whether an open loop opened as many
// connections as InFlightMax allows, and over ten times what its rate
// keeps in flight at the median latency (neededConns): it fell behind
// once, each late request started another connection, and the server was
// then measured holding them all. On the development VM at 20,000 req/s
// (server and generator a core each) about a third of the runs did so,
// and their p99 went from 4 ms to 50-400 ms while the server's own stayed
// 2-5 ms; capped at 256, none (RESULTS.md). A cap the run needed all of
// is a bounded pool, not a spiral.
func (rep *Report) connectionsSpiralled() bool {
	return rep.Mode == "open" && rep.InFlightMax > 0 && rep.ConnectionsOpened >= int64(rep.InFlightMax) &&
		float64(rep.ConnectionsOpened) > 10*rep.neededConns()
}

// neededConns is how many requests the rate keeps in flight at the
// median latency of the 200s, and one.
func (rep *Report) neededConns() float64 {
	return rep.Rate*rep.Latency[classNames[classOK]].P50/1000 + 1
}

// readLagHigh reports whether the run's ReadLag calls for the warning.
func (rep *Report) readLagHigh() bool {
	if rep.ReadLag == nil {
		return false
	}
	p99 := rep.ReadLag.P99
	return p99 > ReadLagWarnMin.Seconds()*1000 && p99 > ReadLagWarn*rep.Latency[classNames[classOK]].P99
}

// splitSum adds up the parts of 200s' latencies (see Split).
type splitSum struct {
	n, tripN                     int64
	lag, server, queue, trip, rd time.Duration
}

// add counts one 200 that reported its server times; at is when its
// response reached the socket (its read when the socket gave no time).
func (s *splitSum) add(res result, at time.Time) {
	server := time.Duration(res.server.LatencyMs * float64(time.Millisecond))
	s.n++
	s.lag += res.sent.Sub(res.intended)
	s.server += server
	s.queue += time.Duration(res.server.QueueMs * float64(time.Millisecond))
	if !res.arrived.IsZero() {
		s.tripN++
		s.trip += at.Sub(res.sent) - server
		s.rd += res.done.Sub(at)
	}
}

// mean returns the means, in milliseconds, or nil for no request.
func (s *splitSum) mean() *SplitRow {
	if s.n == 0 {
		return nil
	}
	ms := func(d time.Duration, n int64) float64 { return d.Seconds() * 1000 / float64(n) }
	row := &SplitRow{Count: s.n, SendLag: ms(s.lag, s.n), Server: ms(s.server, s.n), Queue: ms(s.queue, s.n)}
	if s.tripN > 0 {
		row.Trip, row.Read = ms(s.trip, s.tripN), ms(s.rd, s.tripN)
	}
	return row
}

// Split is where the measured 200s spent their time, as means in
// milliseconds: the generator's send lag, the server's own latency (of
// which queue), the trip in and out (from the send to the response at the
// socket, less the server's latency: HTTP, the network stack, the server's
// read and write) and the generator's read (from the socket to the read).
// They add up to the latency. Over is the same for the 200s slower than
// Config.SlowOver.
type Split struct {
	All    *SplitRow `json:"all"`
	Over   *SplitRow `json:"over,omitempty"`
	OverMs float64   `json:"over_threshold_ms,omitempty"`
}

// SplitRow is one row of a Split.
type SplitRow struct {
	Count   int64   `json:"count"`
	SendLag float64 `json:"send_lag_ms"`
	Server  float64 `json:"server_ms"`
	Queue   float64 `json:"queue_ms"`
	// Trip and Read are over the requests whose arrival the socket
	// stamped (on Linux, all but the first few).
	Trip float64 `json:"trip_ms"`
	Read float64 `json:"read_ms"`
}

// ServerTimes are the server's own figures for the 200s.
type ServerTimes struct {
	Latency       Percentiles `json:"latency_ms"`
	Queue         Percentiles `json:"queue_ms"`
	Compute       Percentiles `json:"compute_ms"`
	BatchSizeMean float64     `json:"batch_size_mean"`
}

// Counts of the measured requests (warmup excluded).
type Counts struct {
	// Sent is every measured request that was sent.
	Sent int64 `json:"sent"`
	// OK got 200; Rejected 429 or 503; Other another status or no
	// response.
	OK       int64 `json:"ok"`
	Rejected int64 `json:"rejected"`
	Other    int64 `json:"other"`
	// Dropped were due while the generator's backlog was full: never
	// sent. Not zero means the generator could not keep up.
	Dropped int64 `json:"dropped"`
	// WrongOutput are 200s whose output is not their input's.
	WrongOutput int64 `json:"wrong_output"`
}

// Throughput is per second over the measured window (warmup to the end
// of sending), counting responses by when they completed.
type Throughput struct {
	OfferedPerS  float64 `json:"offered_per_s"`
	OKPerS       float64 `json:"ok_per_s"`
	RejectedPerS float64 `json:"rejected_per_s"`
	OtherPerS    float64 `json:"other_per_s"`
}

// Percentiles of one distribution, in milliseconds.
type Percentiles struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	Max   float64 `json:"max"`
}

// RSS summarises the sampled process's resident memory, in KiB, and the
// CPU time it used between the first and last samples.
type RSS struct {
	PID   int   `json:"pid"`
	First int64 `json:"first_kib"`
	At10s int64 `json:"at_10s_kib"`
	Max   int64 `json:"max_kib"`
	// MinAfter10s and MaxAfter10s bound the samples after the first 10 s:
	// the spread of a server whose memory is flat once warmed up.
	MinAfter10s int64 `json:"min_after_10s_kib"`
	MaxAfter10s int64 `json:"max_after_10s_kib"`
	Last        int64 `json:"last_kib"`
	// CPUS is the process's CPU time over the run; CPUUSPerRequest is
	// that per request the generator made, warmup included, in
	// microseconds: what one request costs the server, when nothing else
	// loads it.
	CPUS            float64 `json:"cpu_s"`
	CPUUSPerRequest float64 `json:"cpu_us_per_request"`
	Err             string  `json:"error,omitempty"`
}

func percentiles(h *hdr.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	return Percentiles{
		Count: h.TotalCount(),
		Mean:  ms(int64(h.Mean())),
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P95:   ms(h.ValueAtQuantile(95)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
	}
}

func (r *recorder) report(sendingEnded, finished time.Time) *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg := r.cfg
	target := cfg.URL
	switch {
	case cfg.GRPCStream:
		target = "grpc://" + cfg.GRPC + " (ModelStreamInfer)"
	case cfg.GRPC != "":
		target = "grpc://" + cfg.GRPC + " (ModelInfer)"
	}
	if cfg.GRPC != "" && cfg.GRPCConns > 1 {
		target += fmt.Sprintf(" over %d connections", cfg.GRPCConns)
	}
	rep := &Report{
		URL:       target,
		Model:     cfg.Model,
		DurationS: cfg.Duration.Seconds(),
		WarmupS:   cfg.Warmup.Seconds(),
		ElapsedS:  finished.Sub(r.start).Seconds(),
		Status:    map[string]int64{},
		Latency:   map[string]Percentiles{},
		Service:   map[string]Percentiles{},
		AtSocket:  map[string]Percentiles{},
		SendLag:   percentiles(r.lag),
		Intervals: r.intervals,
	}
	if r.stamped > 0 {
		rl := percentiles(r.readLag)
		rep.ReadLag = &rl
	}
	if cfg.Connections > 0 {
		rep.Mode, rep.Connections = "closed", cfg.Connections
	} else {
		rep.Mode, rep.Arrival, rep.Rate, rep.InFlightMax = "open", cfg.Arrival.String(), cfg.Rate, cfg.InFlightMax
	}
	for code, n := range r.status {
		rep.Status[strconv.Itoa(code)] = n
	}
	if len(r.errs) > 0 {
		rep.Errors = map[string]int64{}
		for k, n := range r.errs {
			rep.Errors[k] = n
		}
		rep.ErrorSamples = r.errSample
	}
	for c := range classes {
		rep.Latency[classNames[c]] = percentiles(r.latency[c])
		rep.Service[classNames[c]] = percentiles(r.service[c])
		rep.AtSocket[classNames[c]] = percentiles(r.atSocket[c])
	}
	rep.AtSocketStamped = r.stamped
	rep.Requests = Counts{
		Sent:        r.sent,
		OK:          r.latency[classOK].TotalCount(),
		Rejected:    r.latency[classRejected].TotalCount(),
		Other:       r.latency[classOther].TotalCount(),
		Dropped:     r.dropped,
		WrongOutput: r.wrong,
	}
	stop := r.end
	if sendingEnded.Before(stop) {
		stop = sendingEnded // cut short by ctx
	}
	window := stop.Sub(r.measureFrom).Seconds()
	if window > 0 {
		rep.Throughput = Throughput{
			OfferedPerS:  float64(r.sent+r.dropped) / window,
			OKPerS:       float64(r.window[classOK]) / window,
			RejectedPerS: float64(r.window[classRejected]) / window,
			OtherPerS:    float64(r.window[classOther]) / window,
		}
	}
	if r.batchCount > 0 {
		rep.Server = &ServerTimes{
			Latency:       percentiles(r.srvLatency),
			Queue:         percentiles(r.srvQueue),
			Compute:       percentiles(r.srvCompute),
			BatchSizeMean: float64(r.batchItems) / float64(r.batchCount),
		}
		rep.Split = &Split{All: r.splitAll.mean()}
		if cfg.SlowOver > 0 {
			rep.Split.Over = r.splitSlow.mean()
			rep.Split.OverMs = cfg.SlowOver.Seconds() * 1000
		}
	}
	if cfg.RSSPID > 0 {
		rss := &RSS{PID: cfg.RSSPID, Err: r.rssErr, CPUS: (r.cpuLast - r.cpuFirst).Seconds()}
		for _, iv := range r.intervals {
			if iv.RSSKiB == 0 {
				continue
			}
			if rss.First == 0 {
				rss.First = iv.RSSKiB
			}
			if iv.T <= 10 {
				rss.At10s = iv.RSSKiB
			} else {
				if rss.MinAfter10s == 0 || iv.RSSKiB < rss.MinAfter10s {
					rss.MinAfter10s = iv.RSSKiB
				}
				rss.MaxAfter10s = max(rss.MaxAfter10s, iv.RSSKiB)
			}
			rss.Max = max(rss.Max, iv.RSSKiB)
			rss.Last = iv.RSSKiB
		}
		rep.RSS = rss
	}
	return rep
}

// WriteTable writes the report for a person.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if rep.Mode == "closed" {
		fmt.Fprintf(tw, "closed loop\t%d connections for %gs against %s (model %s)\n", rep.Connections, rep.DurationS, rep.URL, rep.Model)
	} else {
		fmt.Fprintf(tw, "open loop\t%s arrivals at %g req/s for %gs against %s (model %s)\n", rep.Arrival, rep.Rate, rep.DurationS, rep.URL, rep.Model)
	}
	if rep.WarmupS > 0 {
		fmt.Fprintf(tw, "warmup\t%gs not counted\n", rep.WarmupS)
	}
	c := rep.Requests
	fmt.Fprintf(tw, "requests\tsent %d, ok %d, rejected %d, other %d, dropped %d, wrong output %d\n",
		c.Sent, c.OK, c.Rejected, c.Other, c.Dropped, c.WrongOutput)
	codes := make([]string, 0, len(rep.Status))
	for k := range rep.Status {
		codes = append(codes, k)
	}
	sort.Strings(codes)
	fmt.Fprint(tw, "status\t")
	for i, k := range codes {
		if i > 0 {
			fmt.Fprint(tw, ", ")
		}
		fmt.Fprintf(tw, "%s: %d", k, rep.Status[k])
	}
	fmt.Fprintln(tw)
	if len(rep.Errors) > 0 {
		kinds := make([]string, 0, len(rep.Errors))
		for k := range rep.Errors {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		fmt.Fprint(tw, "errors\t")
		for i, k := range kinds {
			if i > 0 {
				fmt.Fprint(tw, ", ")
			}
			fmt.Fprintf(tw, "%s: %d", k, rep.Errors[k])
		}
		fmt.Fprintln(tw)
		for _, s := range rep.ErrorSamples {
			fmt.Fprintf(tw, "\t  %s\n", s)
		}
	}
	t := rep.Throughput
	fmt.Fprintf(tw, "throughput\toffered %.1f/s, ok %.1f/s, rejected %.1f/s, other %.1f/s\n", t.OfferedPerS, t.OKPerS, t.RejectedPerS, t.OtherPerS)
	fmt.Fprintln(tw, "latency (ms)\tcount\tmean\tp50\tp90\tp95\tp99\tp99.9\tmax")
	row := func(name string, p Percentiles) {
		if p.Count == 0 {
			return
		}
		fmt.Fprintf(tw, "  %s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", name, p.Count, p.Mean, p.P50, p.P90, p.P95, p.P99, p.P999, p.Max)
	}
	for _, n := range classNames {
		row(n, rep.Latency[n])
	}
	for _, n := range classNames {
		row(n+" (from send)", rep.Service[n])
	}
	if rep.AtSocketStamped > 0 {
		for _, n := range classNames {
			row(n+" (at socket)", rep.AtSocket[n])
		}
	}
	row("send lag", rep.SendLag)
	if rep.ReadLag != nil {
		row("read lag", *rep.ReadLag)
	}
	if s := rep.Server; s != nil {
		row("server: latency", s.Latency)
		row("server: queue", s.Queue)
		row("server: compute", s.Compute)
		fmt.Fprintf(tw, "batch size\tmean %.1f (as requests saw it)\n", s.BatchSizeMean)
	}
	if sp := rep.Split; sp != nil && sp.All != nil {
		fmt.Fprintf(tw, "split of ok (ms, mean)\tcount\tsend lag\tserver\t(queue)\ttrip\tread\n")
		split := func(name string, r *SplitRow) {
			fmt.Fprintf(tw, "  %s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", name, r.Count, r.SendLag, r.Server, r.Queue, r.Trip, r.Read)
		}
		split("all", sp.All)
		if sp.Over != nil {
			split(fmt.Sprintf("over %gms", sp.OverMs), sp.Over)
		}
	}
	if rep.RSS != nil {
		r := rep.RSS
		fmt.Fprintf(tw, "pid %d\trss (KiB) first %d, at 10s %d, max %d, after 10s %d to %d, last %d; cpu %.2fs (%.1f µs a request) %s\n",
			r.PID, r.First, r.At10s, r.Max, r.MinAfter10s, r.MaxAfter10s, r.Last, r.CPUS, r.CPUUSPerRequest, r.Err)
	}
	if rep.ConnectionsOpened > 0 || rep.IdleConns > 0 {
		fmt.Fprintf(tw, "connections\t%d opened, %d more held idle\n", rep.ConnectionsOpened, rep.IdleConns)
	}
	cpus := "CPUs"
	if rep.GeneratorCores == 1 {
		cpus = "CPU"
	}
	fmt.Fprintf(tw, "generator\tcpu %.2fs: %.0f µs a request, %.0f%% of the %d %s it may use\n",
		rep.GeneratorCPUS, rep.GeneratorCPUUSPerRequest, 100*rep.GeneratorBusy, rep.GeneratorCores, cpus)
	if rep.GeneratorBusy >= GeneratorBusyWarn {
		fmt.Fprintf(tw, "\twarning: the generator kept its CPUs %.0f%% busy: it may have limited this run, not the server\n", 100*rep.GeneratorBusy)
	}
	if rep.connectionsSpiralled() {
		fmt.Fprintf(tw, "\twarning: the generator opened %d connections, all --in-flight-max allows, where the rate needs about %.0f: it fell behind, each late request opened another, and the latencies are partly its own; a smaller --in-flight-max is a client with a bounded pool\n",
			rep.ConnectionsOpened, rep.neededConns())
	}
	if rep.readLagHigh() {
		fmt.Fprintf(tw, "\twarning: the generator read its answers late (read lag p99 %.2f ms against a latency p99 of %.2f ms): the latencies are partly its own\n",
			rep.ReadLag.P99, rep.Latency[classNames[classOK]].P99)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
