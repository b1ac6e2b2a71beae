package plan

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Why are the figures that explain the gap between the formula and the
// simulator's fleet, measured at that fleet, and the sentences that say so.
type Why struct {
	// BatchSizeMean is the batch the linger fills at the fleet, CostMs
	// what such a batch costs, Fill its fraction of the batch max, and
	// FormulaAtFill the formula with that batch and cost instead of a
	// full batch's (devices at 100% busy).
	BatchSizeMean float64 `json:"batch_size_mean"`
	CostMs        float64 `json:"cost_ms"`
	Fill          float64 `json:"fill"`
	FormulaAtFill int     `json:"formula_at_fill"`
	// StaggerMs is the mean gap between two devices freeing up (that
	// batch's cost over the fleet): the longest a batch waits for a
	// device it could have had. StaggerRequests arrive in it.
	StaggerMs       float64 `json:"stagger_ms"`
	StaggerRequests float64 `json:"stagger_requests"`
	// Keys is the most compatibility keys with traffic at once; each
	// gathers about StaggerRequests / Keys per batch.
	Keys int `json:"keys"`
	// Below is the fleet of one device fewer, if it was simulated.
	Below *Probe `json:"below,omitempty"`
	// Lines say it in words.
	Lines []string `json:"lines"`
}

// explain fills Why from the plan's probes.
func explain(r Result, opts Options, below *Probe, cost float64) Why {
	f, p, n := r.Formula, r.Fleet, r.Devices
	w := Why{BatchSizeMean: p.BatchSizeMean, CostMs: cost, Keys: max(p.Keys, 1), Below: below}
	if f.BatchMax > 0 {
		w.Fill = round(p.BatchSizeMean/float64(f.BatchMax), 4)
	}
	if p.BatchSizeMean > 0 {
		w.FormulaAtFill = ceil(opts.RPS * cost / 1e3 / p.BatchSizeMean)
	}
	w.StaggerMs = round(cost/float64(n), 3)
	w.StaggerRequests = round(opts.RPS*w.StaggerMs/1e3, 1)

	add := func(format string, args ...any) { w.Lines = append(w.Lines, fmt.Sprintf(format, args...)) }
	add("Batch fill: at %s a batch holds %.1f of %d requests on average (%.0f%%). The formula counts full batches; with the batch the linger really fills (%gms each) the work is %g × %gms / %.1f = %.2f devices' worth of busy time.",
		devices(n, "", ""), p.BatchSizeMean, f.BatchMax, 100*w.Fill, cost, opts.RPS, cost, p.BatchSizeMean, opts.RPS*cost/1e3/p.BatchSizeMean)
	stagger := fmt.Sprintf("Stagger: %d devices free up one every %gms / %d = %.1fms on average, and the batcher holds a free device no longer than that (waiting longer fills no batch the next device would not), so a batch gathers about %g × %.1fms = %.0f requests",
		n, cost, n, w.StaggerMs, opts.RPS, w.StaggerMs, w.StaggerRequests)
	if w.StaggerRequests >= float64(f.BatchMax) {
		stagger += fmt.Sprintf(": more than the batch max, so batches fill and the devices run back to back.")
	} else {
		stagger += fmt.Sprintf(", below the batch max of %d: more devices mean smaller batches.", f.BatchMax)
	}
	add("%s", stagger)
	room := opts.SLO.Seconds() - cost/1e3 // what the SLO leaves a batch to gather in
	switch {
	case w.Keys == 1:
		add("Keys: one compatibility key, so no fragmentation.")
	case room > 0:
		perKey := opts.RPS / float64(w.Keys)
		keys := fmt.Sprintf("Keys: %d compatibility keys (model, version, parameters, length bucket) had traffic at once, about %.0f req/s each, and requests of different keys never share a batch: in the %.0fms the SLO leaves past a batch's cost a key gathers about %.1f requests",
			w.Keys, perKey, room*1e3, perKey*room)
		if perKey*room < float64(f.BatchMax) {
			keys += ", so no fleet fills a batch past that."
		} else {
			keys += ", enough for a full batch: fragmentation costs little here."
		}
		add("%s", keys)
	default:
		add("Keys: %d compatibility keys had traffic at once; requests of different keys never share a batch.", w.Keys)
	}
	load := opts.RPS / (float64(n) * f.Capacity)
	floor := fmt.Sprintf("Floor: a device carries at most %.0f req/s (every batch at its most efficient size), so %s the fewest that could hold %g req/s with at most %.2f%% unserved; %d devices run at %.1f%% of that capacity.",
		f.Capacity, devices(f.Floor, "is", "are"), opts.RPS, 100*opts.UnservedMax, n, 100*load)
	switch {
	case below != nil:
		floor += fmt.Sprintf(" One device fewer, %d, does not hold: %s (p95 %.1fms, p99 %.1fms, %.0f%% busy).", below.Devices, below.Why, below.P95Ms, below.P99Ms, 100*below.Utilization)
	case n == f.Floor && n > 1:
		floor += fmt.Sprintf(" One device fewer, %d, carries at most %.0f req/s and must leave %.1f%% unserved.", n-1, float64(n-1)*f.Capacity, 100*(1-float64(n-1)*f.Capacity/opts.RPS))
	}
	if load > 0.95 {
		floor += " With so little spare capacity the queue swings widely (a Poisson queue at 100% has no bound): a rise in the rate is shed, which the formula's headroom is for."
	}
	add("%s", floor)
	diff := f.WithHeadroom - n
	verb := "more"
	if diff < 0 {
		verb = "fewer"
	}
	add("Headroom: the formula with %.0f%% headroom asks for %d devices, %d (%.0f%%) %s than the simulator's %d, which run %.0f%% busy at p95 %.1fms.",
		100*f.Headroom, f.WithHeadroom, int(math.Abs(float64(diff))), 100*math.Abs(float64(diff))/float64(n), verb, n, 100*p.Utilization, p.P95Ms)
	return w
}

// WriteText writes the plan for a reader: the formula, the simulator's
// fleet, the probes and why the two differ.
func (r Result) WriteText(w io.Writer) error {
	f, p := r.Formula, r.Fleet
	var b strings.Builder
	fmt.Fprintf(&b, "plan: %g req/s, batch max %d, %gms per full batch, p95 <= %gms (seed %d; each probe %gs warm-up + %gs measured)\n",
		r.RPS, f.BatchMax, f.LatencyMs, r.SLOMs, r.Seed, r.WarmupS, r.MeasureS)
	if len(r.ModelSLOs) > 0 {
		fmt.Fprintf(&b, "models with an SLO of their own are held to it (ms): %v\n", r.ModelSLOs)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "formula    devices = ceil(rps × latency / batch) = ceil(%g × %gms / %d) = ceil(%g) = %d\n", r.RPS, f.LatencyMs, f.BatchMax, f.Raw, f.Devices)
	fmt.Fprintf(&b, "           with %.0f%% headroom: ceil(%d / %g) = %d\n", 100*f.Headroom, f.Devices, f.Headroom, f.WithHeadroom)
	fmt.Fprintf(&b, "simulator  %d devices hold it: p95 %.1fms, p99 %.1fms, utilisation %.1f%%, mean batch %.1f, unserved %.3f%% (at most %.3f%%), lost %d\n\n",
		r.Devices, p.P95Ms, p.P99Ms, 100*p.Utilization, p.BatchSizeMean, 100*p.Unserved, 100*r.UnservedMax, p.Lost)
	fmt.Fprintf(&b, "probes (from the floor, %s, up, then halving the gap):\n", devices(f.Floor, "", ""))
	fmt.Fprintf(&b, "  %7s  %5s  %8s  %8s  %6s  %10s  %4s  %8s  %s\n", "devices", "holds", "p95 ms", "p99 ms", "busy", "mean batch", "keys", "unserved", "why not")
	for _, q := range r.Probes {
		holds := "yes"
		if !q.Holds {
			holds = "no"
		}
		fmt.Fprintf(&b, "  %7d  %5s  %8.1f  %8.1f  %5.1f%%  %10.1f  %4d  %7.3f%%  %s\n",
			q.Devices, holds, q.P95Ms, q.P99Ms, 100*q.Utilization, q.BatchSizeMean, q.Keys, 100*q.Unserved, q.Why)
	}
	b.WriteString("\nwhy they differ:\n")
	for _, l := range r.Why.Lines {
		fmt.Fprintf(&b, "  - %s\n", l)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// devices is "n devices" (or "1 device") followed by the verb, in the
// singular or the plural.
func devices(n int, one, many string) string {
	s := fmt.Sprintf("%d devices %s", n, many)
	if n == 1 {
		s = fmt.Sprintf("1 device %s", one)
	}
	return strings.TrimSpace(s)
}
