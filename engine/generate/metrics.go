package generate

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/gen"
	"github.com/batchd/batchd/engine/openai"
)

// genBuckets are the latency buckets of the generation histograms, in
// seconds: 1 ms to about 65 s, doubling.
var genBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

// metrics are the generation series of /metrics. The histograms and
// request counters are observed as requests end; the gauges and the
// scheduler's counters are read at scrape time from what each scheduler
// last published (Collector).
type metrics struct {
	s                           *Service
	ttft, tpot, e2e             *prometheus.HistogramVec
	requests                    *prometheus.CounterVec
	promptTokens, genTokens     *prometheus.CounterVec
	running, waiting, kvUsed    *prometheus.Desc
	kvBlocks, preempts, crashes *prometheus.Desc
	kvPressure, slack           *prometheus.Desc
	devices, recommended        *prometheus.Desc
}

func newMetrics(s *Service) *metrics {
	return &metrics{
		s: s,
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "batchd_gen_ttft_seconds", Help: "Time to first token: from arrival to the first token, per completed generation request.",
			Buckets: genBuckets,
		}, []string{"model"}),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "batchd_gen_tpot_seconds", Help: "Time per output token after the first, per completed generation request of two tokens or more.",
			Buckets: genBuckets,
		}, []string{"model"}),
		e2e: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "batchd_gen_e2e_seconds", Help: "From arrival to the last token, per completed generation request.",
			Buckets: genBuckets,
		}, []string{"model"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "batchd_gen_requests_total", Help: "Generation requests ended, by outcome and reason (cancelled: the client went away or a stop sequence ended it).",
		}, []string{"model", "outcome", "reason"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "batchd_gen_prompt_tokens_total", Help: "Prompt tokens of the generation requests admitted and ended.",
		}, []string{"model"}),
		genTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "batchd_gen_generated_tokens_total", Help: "Tokens generated and sent to clients.",
		}, []string{"model"}),
		running:    prometheus.NewDesc("batchd_gen_sequences_running", "Sequences admitted to a device (holding KV blocks).", []string{"model"}, nil),
		waiting:    prometheus.NewDesc("batchd_gen_sequences_waiting", "Sequences queued for admission.", []string{"model"}, nil),
		kvUsed:     prometheus.NewDesc("batchd_gen_kv_blocks_used", "KV-cache blocks held over the model's devices.", []string{"model"}, nil),
		kvBlocks:   prometheus.NewDesc("batchd_gen_kv_blocks", "KV-cache blocks of the model's devices (capacity).", []string{"model"}, nil),
		preempts:   prometheus.NewDesc("batchd_gen_preemptions_total", "Sequences preempted for KV blocks (and recomputed).", []string{"model"}, nil),
		crashes:    prometheus.NewDesc("batchd_gen_device_failures_total", "Device steps that failed or hung (the device's sequences recomputed elsewhere).", []string{"model"}, nil),
		kvPressure: prometheus.NewDesc("batchd_gen_kv_pressure", "Autoscaling signal: the share of the model's KV-cache blocks held, 0 to 1.", []string{"model"}, nil),
		slack: prometheus.NewDesc("batchd_gen_ttft_slack_seconds", "Autoscaling signal: over the queued new requests, the TTFT deadline minus the predicted first-token time (negative: predicted late), least (quantile 0) and 10th percentile (0.1); absent with none queued.",
			[]string{"model", "quantile"}, nil),
		devices:     prometheus.NewDesc("batchd_gen_devices", "Devices serving the model.", []string{"model"}, nil),
		recommended: prometheus.NewDesc("batchd_gen_devices_recommended", "Devices the generation autoscaling policy recommends for the model: one more under KV or TTFT-slack pressure, one fewer when low.", []string{"model"}, nil),
	}
}

// Collectors are the generation series, for /metrics.
func (s *Service) Collectors() []prometheus.Collector {
	m := s.met
	return []prometheus.Collector{m.ttft, m.tpot, m.e2e, m.requests, m.promptTokens, m.genTokens, m}
}

// Describe implements prometheus.Collector (the gauges and counters read
// at scrape time).
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.running, m.waiting, m.kvUsed, m.kvBlocks, m.preempts, m.crashes, m.kvPressure, m.slack, m.devices, m.recommended} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, name := range m.s.names {
		st := m.s.Stats(name)
		ch <- prometheus.MustNewConstMetric(m.running, prometheus.GaugeValue, float64(st.Running), name)
		ch <- prometheus.MustNewConstMetric(m.waiting, prometheus.GaugeValue, float64(st.Waiting), name)
		ch <- prometheus.MustNewConstMetric(m.kvUsed, prometheus.GaugeValue, float64(st.BlocksUsed), name)
		ch <- prometheus.MustNewConstMetric(m.kvBlocks, prometheus.GaugeValue, float64(st.Blocks), name)
		ch <- prometheus.MustNewConstMetric(m.preempts, prometheus.CounterValue, float64(st.Preemptions), name)
		ch <- prometheus.MustNewConstMetric(m.crashes, prometheus.CounterValue, float64(st.Crashes), name)
		ch <- prometheus.MustNewConstMetric(m.kvPressure, prometheus.GaugeValue, st.Pressure.KVUsed, name)
		if st.Pressure.Queued > 0 {
			ch <- prometheus.MustNewConstMetric(m.slack, prometheus.GaugeValue, st.Pressure.SlackMin.Seconds(), name, "0")
			ch <- prometheus.MustNewConstMetric(m.slack, prometheus.GaugeValue, st.Pressure.SlackP10.Seconds(), name, "0.1")
		}
		ch <- prometheus.MustNewConstMetric(m.devices, prometheus.GaugeValue, float64(st.Devices), name)
		ch <- prometheus.MustNewConstMetric(m.recommended, prometheus.GaugeValue, float64(st.DevicesRecommended), name)
	}
}

// cancelled counts a request its client ended, after sent tokens.
func (m *metrics) cancelled(model string, sent int) {
	m.requests.WithLabelValues(model, actors.Cancelled.String(), actors.ReasonCancelled.String()).Inc()
	m.genTokens.WithLabelValues(model).Add(float64(sent))
}

// ended counts a request that ended by its scheduler's gen.End.
func (m *metrics) ended(md *model, req openai.Request, e gen.End) {
	reason := e.Reason.String()
	if e.Reason == actors.ReasonNone {
		reason = "none"
	}
	m.requests.WithLabelValues(md.name, e.Outcome.String(), reason).Inc()
	if e.Outcome == actors.Rejected {
		return
	}
	m.promptTokens.WithLabelValues(md.name).Add(float64(len(req.Prompt)))
	m.genTokens.WithLabelValues(md.name).Add(float64(e.Tokens))
	if e.Outcome != actors.Completed || e.Tokens == 0 {
		return
	}
	m.ttft.WithLabelValues(md.name).Observe(seconds(e.FirstToken - e.Arrival))
	m.e2e.WithLabelValues(md.name).Observe(seconds(e.Done - e.Arrival))
	if e.Tokens > 1 {
		m.tpot.WithLabelValues(md.name).Observe(seconds((e.Done - e.FirstToken) / time.Duration(e.Tokens-1)))
	}
}

func seconds(d time.Duration) float64 { return d.Seconds() }
