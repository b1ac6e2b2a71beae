package scenarios

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
)

// Check is one expectation: "[scope...] metric op value", for example
// "p95_ms < 200", "tenant:a p99_ms <= 250", "lost == 0",
// "window:60s-90s tenant:t slo_attainment >= 0.99".
//
// Scopes: tenant:NAME, model:NAME, version:MODEL@VERSION select one
// group's figures (the report's tenants, models, versions); window:A-B
// (A and B two neighbouring bounds of the scenario's windows) selects the
// requests that arrived in it: with tenant:NAME, that tenant's figures
// there; alone, the sampled metrics (autoscale_*, queue_depth_max,
// *_step_max, slo_attainment_step_min) over that span.
//
// Operators: <, <=, >, >=, ==, !=. Metrics: see Metrics.
type Check struct {
	// Text is the check as written; Line its line in the file.
	Text string
	Line int

	Tenant, Model, Version string
	// Windowed says FromS and ToS bound the arrivals (or samples) looked
	// at.
	Windowed   bool
	FromS, ToS float64

	Metric string
	Op     string
	Value  float64
}

// metricDoc says what each metric is; its keys are every metric a check
// may name (rejected_REASON aside).
var metricDoc = map[string]string{
	"p50_ms":                  "latency p50, ms (completed requests, end to end)",
	"p95_ms":                  "latency p95, ms",
	"p99_ms":                  "latency p99, ms",
	"max_ms":                  "latency max, ms",
	"queue_p50_ms":            "queue wait (enqueue to dispatch) p50, ms; run-wide only",
	"queue_p95_ms":            "queue wait p95, ms; run-wide only",
	"queue_p99_ms":            "queue wait p99, ms; run-wide only",
	"compute_p50_ms":          "compute (dispatch to done) p50, ms; run-wide only",
	"compute_p95_ms":          "compute p95, ms; run-wide only",
	"compute_p99_ms":          "compute p99, ms; run-wide only",
	"slo_attainment":          "completed by the deadline over accepted, not cancelled",
	"throughput_rps":          "completions per second of the safety phase",
	"goodput_rps":             "completions by the deadline per second of the safety phase",
	"offered":                 "requests offered",
	"completed":               "requests completed",
	"rejected":                "requests rejected at admission",
	"expired":                 "requests failed early because their deadline could not be met",
	"failed":                  "requests failed (backend errors, attempts used up)",
	"cancelled":               "requests cancelled by the client",
	"accepted":                "requests accepted; run-wide only",
	"lost":                    "accepted requests never answered (must be 0); run-wide only",
	"duplicated":              "extra replies; run-wide only",
	"retried":                 "requests that ran in more than one batch (crash, hang, split); run-wide only",
	"violations":              "invariant violations the checker found; run-wide only",
	"completed_fraction":      "completed over offered",
	"rejected_fraction":       "rejected over offered",
	"expired_fraction":        "expired over offered",
	"failed_fraction":         "failed over offered",
	"share":                   "the group's offered over all offered (a canary's split)",
	"queue_mean_ms":           "mean queue wait (enqueue to dispatch) of the group's completed requests; tenant:, model: or version: only",
	"compute_mean_ms":         "mean compute (dispatch to done) of the group's completed requests; tenant:, model: or version: only",
	"device_utilisation":      "device busy time over devices × simulated time; run-wide only",
	"device_utilization":      "the same as device_utilisation",
	"device_busy_max":         "the busiest device's busy fraction; run-wide only",
	"device_busy_min":         "the idlest device's busy fraction; run-wide only",
	"batch_size_mean":         "mean items per batch; run-wide only",
	"batches":                 "batches dispatched, retries included; run-wide only",
	"queued_high":             "most items queued at once; run-wide only",
	"fairness_jain":           "Jain's index of the tenants' throughputs; run-wide only",
	"fairness_jain_weighted":  "Jain's index of throughput over weight; run-wide only",
	"autoscale_max_devices":   "largest autoscaling recommendation sampled",
	"autoscale_min_devices":   "smallest autoscaling recommendation sampled",
	"autoscale_mean_devices":  "mean autoscaling recommendation sampled",
	"queue_depth_max":         "largest queue depth sampled",
	"busy_fraction_mean":      "mean of the sampled device busy fractions",
	"keys_max":                "most compatibility keys with recent arrivals in one sample",
	"batch_size_sampled_mean": "mean of the sampled recent batch sizes (keys weighted by arrival rate)",
	"p95_step_max_ms":         "largest p95 of any timeline step (arrivals per sample_every)",
	"p99_step_max_ms":         "largest p99 of any timeline step",
	"slo_attainment_step_min": "smallest SLO attainment of any timeline step with requests",
	"device_hours":            "device-hours over the safety phase: the static fleet's, or the autoscaled fleet's (booting and draining devices count); run-wide only",
	"device_hours_ratio":      "device_hours over the static fleet's (the nodes' devices over the safety phase): 1 without autoscale; run-wide only",
	"scaled_devices_max":      "most devices up (booting or running) at once; the nodes' devices without autoscale; run-wide only",
	"scaled_devices_min":      "fewest devices up at once; the nodes' devices without autoscale; run-wide only",
	"scale_decisions":         "the autoscaler's decisions; 0 without autoscale; run-wide only",
}

// Metrics returns the metric names a check may use, sorted, each with
// what it measures; rejected_REASON (rejected_rate_limited, ...) counts
// one rejection reason.
func Metrics() map[string]string { return metricDoc }

// sampled are the metrics read from the autoscaling readings and the
// timeline, which a window alone may scope.
var sampled = map[string]bool{
	"autoscale_max_devices": true, "autoscale_min_devices": true, "autoscale_mean_devices": true,
	"queue_depth_max": true, "busy_fraction_mean": true, "keys_max": true, "batch_size_sampled_mean": true,
	"p95_step_max_ms": true, "p99_step_max_ms": true, "slo_attainment_step_min": true,
}

// runOnly are the metrics the report has only for the whole run.
var runOnly = map[string]bool{
	"queue_p50_ms": true, "queue_p95_ms": true, "queue_p99_ms": true,
	"compute_p50_ms": true, "compute_p95_ms": true, "compute_p99_ms": true,
	"accepted": true, "lost": true, "duplicated": true, "violations": true, "retried": true,
	"device_utilisation": true, "device_utilization": true, "device_busy_max": true, "device_busy_min": true, "batch_size_mean": true, "batches": true, "queued_high": true,
	"fairness_jain": true, "fairness_jain_weighted": true,
	"device_hours": true, "device_hours_ratio": true, "scaled_devices_max": true, "scaled_devices_min": true, "scale_decisions": true,
}

// groupOnly are the metrics only a tenant, model or version has.
var groupOnly = map[string]bool{"share": true, "queue_mean_ms": true, "compute_mean_ms": true}

var ops = []string{"<=", ">=", "==", "!=", "<", ">"}

// splitCheck reads the syntax every expectation shares, "[scope...]
// metric op value": the metric (which known accepts or explains), the
// operator and a finite value; it returns the scopes unread, for the
// kind of scenario to interpret.
func splitCheck(text string, known func(metric string) error) (Check, []string, error) {
	c := Check{Text: text}
	fields := strings.Fields(text)
	if len(fields) < 3 {
		return c, nil, errors.New("want [scope...] metric op value, e.g. \"tenant:a p95_ms < 200\"")
	}
	n := len(fields)
	c.Metric, c.Op = fields[n-3], fields[n-2]
	v, err := strconv.ParseFloat(fields[n-1], 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return c, nil, fmt.Errorf("value %q: want a finite number", fields[n-1])
	}
	c.Value = v
	if !slices.Contains(ops, c.Op) {
		return c, nil, fmt.Errorf("operator %q: want one of %s", c.Op, strings.Join(ops, " "))
	}
	if err := known(c.Metric); err != nil {
		return c, nil, err
	}
	return c, fields[:n-3], nil
}

// parseCheck parses one expectation against the scenario it belongs to,
// so that a scope naming a tenant, model or window the scenario lacks is
// a mistake of the file.
func parseCheck(text string, s *Scenario) (Check, error) {
	c, scopes, err := splitCheck(text, func(metric string) error {
		_, known := metricDoc[metric]
		if reason, ok := strings.CutPrefix(metric, "rejected_"); ok && !known {
			if !slices.Contains(reasons(), reason) {
				return fmt.Errorf("metric %q: no rejection reason %q (known: %s)", metric, reason, strings.Join(reasons(), ", "))
			}
			known = true
		}
		if !known {
			return fmt.Errorf("unknown metric %q (known: %s)", metric, strings.Join(sortedKeys(metricDoc), ", "))
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	for _, f := range scopes {
		kind, val, ok := strings.Cut(f, ":")
		if !ok || val == "" {
			return c, fmt.Errorf("scope %q: want tenant:NAME, model:NAME, version:MODEL@VERSION or window:FROM-TO", f)
		}
		switch kind {
		case "tenant":
			if !s.hasTenant(val) {
				return c, fmt.Errorf("scope %q: no traffic of tenant %q", f, val)
			}
			c.Tenant = val
		case "model":
			if !s.hasModel(val) {
				return c, fmt.Errorf("scope %q: no traffic for model %q", f, val)
			}
			c.Model = val
		case "version":
			m, ver, ok := strings.Cut(val, "@")
			if !ok || !s.hasModel(m) || !s.hasVersion(m, ver) {
				return c, fmt.Errorf("scope %q: want version:MODEL@VERSION of a model the traffic asks for", f)
			}
			c.Version = val
		case "window":
			from, to, ok := strings.Cut(val, "-")
			a, err1 := time.ParseDuration(from)
			b, err2 := time.ParseDuration(to)
			if !ok || err1 != nil || err2 != nil {
				return c, fmt.Errorf("scope %q: want window:FROM-TO with durations, e.g. window:30s-60s", f)
			}
			i := slices.Index(s.Windows, a)
			if i < 0 || i+1 >= len(s.Windows) || s.Windows[i+1] != b {
				return c, fmt.Errorf("scope %q: not a window; the windows' bounds are %v", f, s.Windows)
			}
			c.Windowed, c.FromS, c.ToS = true, a.Seconds(), b.Seconds()
		default:
			return c, fmt.Errorf("scope %q: want tenant:, model:, version: or window:", f)
		}
	}
	groups := 0
	for _, g := range []string{c.Tenant, c.Model, c.Version} {
		if g != "" {
			groups++
		}
	}
	switch {
	case groups > 1:
		return c, errors.New("at most one of tenant:, model:, version:")
	case c.Windowed && c.Tenant == "" && !sampled[c.Metric]:
		return c, fmt.Errorf("a window alone scopes only the sampled metrics (%s); add tenant:NAME for %s", strings.Join(sortedKeys(sampled), ", "), c.Metric)
	case c.Windowed && (c.Model != "" || c.Version != ""):
		return c, errors.New("a window breaks down tenants only: use window: with tenant:")
	case groups > 0 && sampled[c.Metric]:
		return c, fmt.Errorf("%s is sampled over the whole batcher: it takes no tenant:, model: or version:", c.Metric)
	case groups > 0 && runOnly[c.Metric]:
		return c, fmt.Errorf("%s is reported for the whole run only", c.Metric)
	case groupOnly[c.Metric] && groups == 0:
		return c, fmt.Errorf("%s needs a tenant:, model: or version: scope", c.Metric)
	case groupOnly[c.Metric] && c.Windowed && c.Metric != "share":
		return c, fmt.Errorf("%s is reported for the whole run, not per window", c.Metric)
	}
	return c, nil
}

// reasons are the names of the reasons admission rejects for, as the
// report counts them (rejected_REASON).
func reasons() []string {
	var out []string
	for r := actors.ReasonInvalid; r <= actors.ReasonDraining; r++ {
		out = append(out, r.String())
	}
	return out
}

func (s *Scenario) hasTenant(name string) bool {
	for _, ph := range s.Traffic {
		if _, ok := ph.Tenants[name]; ok {
			return true
		}
	}
	return false
}

func (s *Scenario) hasModel(name string) bool {
	for _, ph := range s.Traffic {
		if slices.ContainsFunc(ph.Models, func(m Mix) bool { return m.Model == name }) {
			return true
		}
	}
	return false
}

// hasVersion reports whether requests for model can run on version: it
// is in the registry, or (without one) the traffic pins it.
func (s *Scenario) hasVersion(model, version string) bool {
	for _, m := range s.Models {
		if m.Name == model {
			return slices.ContainsFunc(m.Versions, func(v Version) bool { return v.Name == version })
		}
	}
	for _, ph := range s.Traffic {
		if slices.ContainsFunc(ph.Models, func(m Mix) bool { return m.Model == model && m.Version == version }) {
			return true
		}
	}
	return false
}

// CheckResult is one expectation's outcome.
type CheckResult struct {
	Check string `json:"check"`
	Line  int    `json:"line"`
	// Observed is the value found; absent when the scope had no data (no
	// completed request to take a percentile of), which fails the check.
	Observed *float64 `json:"observed"`
	Passed   bool     `json:"passed"`
	// Message says what failed, naming scenario, file, line, check and the
	// value observed; empty when passed.
	Message string `json:"message,omitempty"`
}

// Evaluate checks every expectation of the scenario against a report of
// one of its runs, in file order.
func (s *Scenario) Evaluate(rep *sim.Report) []CheckResult {
	out := make([]CheckResult, 0, len(s.checks))
	for _, c := range s.checks {
		x, ok := c.observe(rep)
		out = append(out, c.result(s.Name, s.file, x, ok))
	}
	return out
}

// result is the check's outcome on the value x observed (ok false: no
// data in its scope), its message naming the scenario and its file.
func (c Check) result(scenario, file string, x float64, ok bool) CheckResult {
	r := CheckResult{Check: c.Text, Line: c.Line}
	switch {
	case !ok:
		r.Message = fmt.Sprintf("scenario %q (%s:%d): expect %q: no data in that scope (nothing completed or sampled there)", scenario, file, c.Line, c.Text)
	default:
		r.Observed = &x
		r.Passed = c.holds(x)
		if !r.Passed {
			r.Message = fmt.Sprintf("scenario %q (%s:%d): expect %q: observed %s", scenario, file, c.Line, c.Text, strconv.FormatFloat(x, 'g', 6, 64))
		}
	}
	return r
}

func (c Check) holds(x float64) bool {
	switch c.Op {
	case "<":
		return x < c.Value
	case "<=":
		return x <= c.Value
	case ">":
		return x > c.Value
	case ">=":
		return x >= c.Value
	case "==":
		return x == c.Value
	case "!=":
		return x != c.Value
	}
	panic("scenarios: unknown operator " + c.Op)
}

// observe reads the check's metric in its scope; false when there is no
// data to read it from.
func (c Check) observe(rep *sim.Report) (float64, bool) {
	if sampled[c.Metric] {
		return c.observeSampled(rep)
	}
	if c.Tenant == "" && c.Model == "" && c.Version == "" {
		return observeRun(rep, c.Metric)
	}
	var groups map[string]sim.NameStats
	name := c.Tenant
	switch {
	case c.Windowed:
		for _, w := range rep.Windows {
			if w.FromS == c.FromS && w.ToS == c.ToS {
				groups = w.Tenants
			}
		}
	case c.Tenant != "":
		groups = rep.Tenants
	case c.Model != "":
		groups, name = rep.Models, c.Model
	default:
		groups, name = rep.Versions, c.Version
	}
	ns, ok := groups[name]
	if !ok {
		// The group sent nothing: counts are zero, percentiles unknown.
		ns = sim.NameStats{}
	}
	return observeGroup(ns, rep, c.Metric)
}

// tally is what the whole run and one group (tenant, model, version) both
// report, so the metrics they share are read in one place.
type tally struct {
	offered, completed, rejected, expired, failed, cancelled int64
	latencyMs                                                sim.Percentiles
	sloAttainment, throughputRPS, goodputRPS                 float64
	// sloDefined: some request was accepted and not cancelled.
	sloDefined bool
	rejectedBy map[string]int64
}

// observe reads a metric both scopes have; known is false for any other.
func (t tally) observe(metric string) (x float64, defined, known bool) {
	frac := func(n int64) (float64, bool, bool) {
		if t.offered == 0 {
			return 0, false, true
		}
		return float64(n) / float64(t.offered), true, true
	}
	lat := func(x float64) (float64, bool, bool) { return x, t.completed > 0, true }
	count := func(n int64) (float64, bool, bool) { return float64(n), true, true }
	switch metric {
	case "p50_ms":
		return lat(t.latencyMs.P50)
	case "p95_ms":
		return lat(t.latencyMs.P95)
	case "p99_ms":
		return lat(t.latencyMs.P99)
	case "max_ms":
		return lat(t.latencyMs.Max)
	case "slo_attainment":
		return t.sloAttainment, t.sloDefined, true
	case "throughput_rps":
		return t.throughputRPS, true, true
	case "goodput_rps":
		return t.goodputRPS, true, true
	case "offered":
		return count(t.offered)
	case "completed":
		return count(t.completed)
	case "rejected":
		return count(t.rejected)
	case "expired":
		return count(t.expired)
	case "failed":
		return count(t.failed)
	case "cancelled":
		return count(t.cancelled)
	case "completed_fraction":
		return frac(t.completed)
	case "rejected_fraction":
		return frac(t.rejected)
	case "expired_fraction":
		return frac(t.expired)
	case "failed_fraction":
		return frac(t.failed)
	}
	if reason, ok := strings.CutPrefix(metric, "rejected_"); ok {
		return count(t.rejectedBy[reason])
	}
	return 0, false, false
}

// observeRun reads a run-wide metric.
func observeRun(rep *sim.Report, metric string) (float64, bool) {
	q := rep.Requests
	all := tally{
		offered: q.Offered, completed: q.Completed, rejected: q.Rejected, expired: q.Expired,
		failed: q.Failed, cancelled: q.Cancelled, latencyMs: rep.LatencyMs,
		sloAttainment: rep.SLOAttainment, throughputRPS: rep.ThroughputRPS, goodputRPS: rep.GoodputRPS,
		sloDefined: q.Accepted > 0, rejectedBy: rep.Rejections,
	}
	if x, defined, known := all.observe(metric); known {
		return x, defined
	}
	lat := func(x float64) (float64, bool) { return x, q.Completed > 0 }
	switch metric {
	case "queue_p50_ms":
		return lat(rep.QueueMs.P50)
	case "queue_p95_ms":
		return lat(rep.QueueMs.P95)
	case "queue_p99_ms":
		return lat(rep.QueueMs.P99)
	case "compute_p50_ms":
		return lat(rep.ComputeMs.P50)
	case "compute_p95_ms":
		return lat(rep.ComputeMs.P95)
	case "compute_p99_ms":
		return lat(rep.ComputeMs.P99)
	case "device_hours", "device_hours_ratio", "scaled_devices_max", "scaled_devices_min", "scale_decisions":
		return observeScaling(rep, metric)
	case "accepted":
		return float64(q.Accepted), true
	case "lost":
		return float64(q.Lost), true
	case "duplicated":
		return float64(q.Duplicated), true
	case "retried":
		return float64(q.Retried), true
	case "violations":
		return float64(rep.Violations.Count), true
	case "device_utilisation", "device_utilization":
		return rep.DeviceUtilization, true
	case "device_busy_max", "device_busy_min":
		if len(rep.DeviceBusy) == 0 {
			return 0, false
		}
		x := rep.DeviceBusy[0]
		for _, b := range rep.DeviceBusy[1:] {
			if metric == "device_busy_max" {
				x = math.Max(x, b)
			} else {
				x = math.Min(x, b)
			}
		}
		return x, true
	case "batch_size_mean":
		return rep.BatchSizeMean, rep.Batches > 0
	case "batches":
		return float64(rep.Batches), true
	case "queued_high":
		return float64(rep.QueuedHigh), true
	case "fairness_jain":
		return rep.Fairness.JainThroughput, rep.Fairness.Tenants > 0
	case "fairness_jain_weighted":
		return rep.Fairness.JainWeighted, rep.Fairness.Tenants > 0
	}
	panic("scenarios: unknown run metric " + metric)
}

// observeGroup reads a metric of one tenant's, model's or version's
// figures.
func observeGroup(ns sim.NameStats, rep *sim.Report, metric string) (float64, bool) {
	group := tally{
		offered: ns.Offered, completed: ns.Completed, rejected: ns.Rejected, expired: ns.Expired,
		failed: ns.Failed, cancelled: ns.Cancelled, latencyMs: ns.LatencyMs,
		sloAttainment: ns.SLOAttainment, throughputRPS: ns.ThroughputRPS, goodputRPS: ns.GoodputRPS,
		sloDefined: ns.Offered-ns.Rejected-ns.Cancelled > 0, rejectedBy: ns.RejectedBy,
	}
	if x, defined, known := group.observe(metric); known {
		return x, defined
	}
	switch metric {
	case "queue_mean_ms":
		return ns.QueueMeanMs, ns.Completed > 0
	case "compute_mean_ms":
		return ns.ComputeMeanMs, ns.Completed > 0
	case "share":
		if rep.Requests.Offered == 0 {
			return 0, false
		}
		return float64(ns.Offered) / float64(rep.Requests.Offered), true
	}
	panic("scenarios: unknown group metric " + metric)
}

// observeSampled reads a metric of the autoscaling readings or the
// timeline, over the check's window or the whole run.
func (c Check) observeSampled(rep *sim.Report) (float64, bool) {
	in := func(t float64) bool { return !c.Windowed || (t >= c.FromS && t < c.ToS) }
	agg := math.NaN()
	n := 0
	take := func(x float64, better func(a, b float64) float64) {
		if n == 0 {
			agg = x
		} else {
			agg = better(agg, x)
		}
		n++
	}
	sum := func(a, b float64) float64 { return a + b }
	switch c.Metric {
	case "autoscale_max_devices", "autoscale_min_devices", "autoscale_mean_devices", "queue_depth_max", "busy_fraction_mean",
		"keys_max", "batch_size_sampled_mean":
		for _, a := range rep.Autoscale {
			// A reading at T describes the interval that ends at T.
			if !in(a.T - 1e-9) {
				continue
			}
			switch c.Metric {
			case "autoscale_max_devices":
				take(float64(a.DevicesNeeded), math.Max)
			case "autoscale_min_devices":
				take(float64(a.DevicesNeeded), math.Min)
			case "autoscale_mean_devices":
				take(float64(a.DevicesNeeded), sum)
			case "queue_depth_max":
				take(float64(a.QueueDepth), math.Max)
			case "busy_fraction_mean":
				take(a.BusyFractionMean, sum)
			case "keys_max":
				take(float64(a.Keys), math.Max)
			case "batch_size_sampled_mean":
				take(a.BatchSizeMean, sum)
			}
		}
		if n > 0 && (c.Metric == "autoscale_mean_devices" || c.Metric == "busy_fraction_mean" || c.Metric == "batch_size_sampled_mean") {
			agg /= float64(n)
		}
	default:
		for _, st := range rep.Timeline {
			if !in(st.FromS) || st.Offered == 0 {
				continue
			}
			switch c.Metric {
			case "p95_step_max_ms":
				if st.Completed > 0 {
					take(st.LatencyMs.P95, math.Max)
				}
			case "p99_step_max_ms":
				if st.Completed > 0 {
					take(st.LatencyMs.P99, math.Max)
				}
			case "slo_attainment_step_min":
				if st.Offered > st.Rejected {
					take(st.SLOAttainment, math.Min)
				}
			}
		}
	}
	return agg, n > 0
}

// observeScaling reads the fleet's size and cost: Report.Scaling, or the
// static fleet of Workload.Devices when the run had no autoscaler.
func observeScaling(rep *sim.Report, metric string) (float64, bool) {
	sc := rep.Scaling
	if sc == nil {
		static := float64(rep.Workload.Devices)
		sc = &sim.ScalingReport{
			DeviceHours: static * rep.Workload.DurationS / 3600, DeviceHoursRatio: 1,
			DevicesMin: rep.Workload.Devices, DevicesMax: rep.Workload.Devices,
		}
	}
	switch metric {
	case "device_hours":
		return sc.DeviceHours, true
	case "device_hours_ratio":
		return sc.DeviceHoursRatio, true
	case "scaled_devices_max":
		return float64(sc.DevicesMax), true
	case "scaled_devices_min":
		return float64(sc.DevicesMin), true
	}
	return float64(len(sc.Decisions)), true
}
