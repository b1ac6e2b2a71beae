package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/jobs"
)

// Config says how the series are labelled and where the gauges read at
// scrape time come from.
type Config struct {
	// Models are the registry's model names: the only model labels, the
	// rest being "other". Empty: the first ModelLabelsMax names seen.
	Models []string
	// ModelLabelsMax bounds the model labels when Models is empty.
	ModelLabelsMax int
	// Signals returns the batcher's load signals at scrape time (see
	// httpapi.Config.Signals). Nil: those gauges are not exported.
	Signals func(ctx context.Context) (actors.Signals, error)
	// ScrapeTimeout bounds one Signals call.
	ScrapeTimeout time.Duration
	// Devices are the engine's device addresses in order: a device's
	// label is its index here, from 0.
	Devices []actors.Address
	// Jobs is the durable job runner whose counters the batchd_job_*
	// series read. Nil: those series are not exported.
	Jobs JobStats
	// Collectors are more series, registered as they are (the cluster's).
	Collectors []prometheus.Collector
	// Autoscale is the live autoscaling recommendation the
	// batchd_autoscale_* series read. Nil: those series are not exported.
	Autoscale Autoscale
}

// Autoscale is what the batchd_autoscale_* series read of the live
// autoscaling recommendation (engine/autoscale's Recommender has it).
type Autoscale interface {
	// DevicesRecommended is the policy's latest recommendation for this
	// node's load, in devices; DevicesCurrent the devices the node runs.
	DevicesRecommended() int
	DevicesCurrent() int
	// Decisions counts the policy's decisions up and down so far.
	Decisions() (up, down uint64)
}

// ReasonNone is the reason label of a request that was not refused.
const ReasonNone = "none"

// Metrics are the adapter's Prometheus series, on a registry of its own
// (never the global one: two handlers in one process, as in tests, must
// not collide, and nothing else's series leak into /metrics). Its methods
// are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	requests  *prometheus.CounterVec   // model, tenant, outcome, reason
	responses *prometheus.CounterVec   // route, code
	grpcResps *prometheus.CounterVec   // method, code
	queueWait *prometheus.HistogramVec // model
	compute   *prometheus.HistogramVec // model
	latency   *prometheus.HistogramVec // model, outcome
	batchSize *prometheus.HistogramVec // model

	models *labelSet
	// recent holds the latest completed requests' latencies, for the
	// status page's percentiles (Recent).
	recent recentRing

	// completedBy and responsesBy hold series already resolved, keyed by
	// their labels: WithLabelValues hashes the labels and takes a lock on
	// every call, six times for a completed request. Both are bounded as
	// their labels are (models by the labelSet, tenants by the config's
	// keys, routes by the mux's patterns, status codes by net/http).
	completedBy sync.Map // seriesKey → *completedSeries
	responsesBy sync.Map // responseKey → prometheus.Counter
	// grpcBy is responsesBy for gRPC: bounded by the service's methods
	// and gRPC's 17 codes.
	grpcBy sync.Map // grpcKey → prometheus.Counter
}

type grpcKey struct{ method, code string }

type seriesKey struct{ model, tenant string }

// completedSeries are the series a completed request of one model and
// tenant updates.
type completedSeries struct {
	requests                               prometheus.Counter
	latency, queueWait, compute, batchSize prometheus.Observer
}

type responseKey struct {
	route  string
	status int
}

// otherLabel stands for the label values past a labelSet's bound.
const otherLabel = "other"

// labelSet bounds the values of one label: the first max distinct values
// (or, with fixed, exactly those) keep their name, the rest are "other".
// Without it, a model registry left empty would let clients create a
// series per made-up model name.
//
// Every request's metrics ask it, from every core: a name it holds is
// looked up without a lock (one mutex for all was 0.37 s of a GPU host's
// 132.6 s profile, most of it waiting).
type labelSet struct {
	fixed map[string]struct{} // non-nil: exactly these names; never changed
	known sync.Map            // without fixed: the names kept so far
	mu    sync.Mutex          // guards count and additions to known
	count int
	max   int
}

func newLabelSet(fixed []string, maxNames int) *labelSet {
	s := &labelSet{max: maxNames}
	if len(fixed) > 0 {
		s.fixed = make(map[string]struct{}, len(fixed))
		for _, n := range fixed {
			s.fixed[n] = struct{}{}
		}
	}
	return s
}

func (s *labelSet) label(name string) string {
	if s.fixed != nil {
		if _, ok := s.fixed[name]; ok {
			return name
		}
		return otherLabel
	}
	if _, ok := s.known.Load(name); ok {
		return name
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.known.Load(name); ok {
		return name
	}
	if s.count >= s.max {
		return otherLabel
	}
	s.known.Store(name, struct{}{})
	s.count++
	return name
}

// latencyBuckets (seconds) are dense around the seeds' 100 ms batch and
// 200 ms SLO, where the interesting percentiles lie.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .075, .1, .11, .125, .15, .175, .2, .25, .3, .5, .75, 1, 2.5, 5, 10, 30, 60}

// batchSizeBuckets cover 1 to the seeds' 100 and past it.
var batchSizeBuckets = []float64{1, 2, 4, 8, 16, 32, 50, 64, 75, 90, 100, 128, 256}

// New makes the series and registers them.
func New(cfg Config) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "batchd_requests_total",
			Help: "Requests handed to the engine (synchronous requests and durable job items alike), by model, tenant, outcome (completed, failed, rejected, expired, cancelled) and reason.",
		}, []string{"model", "tenant", "outcome", "reason"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "batchd_http_responses_total",
			Help: "HTTP responses by route pattern and status code.",
		}, []string{"route", "code"}),
		grpcResps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "batchd_grpc_responses_total",
			Help: "gRPC responses (each reply of a stream included) by method and status code.",
		}, []string{"method", "code"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "batchd_queue_wait_seconds",
			Help:    "Time from arrival to dispatch on a device, per completed request.",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		compute: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "batchd_compute_seconds",
			Help:    "Time from dispatch to reply, per completed request.",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "batchd_latency_seconds",
			Help:    "End-to-end time in the handler, from the request's arrival to its reply from the engine, by outcome.",
			Buckets: latencyBuckets,
		}, []string{"model", "outcome"}),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "batchd_batch_size",
			Help:    "Size of the batch each completed request ran in (weighted by requests, not batches).",
			Buckets: batchSizeBuckets,
		}, []string{"model"}),
		models: newLabelSet(cfg.Models, cfg.ModelLabelsMax),
	}
	m.reg.MustRegister(m.requests, m.responses, m.grpcResps, m.queueWait, m.compute, m.latency, m.batchSize)
	// The process's own series, as every Go service exports them: its
	// heap, allocations, collections and goroutines (go_*), and its
	// resident memory, CPU time and file descriptors (process_*).
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(cfg.Collectors...)
	if cfg.Signals != nil {
		m.reg.MustRegister(newSignalsCollector(cfg.Signals, cfg.ScrapeTimeout, cfg.Devices))
	}
	if cfg.Jobs != nil {
		registerJobMetrics(m.reg, cfg.Jobs)
	}
	if cfg.Autoscale != nil {
		registerAutoscaleMetrics(m.reg, cfg.Autoscale)
	}
	return m
}

// Observe records one engine call: its outcome and reason labels, and for
// a completed request its timeline. elapsed is the handler's own measure,
// on the engine clock.
func (m *Metrics) Observe(model, tenant, outcome, reason string, rep actors.Reply, elapsed time.Duration) {
	model = m.models.label(model)
	if rep.Outcome != actors.Completed {
		m.requests.WithLabelValues(model, tenant, outcome, reason).Inc()
		m.latency.WithLabelValues(model, outcome).Observe(elapsed.Seconds())
		return
	}
	s := m.completed(model, tenant)
	if reason == ReasonNone {
		s.requests.Inc()
	} else {
		m.requests.WithLabelValues(model, tenant, outcome, reason).Inc()
	}
	s.latency.Observe(elapsed.Seconds())
	m.recent.add(elapsed)
	if rep.Dispatch > 0 {
		s.queueWait.Observe((rep.Dispatch - rep.Arrival).Seconds())
		if rep.Done > 0 {
			s.compute.Observe((rep.Done - rep.Dispatch).Seconds())
		}
	}
	if rep.BatchSize > 0 {
		s.batchSize.Observe(float64(rep.BatchSize))
	}
}

// completed returns the series of model's and tenant's completed
// requests, resolving them the first time.
func (m *Metrics) completed(model, tenant string) *completedSeries {
	k := seriesKey{model, tenant}
	if s, ok := m.completedBy.Load(k); ok {
		return s.(*completedSeries)
	}
	outcome := actors.Completed.String()
	s := &completedSeries{
		requests:  m.requests.WithLabelValues(model, tenant, outcome, ReasonNone),
		latency:   m.latency.WithLabelValues(model, outcome),
		queueWait: m.queueWait.WithLabelValues(model),
		compute:   m.compute.WithLabelValues(model),
		batchSize: m.batchSize.WithLabelValues(model),
	}
	got, _ := m.completedBy.LoadOrStore(k, s)
	return got.(*completedSeries)
}

// Response counts one HTTP response: route is the mux's pattern ("" when
// none matched).
func (m *Metrics) Response(route string, status int) {
	if route == "" {
		route = "none"
	}
	k := responseKey{route, status}
	c, ok := m.responsesBy.Load(k)
	if !ok {
		c, _ = m.responsesBy.LoadOrStore(k, m.responses.WithLabelValues(route, strconv.Itoa(status)))
	}
	c.(prometheus.Counter).Inc()
}

// GRPCResponse counts one gRPC response: method is the RPC's short name,
// code the status code's name (OK, NotFound, ...).
func (m *Metrics) GRPCResponse(method, code string) {
	k := grpcKey{method, code}
	c, ok := m.grpcBy.Load(k)
	if !ok {
		c, _ = m.grpcBy.LoadOrStore(k, m.grpcResps.WithLabelValues(method, code))
	}
	c.(prometheus.Counter).Inc()
}

// Handler serves the registry in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		// One failing collector must not hide every other series.
		ErrorHandling: promhttp.ContinueOnError,
		// Scrapes are cheap but call Signals, a round trip to the batcher:
		// a few at a time is plenty.
		MaxRequestsInFlight: 4,
	})
}

// signalsCollector exports the batcher's signals at scrape time. It holds
// no copy of them: each Collect asks Signals afresh, which is how the
// numbers stay the actor's own (the func does the asking; see
// httpapi.Config.Signals).
type signalsCollector struct {
	signals func(ctx context.Context) (actors.Signals, error)
	timeout time.Duration
	// index is each known device's index in Config.Devices, its label.
	index map[actors.Address]int

	up, depth, waitOldest, slackMin, rate, batchMean     *prometheus.Desc
	busy, healthy, devicesHealthy, devicesNeeded, needed *prometheus.Desc
	overrun, busySeconds, waitPredicted                  *prometheus.Desc
	suspectsCapped                                       *prometheus.Desc
}

func newSignalsCollector(f func(ctx context.Context) (actors.Signals, error), timeout time.Duration, devices []actors.Address) *signalsCollector {
	key := []string{"model", "version", "bucket"}
	index := make(map[actors.Address]int, len(devices))
	for i, a := range devices {
		if _, ok := index[a]; !ok {
			index[a] = i
		}
	}
	return &signalsCollector{
		signals:        f,
		timeout:        timeout,
		index:          index,
		up:             prometheus.NewDesc("batchd_signals_up", "1 if the batcher answered the scrape's signals query, else 0 (and no other batchd_queue_ or batchd_device_ series).", nil, nil),
		depth:          prometheus.NewDesc("batchd_queue_depth", "Requests queued per key (model, version, input-length bucket; keys that differ only in params are summed).", key, nil),
		waitOldest:     prometheus.NewDesc("batchd_queue_wait_oldest_seconds", "How long the oldest queued request of the key has waited.", key, nil),
		slackMin:       prometheus.NewDesc("batchd_queue_slack_min_seconds", "Least slack (deadline - now - predicted compute - margin) of a queued request of the key; negative is late.", key, nil),
		rate:           prometheus.NewDesc("batchd_queue_arrival_rate", "Recent arrivals per second of the key.", key, nil),
		batchMean:      prometheus.NewDesc("batchd_queue_batch_size_mean", "Mean size of the key's recent batches.", key, nil),
		needed:         prometheus.NewDesc("batchd_queue_devices_needed", "The key's share of the autoscaling recommendation, in devices.", key, nil),
		busy:           prometheus.NewDesc("batchd_device_busy_fraction", "Share of time since registration the device has spent on batches.", []string{"device"}, nil),
		healthy:        prometheus.NewDesc("batchd_device_healthy", "1 if the device is registered and not quarantined.", []string{"device"}, nil),
		devicesHealthy: prometheus.NewDesc("batchd_devices_healthy", "Registered devices that are not quarantined.", nil, nil),
		devicesNeeded:  prometheus.NewDesc("batchd_devices_needed", "Autoscaling recommendation: devices needed for the current load at the target utilisation, led by queue wait.", nil, nil),
		busySeconds:    prometheus.NewDesc("batchd_device_busy_seconds_total", "Time the device has spent on batches since it registered (a counter: its rate is the busy share; it restarts when the device registers again).", []string{"device"}, nil),
		waitPredicted:  prometheus.NewDesc("batchd_queue_wait_predicted_seconds", "Queue wait predicted for a full batch that joined the queues now (0 while a device is idle): the autoscaler's leading indicator.", nil, nil),
		overrun:        prometheus.NewDesc("batchd_batch_overrun_seconds", "What the batcher adds to every batch it plans with: the 99th percentile of how much longer than the cost model its recent batches ran (policy.learn_overrun; 0 without it).", nil, nil),
		suspectsCapped: prometheus.NewDesc("batchd_suspects_capped", "1 while the batches of suspect tenants (three distinct poison inputs within the poison memory's age) hold a quarter of the devices while other tenants' requests wait, the most they may: their other requests wait.", nil, nil),
	}
}

func (c *signalsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.depth, c.waitOldest, c.slackMin, c.rate, c.batchMean, c.needed, c.busy, c.healthy, c.devicesHealthy, c.devicesNeeded, c.overrun, c.busySeconds, c.waitPredicted, c.suspectsCapped} {
		ch <- d
	}
}

// keyAgg is the signals of the keys that share a (model, version, bucket)
// label set: they differ only in params, which are not a label (they can be
// long, and would multiply the series).
type keyAgg struct {
	depth                 int
	waitOldest, slackMin  time.Duration
	rate, sizeSum, needed float64
	nSize                 int
	queued                bool
}

// emit sends a gauge, dropping one that cannot be made (a label that is
// not UTF-8): a panic would take down the scrape, an error the series.
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, lv ...string) {
	if m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, lv...); err == nil {
		ch <- m
	}
}

type keyLabels struct {
	model, version string
	bucket         int
}

func (c *signalsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s, err := c.signals(ctx)
	if err != nil {
		emit(ch, c.up, 0)
		return
	}
	emit(ch, c.up, 1)
	// Bounded by the batcher's KeysMax: one entry per key at most.
	agg := make(map[keyLabels]*keyAgg, len(s.Keys))
	for _, k := range s.Keys {
		l := keyLabels{k.Key.Model, k.Key.Version, k.Key.Bucket}
		a := agg[l]
		if a == nil {
			a = &keyAgg{}
			agg[l] = a
		}
		a.depth += k.Depth
		a.rate += k.Rate
		a.needed += k.DevicesNeeded
		if k.BatchSizeMean > 0 {
			a.sizeSum += k.BatchSizeMean
			a.nSize++
		}
		if k.Depth > 0 {
			a.waitOldest = max(a.waitOldest, k.WaitOldest)
			if !a.queued || k.SlackMin < a.slackMin {
				a.slackMin = k.SlackMin
			}
			a.queued = true
		}
	}
	for l, a := range agg {
		lv := []string{l.model, l.version, strconv.Itoa(l.bucket)}
		emit(ch, c.depth, float64(a.depth), lv...)
		emit(ch, c.waitOldest, a.waitOldest.Seconds(), lv...)
		if a.queued {
			emit(ch, c.slackMin, a.slackMin.Seconds(), lv...)
		}
		emit(ch, c.rate, a.rate, lv...)
		mean := 0.0
		if a.nSize > 0 {
			mean = a.sizeSum / float64(a.nSize)
		}
		emit(ch, c.batchMean, mean, lv...)
		emit(ch, c.needed, a.needed, lv...)
	}
	seen := make(map[actors.Address]bool, len(s.Devices))
	for _, d := range s.Devices {
		if seen[d.Device] {
			continue // a duplicate series would fail the whole scrape
		}
		seen[d.Device] = true
		name := c.deviceLabel(d.Device)
		emit(ch, c.busy, d.BusyFraction, name)
		if m, err := prometheus.NewConstMetric(c.busySeconds, prometheus.CounterValue, d.Busy.Seconds(), name); err == nil {
			ch <- m
		}
		healthy := 0.0
		if d.Healthy {
			healthy = 1
		}
		emit(ch, c.healthy, healthy, name)
	}
	emit(ch, c.devicesHealthy, float64(s.DevicesHealthy))
	emit(ch, c.devicesNeeded, float64(s.DevicesNeeded))
	emit(ch, c.overrun, s.Overrun.Seconds())
	capped := 0.0
	if s.SuspectsCapped {
		capped = 1
	}
	emit(ch, c.suspectsCapped, capped)
	emit(ch, c.waitPredicted, s.WaitPredicted.Seconds())
}

// deviceLabel names device a for people: its index in Config.Devices,
// from 0, else "addr-" and its actor address (which cannot be taken for
// an index).
func (c *signalsCollector) deviceLabel(a actors.Address) string {
	if i, ok := c.index[a]; ok {
		return strconv.Itoa(i)
	}
	name := "addr-" + strconv.FormatUint(a.ID, 10)
	if a.Node != "" {
		name = "addr-" + a.Node + "/" + strconv.FormatUint(a.ID, 10)
	}
	return name
}

// JobStats is what the batchd_job_* series read of the durable job
// runner (*jobs.Runner has it).
type JobStats interface {
	Stats() jobs.Stats
}

// registerJobMetrics exports the runner's counters, read at scrape time:
//
//	batchd_job_items_total{outcome}   items the runner wrote finished (completed, failed,
//	                                  cancelled, expired; queued items a DELETE cancels
//	                                  in the store are not counted)
//	batchd_job_item_retries_total     runs refused for load or past the SLO, queued again
//	batchd_job_items_held             items in the engine or waiting to retry now
//	batchd_jobs_active                unfinished jobs the runner tracks
func registerJobMetrics(reg *prometheus.Registry, js JobStats) {
	for _, o := range []struct {
		outcome string
		get     func(jobs.Stats) uint64
	}{
		{"completed", func(s jobs.Stats) uint64 { return s.Completed }},
		{"failed", func(s jobs.Stats) uint64 { return s.Failed }},
		{"cancelled", func(s jobs.Stats) uint64 { return s.Cancelled }},
		{"expired", func(s jobs.Stats) uint64 { return s.Expired }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "batchd_job_items_total",
			Help:        "Durable job items the runner wrote finished, by outcome.",
			ConstLabels: prometheus.Labels{"outcome": o.outcome},
		}, func() float64 { return float64(o.get(js.Stats())) }))
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "batchd_job_item_retries_total",
			Help: "Durable job item runs refused for load or past the SLO, queued to run again.",
		}, func() float64 { return float64(js.Stats().Retries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "batchd_job_items_held",
			Help: "Durable job items in the engine or waiting to retry.",
		}, func() float64 { return float64(js.Stats().Held) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "batchd_jobs_active",
			Help: "Unfinished durable jobs the runner tracks.",
		}, func() float64 { return float64(js.Stats().Jobs) }),
	)
}

// registerAutoscaleMetrics exports the live autoscaling recommendation,
// read at scrape time:
//
//	batchd_autoscale_devices_recommended      the policy's devices for this node's load
//	batchd_autoscale_devices_current          the devices this node runs
//	batchd_autoscale_decisions_total{direction}  decisions up and down
//
// A HorizontalPodAutoscaler scales the pods on the ratio of the sums of the
// first two over all pods (cluster/deploy/kubernetes).
func registerAutoscaleMetrics(reg *prometheus.Registry, a Autoscale) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "batchd_autoscale_devices_recommended",
			Help: "Devices the autoscaling policy (autoscale in the serve config) recommends for this node's load: the simulator's policy, run live on the batcher's signals.",
		}, func() float64 { return float64(a.DevicesRecommended()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "batchd_autoscale_devices_current",
			Help: "Devices this node runs (devices.count): the denominator of the scaling ratio.",
		}, func() float64 { return float64(a.DevicesCurrent()) }),
	)
	for _, d := range []struct {
		direction string
		up        bool
	}{{"up", true}, {"down", false}} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "batchd_autoscale_decisions_total",
			Help:        "Decisions of the autoscaling policy, by direction.",
			ConstLabels: prometheus.Labels{"direction": d.direction},
		}, func() float64 {
			up, down := a.Decisions()
			if d.up {
				return float64(up)
			}
			return float64(down)
		}))
	}
}
