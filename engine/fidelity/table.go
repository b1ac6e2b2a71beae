package fidelity

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the comparison.
func (r Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	p("workload\t%g req/s Poisson, %d devices, batch max %d, latency %g ms, SLO %g ms, %g s (first %g s left out)",
		r.RateRPS, r.Devices, r.BatchMax, r.LatencyMs, r.SLOMs, r.DurationS, r.WarmupS)
	p("")
	p("\tcompleted\tp50 ms\tp95 ms\tp99 ms\tthroughput/s\trejected")
	p("live\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%d", r.Live.Completed, r.Live.P50Ms, r.Live.P95Ms, r.Live.P99Ms, r.Live.ThroughputRPS, r.Live.Rejected)
	p("sim\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%d", r.Sim.Completed, r.Sim.P50Ms, r.Sim.P95Ms, r.Sim.P99Ms, r.Sim.ThroughputRPS, r.Sim.Rejected)
	p("error\t\t%+.2f%%\t%+.2f%%\t%+.2f%%\t%+.2f%%\t", 100*r.RelErr.P50, 100*r.RelErr.P95, 100*r.RelErr.P99, 100*r.RelErr.Throughput)
	if r.Replay != nil && r.ReplayRelErr != nil {
		f, e := r.Replay, r.ReplayRelErr
		p("sim replay\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%d", f.Completed, f.P50Ms, f.P95Ms, f.P99Ms, f.ThroughputRPS, f.Rejected)
		p("error\t\t%+.2f%%\t%+.2f%%\t%+.2f%%\t%+.2f%%\t(the live arrivals replayed: no arrival noise)", 100*e.P50, 100*e.P95, 100*e.P99, 100*e.Throughput)
	}
	p("")
	sv := r.LiveServer
	p("live server\tp50 %.2f, p95 %.2f, p99 %.2f ms inside the server (queue p99 %.2f, compute p99 %.2f)",
		sv.Latency.P50, sv.Latency.P95, sv.Latency.P99, sv.Queue.P99, sv.Compute.P99)
	p("http overhead\t%.3f ms mean (client - server); sim net delay %.3f ms per hop", r.HTTPOverheadMs, r.NetDelayMs)
	p("generator\tsend lag p99 %.2f ms, %d other, %d dropped", r.SendLagP99Ms, r.LiveOther, r.LiveDropped)
	p("load average\t%.2f before, %.2f after", r.LoadAvgBefore, r.LoadAvgAfter)
	verdict := "within"
	if !r.Pass {
		verdict = "NOT within"
	}
	p("verdict\tp50/p95/p99 %s %g%%", verdict, r.TargetPct)
	return tw.Flush()
}

// WriteTable prints the cluster comparison: over all requests, then front
// by front.
func (r ClusterResult) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	p("workload\t%d nodes x %d devices, %g req/s Poisson over the fronts, batch max %d, latency %g ms, SLO %g ms, %g s (first %g s left out)",
		r.Nodes, r.DevicesEach, r.RateRPS, r.BatchMax, r.LatencyMs, r.SLOMs, r.DurationS, r.WarmupS)
	p("")
	p("\tcompleted\tp50 ms\tp95 ms\tp99 ms\tthroughput/s\trejected")
	row := func(name string, f Figures) {
		p("%s\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%d", name, f.Completed, f.P50Ms, f.P95Ms, f.P99Ms, f.ThroughputRPS, f.Rejected)
	}
	errRow := func(e RelErrors) {
		p("error\t\t%+.2f%%\t%+.2f%%\t%+.2f%%\t%+.2f%%\t", 100*e.P50, 100*e.P95, 100*e.P99, 100*e.Throughput)
	}
	row("live", r.Live)
	row("sim", r.Sim)
	errRow(r.RelErr)
	for _, f := range r.Fronts {
		owner := ""
		if f.Node == r.Owner {
			owner = " (owner)"
		}
		p("")
		row("live "+f.Node+owner, f.Live)
		row("sim "+f.Node, f.Sim)
		errRow(f.RelErr)
	}
	p("")
	p("link\tsim %.3f ms a hop between nodes; live HTTP overhead (client - server) mean %.3f ms, p99 %.3f ms: one live request's drawn for each simulated one", r.LinkLatencyMs, r.HTTPOverheadMs, r.HTTPOverheadP99Ms)
	p("generator\tsend lag p99 %.2f ms, %d other, %d dropped", r.SendLagP99Ms, r.LiveOther, r.LiveDropped)
	p("load average\t%.2f before, %.2f after", r.LoadAvgBefore, r.LoadAvgAfter)
	verdict := "within"
	if !r.Pass {
		verdict = "NOT within"
	}
	p("verdict\tp50/p95/p99 over all requests %s %g%%", verdict, r.TargetPct)
	return tw.Flush()
}
