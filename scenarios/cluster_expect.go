package scenarios

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/batchd/batchd/sim/cluster"
)

// clusterMetricDoc says what each metric of a cluster scenario's checks
// is; its keys are every metric such a check may name. They read
// sim/cluster.Report.
var clusterMetricDoc = map[string]string{
	"offered":            "requests the clients sent",
	"accepted":           "requests a live front accepted",
	"completed":          "requests completed (with window:, of those that arrived in it)",
	"failed":             "requests failed (backend errors, attempts used up)",
	"rejected":           "requests rejected at admission",
	"expired":            "requests answered Expired (their deadline could not be met, or nothing came by deadline + grace)",
	"cancelled":          "requests cancelled",
	"lost":               "accepted requests whose front lived to the end and never got an answer (must be 0)",
	"twice":              "requests whose waiter got more than one answer (must be 0)",
	"with_front":         "accepted requests whose front crashed before their answer (their connection died with the node)",
	"violations":         "invariant breaks the cluster checker found (must be 0)",
	"completed_fraction": "completed over accepted",
	"not_completed":      "accepted and not completed (expired, failed, rejected, died with their front, lost)",
	"p50_ms":             "latency p50 of the completed requests, arrival to answer, ms",
	"p95_ms":             "latency p95, ms",
	"p99_ms":             "latency p99, ms",
	"batches":            "batches run",
	"batch_size_mean":    "mean items per batch",
	"declined":           "batches a device sent back because it had taken another accumulator's",
	"net_lost":           "messages the network lost (loss, partitions, a node down)",
	"false_deaths":       "SWIM declarations of death about a node that was up",
	"arrived":            "requests accepted, by arrival second (with window:, those that arrived in it)",
	"late":               "requests completed past the SLO or expired (with window:, of those that arrived in it)",
	"late_fraction":      "late over arrived (with window:, in it)",
	"p99_step_max_ms":    "the largest p99 of any second of arrivals (with window:, of the seconds that overlap it), seconds with a completed request only",
	"detected_s":         "when a surviving member first declared the node dead (after its last crash), s from the start; node:NODE only",
	"detection_ms":       "detected_s less the time of the node's last fault at or before it (crash, leave, partition start), ms; node:NODE only",
}

// ClusterMetrics returns the metric names a cluster scenario's check may
// use, each with what it measures.
func ClusterMetrics() map[string]string { return clusterMetricDoc }

// clusterWindowed are the metrics read from the report's seconds, which
// a window may scope.
var clusterWindowed = map[string]bool{"arrived": true, "completed": true, "late": true, "late_fraction": true, "p99_step_max_ms": true}

// clusterPerNode are the metrics of one node, which need node:.
var clusterPerNode = map[string]bool{"detected_s": true, "detection_ms": true}

// clusterCheck is one expectation of a cluster scenario: the one-node
// syntax, with the scopes node:NODE and window:FROM-TO, where a bound is
// a duration or detected(NODE)[+DURATION] (the node's detection, known
// once the run is over).
type clusterCheck struct {
	Check
	Node     string
	from, to bound
}

// bound is a window's bound: At, after the detection of Node if given.
type bound struct {
	Node string
	At   time.Duration
}

// resolve is the bound's time in a run, false if Node was not detected.
func (b bound) resolve(rep *cluster.Report) (time.Duration, bool) {
	if b.Node == "" {
		return b.At, true
	}
	d, ok := rep.Detected[b.Node]
	return d + b.At, ok
}

// parseCheck parses one expectation of the cluster scenario.
func (s *ClusterScenario) parseCheck(text string) (clusterCheck, error) {
	base, scopes, err := splitCheck(text, func(metric string) error {
		if _, ok := clusterMetricDoc[metric]; !ok {
			return fmt.Errorf("unknown metric %q (known: %s)", metric, strings.Join(sortedKeys(clusterMetricDoc), ", "))
		}
		return nil
	})
	c := clusterCheck{Check: base}
	if err != nil {
		return c, err
	}
	for _, f := range scopes {
		kind, val, ok := strings.Cut(f, ":")
		if !ok || val == "" {
			return c, fmt.Errorf("scope %q: want node:NODE or window:FROM-TO", f)
		}
		switch kind {
		case "node":
			if c.Node, err = s.nodeName(val); err != nil {
				return c, fmt.Errorf("scope %q: %w", f, err)
			}
		case "window":
			from, to, ok := cutTopLevel(val, '-')
			if !ok {
				return c, fmt.Errorf("scope %q: want window:FROM-TO (a bound: a duration, or detected(NODE)+DURATION)", f)
			}
			if c.from, err = s.parseBound(from); err == nil {
				c.to, err = s.parseBound(to)
			}
			if err != nil {
				return c, fmt.Errorf("scope %q: %w", f, err)
			}
			if c.from.Node == c.to.Node && c.from.At >= c.to.At {
				return c, fmt.Errorf("scope %q: an empty window", f)
			}
			c.Windowed = true
		default:
			return c, fmt.Errorf("scope %q: want node: or window:", f)
		}
	}
	switch {
	case clusterPerNode[c.Metric] && c.Node == "":
		return c, fmt.Errorf("%s is a node's: add node:NODE", c.Metric)
	case !clusterPerNode[c.Metric] && c.Node != "":
		return c, fmt.Errorf("%s is the cluster's: node: scopes only %s", c.Metric, strings.Join(sortedKeys(clusterPerNode), ", "))
	case c.Windowed && !clusterWindowed[c.Metric]:
		return c, fmt.Errorf("a window scopes only the per-second figures (%s)", strings.Join(sortedKeys(clusterWindowed), ", "))
	}
	return c, nil
}

// nodeName resolves a node of a check: a name or a reference by model.
func (s *ClusterScenario) nodeName(ref string) (string, error) {
	name, err := s.resolveNodes(ref)
	if err != nil {
		return "", err
	}
	for _, n := range s.names {
		if n == name {
			return name, nil
		}
	}
	return "", fmt.Errorf("no node %q (the nodes are n000 to %s, or owner(MODEL), nonowner(MODEL))", ref, cluster.NodeName(len(s.names)-1))
}

// parseBound reads a window's bound: DURATION or detected(NODE)[+DURATION].
func (s *ClusterScenario) parseBound(text string) (bound, error) {
	ref, ok := strings.CutPrefix(text, "detected(")
	if !ok {
		d, err := time.ParseDuration(text)
		if err != nil || d < 0 {
			return bound{}, fmt.Errorf("bound %q: want a duration or detected(NODE)+DURATION", text)
		}
		return bound{At: d}, nil
	}
	end := strings.LastIndexByte(ref, ')')
	if end < 0 {
		return bound{}, fmt.Errorf("bound %q: no closing parenthesis", text)
	}
	node, err := s.nodeName(ref[:end])
	if err != nil {
		return bound{}, err
	}
	b := bound{Node: node}
	if rest := ref[end+1:]; rest != "" {
		off, ok := strings.CutPrefix(rest, "+")
		d, err := time.ParseDuration(off)
		if !ok || err != nil || d < 0 {
			return bound{}, fmt.Errorf("bound %q: want detected(NODE)+DURATION", text)
		}
		b.At = d
	}
	return b, nil
}

// cutTopLevel cuts s at the first sep outside parentheses.
func cutTopLevel(s string, sep byte) (string, string, bool) {
	depth := 0
	for i := range len(s) {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case sep:
			if depth == 0 {
				return s[:i], s[i+1:], true
			}
		}
	}
	return s, "", false
}

// Evaluate checks every expectation against a report of one of the
// scenario's runs, in file order.
func (s *ClusterScenario) Evaluate(rep *cluster.Report) []CheckResult {
	out := make([]CheckResult, 0, len(s.checks))
	for _, c := range s.checks {
		x, ok := c.observe(s, rep)
		out = append(out, c.result(s.Name, s.file, x, ok))
	}
	return out
}

// observe reads the check's metric in its scope; false when there is no
// data to read it from.
func (c clusterCheck) observe(s *ClusterScenario, rep *cluster.Report) (float64, bool) {
	if clusterPerNode[c.Metric] {
		at, ok := rep.Detected[c.Node]
		if !ok {
			return 0, false
		}
		if c.Metric == "detected_s" {
			return at.Seconds(), true
		}
		last, found := time.Duration(0), false
		for _, f := range s.faults {
			if f.at <= at && f.kind != "restart" && slices.Contains(f.nodes, c.Node) && f.at >= last {
				last, found = f.at, true
			}
		}
		return float64(at-last) / float64(time.Millisecond), found
	}
	if clusterWindowed[c.Metric] && (c.Windowed || c.Metric != "completed") {
		return c.observeSeconds(rep)
	}
	count := func(n int64) (float64, bool) { return float64(n), true }
	lat := func(x float64) (float64, bool) { return x, rep.Completed > 0 }
	switch c.Metric {
	case "offered":
		return count(rep.Offered)
	case "accepted":
		return count(rep.Accepted)
	case "completed":
		return count(rep.Completed)
	case "failed":
		return count(rep.Failed)
	case "rejected":
		return count(rep.Rejected)
	case "expired":
		return count(rep.Expired)
	case "cancelled":
		return count(rep.Cancelled)
	case "lost":
		return count(rep.Lost)
	case "twice":
		return count(rep.Twice)
	case "with_front":
		return count(rep.WithFront)
	case "violations":
		return count(rep.ViolationCount)
	case "completed_fraction":
		return float64(rep.Completed) / float64(max(rep.Accepted, 1)), rep.Accepted > 0
	case "not_completed":
		return count(rep.Accepted - rep.Completed)
	case "p50_ms":
		return lat(rep.LatencyP50Ms)
	case "p95_ms":
		return lat(rep.LatencyP95Ms)
	case "p99_ms":
		return lat(rep.LatencyP99Ms)
	case "batches":
		return count(rep.Batches)
	case "batch_size_mean":
		return rep.BatchMean, rep.Batches > 0
	case "declined":
		return count(rep.Declined)
	case "net_lost":
		return count(rep.NetLost)
	case "false_deaths":
		return float64(rep.Membership.FalseDeaths), true
	}
	panic("scenarios: unknown cluster metric " + c.Metric)
}

// observeSeconds reads a per-second metric over the seconds of arrivals
// that overlap the check's window (all of them without one); no data when
// none does.
func (c clusterCheck) observeSeconds(rep *cluster.Report) (float64, bool) {
	from, to := time.Duration(0), time.Duration(math.MaxInt64)
	if c.Windowed {
		var ok1, ok2 bool
		from, ok1 = c.from.resolve(rep)
		to, ok2 = c.to.resolve(rep)
		if !ok1 || !ok2 || from >= to {
			return 0, false
		}
	}
	var arrived, completed, late int64
	p99, steps, seconds := 0.0, 0, 0
	for _, w := range rep.Windows {
		start := time.Duration(w.StartS * float64(time.Second))
		if start+time.Second <= from || start >= to {
			continue
		}
		seconds++
		arrived += w.Arrived
		completed += w.Completed
		late += w.Late
		if w.Completed > 0 {
			p99 = max(p99, w.LatencyP99Ms)
			steps++
		}
	}
	if seconds == 0 {
		return 0, false // the window is past the run's arrivals
	}
	switch c.Metric {
	case "arrived":
		return float64(arrived), true
	case "completed":
		return float64(completed), true
	case "late":
		return float64(late), true
	case "late_fraction":
		return float64(late) / float64(max(arrived, 1)), arrived > 0
	case "p99_step_max_ms":
		return p99, steps > 0
	}
	panic("scenarios: unknown per-second metric " + c.Metric)
}
