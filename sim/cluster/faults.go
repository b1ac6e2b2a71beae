package cluster

import (
	"fmt"
	"strings"
	"time"

	"github.com/batchd/batchd/sim/swim"
)

// FaultsLimit bounds the faults ParseFaults accepts.
const FaultsLimit = 1000

// ParseFaults reads a comma-separated list of true events:
//
//	crash:NODE@T           the node stops at T
//	restart:NODE@T         it comes back at T, at a new incarnation
//	leave:NODE@T           it leaves gracefully at T
//	partition:A|B@T1-T2    nodes A (joined by +) and B cut off both ways
//	oneway:A|B@T1-T2       only A's messages to B are lost
//
// with durations as Go writes them (10s, 1m30s) and nodes by name (n000,
// n001, ...). An empty string is no fault.
func ParseFaults(spec string) ([]swim.Event, error) {
	var out []swim.Event
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	for i, f := range strings.Split(spec, ",") {
		if i >= FaultsLimit {
			return nil, fmt.Errorf("faults: more than %d", FaultsLimit)
		}
		kind, rest, ok := strings.Cut(strings.TrimSpace(f), ":")
		what, when, ok2 := strings.Cut(rest, "@")
		if !ok || !ok2 || what == "" {
			return nil, fmt.Errorf("faults: %q: want KIND:WHAT@WHEN", f)
		}
		e := swim.Event{Node: what}
		switch kind {
		case "crash", "restart", "leave":
			e.Kind = map[string]swim.EventKind{"crash": swim.Crash, "restart": swim.Restart, "leave": swim.Leave}[kind]
			at, err := time.ParseDuration(when)
			if err != nil || at < 0 {
				return nil, fmt.Errorf("faults: %q: bad time %q", f, when)
			}
			e.At = at
		case "partition", "oneway":
			a, b, ok := strings.Cut(what, "|")
			from, to, ok2 := strings.Cut(when, "-")
			if !ok || !ok2 || a == "" || b == "" {
				return nil, fmt.Errorf("faults: %q: want %s:A|B@T1-T2", f, kind)
			}
			t1, err1 := time.ParseDuration(from)
			t2, err2 := time.ParseDuration(to)
			if err1 != nil || err2 != nil || t1 < 0 || t2 <= t1 {
				return nil, fmt.Errorf("faults: %q: want 0 <= T1 < T2", f)
			}
			e = swim.Event{Kind: swim.Partition, A: strings.Split(a, "+"), B: strings.Split(b, "+"),
				At: t1, Until: t2, OneWay: kind == "oneway"}
		default:
			return nil, fmt.Errorf("faults: %q: unknown kind %q (crash, restart, leave, partition, oneway)", f, kind)
		}
		out = append(out, e)
	}
	return out, nil
}

// Summary is the report as a few lines of text.
func (r Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nodes %d, seed %d, trace %016x, %d events in %.2f s of wall time\n", r.Nodes, r.Seed, r.TraceHash, r.Events, r.WallSeconds)
	fmt.Fprintf(&b, "requests: offered %d, accepted %d, completed %d, failed %d, rejected %d, expired %d, cancelled %d\n",
		r.Offered, r.Accepted, r.Completed, r.Failed, r.Rejected, r.Expired, r.Cancelled)
	fmt.Fprintf(&b, "checks: lost %d, answered twice %d, died with their front %d, violations %d\n", r.Lost, r.Twice, r.WithFront, r.ViolationCount)
	fmt.Fprintf(&b, "latency ms: p50 %.1f, p95 %.1f, p99 %.1f; batches %d (mean %.1f), declined %d, messages lost %d\n",
		r.LatencyP50Ms, r.LatencyP95Ms, r.LatencyP99Ms, r.Batches, r.BatchMean, r.Declined, r.NetLost)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "violation: %s\n", v)
	}
	return b.String()
}
