package gen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	simgen "github.com/batchd/batchd/sim/gen"
)

// Metrics are what an expectation may check, with what each means. The
// latencies are of completed requests, in milliseconds; with tenant:,
// the tenant's own (tokens_per_sec and the kv_, preemptions and
// violations metrics are the group's only).
var Metrics = map[string]string{
	"completed":      "share of the offered requests that completed, 0 to 1",
	"lost":           "share of the offered requests that did not complete (expired, failed, refused)",
	"tokens_per_sec": "tokens delivered while arrivals went on, per second",
	"ttft_p50_ms":    "time to first token, p50 (also ttft_p95_ms, ttft_p99_ms)",
	"tpot_p50_ms":    "time per output token after the first, p50 (also _p95_, _p99_)",
	"itl_p50_ms":     "inter-token latency, every gap, p50 (also _p95_, _p99_)",
	"kv_peak":        "peak share of the KV blocks held",
	"kv_mean":        "time-weighted mean share of the KV blocks held",
	"preemptions":    "sequences preempted for KV blocks",
	"crashes":        "device crashes and hangs injected",
	"violations":     "invariant violations the simulator saw (streams, KV, budget)",
}

var groupOnly = []string{"tokens_per_sec", "kv_peak", "kv_mean", "preemptions", "crashes", "violations"}

type check struct {
	text   string
	rate   float64 // 0: every rate
	tenant string
	metric string
	op     string
	value  float64
}

func metricKnown(m string) bool {
	if _, ok := Metrics[m]; ok {
		return true
	}
	for _, l := range []string{"ttft", "tpot", "itl"} {
		for _, q := range []string{"p50", "p95", "p99"} {
			if m == l+"_"+q+"_ms" {
				return true
			}
		}
	}
	return false
}

func (s *Scenario) parseCheck(text string) (check, error) {
	c := check{text: text}
	f := strings.Fields(text)
	for len(f) > 0 {
		if v, ok := strings.CutPrefix(f[0], "rate:"); ok {
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || !slices.Contains(s.Rates, r) {
				return c, fmt.Errorf("rate:%s: not one of the scenario's rates %v", v, s.Rates)
			}
			c.rate, f = r, f[1:]
			continue
		}
		if v, ok := strings.CutPrefix(f[0], "tenant:"); ok {
			if !slices.ContainsFunc(s.tenantNames(), func(n string) bool { return n == v }) {
				return c, fmt.Errorf("tenant:%s: not one of the scenario's tenants %v", v, s.tenantNames())
			}
			c.tenant, f = v, f[1:]
			continue
		}
		break
	}
	if len(f) != 3 {
		return c, fmt.Errorf("want [rate:R] [tenant:T] METRIC OP VALUE")
	}
	c.metric, c.op = f[0], f[1]
	if !metricKnown(c.metric) {
		return c, fmt.Errorf("unknown metric %q", c.metric)
	}
	if c.tenant != "" && slices.Contains(groupOnly, c.metric) {
		return c, fmt.Errorf("%s is the group's, not a tenant's", c.metric)
	}
	if !slices.Contains([]string{"<", "<=", ">", ">=", "=="}, c.op) {
		return c, fmt.Errorf("operator %q: want <, <=, >, >= or ==", c.op)
	}
	v, err := strconv.ParseFloat(f[2], 64)
	if err != nil {
		return c, fmt.Errorf("value %q: %w", f[2], err)
	}
	c.value = v
	return c, nil
}

func (s *Scenario) tenantNames() []string {
	if len(s.Tenants) == 0 {
		return []string{"a", "b"}
	}
	var out []string
	for _, t := range s.Tenants {
		out = append(out, t.Name)
	}
	return out
}

// CheckResult is one expectation at one rate.
type CheckResult struct {
	Rate     float64
	Check    string
	Observed float64
	OK       bool
}

// Evaluate checks the scenario's expectations against the report of a
// run at rate.
func (s *Scenario) Evaluate(rate float64, rep *simgen.Report) []CheckResult {
	var out []CheckResult
	for _, text := range s.Expect {
		c, err := s.parseCheck(text)
		if err != nil || c.rate != 0 && c.rate != rate {
			continue
		}
		v := observe(c, rep)
		ok := false
		switch c.op {
		case "<":
			ok = v < c.value
		case "<=":
			ok = v <= c.value
		case ">":
			ok = v > c.value
		case ">=":
			ok = v >= c.value
		case "==":
			ok = v == c.value
		}
		out = append(out, CheckResult{Rate: rate, Check: text, Observed: v, OK: ok})
	}
	return out
}

func observe(c check, rep *simgen.Report) float64 {
	offered, completed := rep.Requests, rep.Outcomes["completed"]
	ttft, tpot, itl := rep.TTFT, rep.TPOT, rep.ITL
	if c.tenant != "" {
		for _, t := range rep.Tenants {
			if t.Name == c.tenant {
				offered, completed, ttft, tpot, itl = t.Offered, t.Completed, t.TTFT, t.TPOT, t.ITL
			}
		}
	}
	share := 0.0
	if offered > 0 {
		share = float64(completed) / float64(offered)
	}
	switch c.metric {
	case "completed":
		return share
	case "lost":
		return 1 - share
	case "tokens_per_sec":
		return rep.WindowTokensPerSec
	case "kv_peak":
		return rep.KVPeak
	case "kv_mean":
		return rep.KVMean
	case "preemptions":
		return float64(rep.Preemptions)
	case "crashes":
		return float64(rep.Crashes)
	case "violations":
		return float64(len(rep.Violations))
	}
	kind, _, _ := strings.Cut(c.metric, "_")
	lat := map[string]simgen.Percentiles{"ttft": ttft, "tpot": tpot, "itl": itl}[kind]
	switch {
	case strings.Contains(c.metric, "_p50_"):
		return lat.P50
	case strings.Contains(c.metric, "_p95_"):
		return lat.P95
	}
	return lat.P99
}
