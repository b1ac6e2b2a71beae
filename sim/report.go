package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batchd/batchd/actors"
)

// Report is the outcome of one simulated run: the request ledger's counts,
// latency percentiles, throughput, device utilisation, batch sizes and the
// invariant violations found. Its JSON form is what `batchd sim --json`
// prints and what RESULTS.md quotes, so the field names are stable.
type Report struct {
	Seed uint64 `json:"seed"`
	// TraceHash is the world's hash of its event trace, in hex: the same
	// seed and configuration must give the same hash (invariant 9).
	TraceHash string        `json:"trace_hash"`
	Workload  Workload      `json:"workload"`
	Requests  RequestCounts `json:"requests"`
	// LatencyMs is end to end (reply delivery − arrival) over completed
	// requests; QueueMs (dispatch − enqueue) and ComputeMs (done −
	// dispatch) split it.
	LatencyMs Percentiles `json:"latency_ms"`
	QueueMs   Percentiles `json:"queue_ms"`
	ComputeMs Percentiles `json:"compute_ms"`
	// SLOAttainment is the fraction of accepted requests completed by
	// their deadline; requests the client cancelled are left out, as no
	// answer was wanted for them.
	SLOAttainment float64 `json:"slo_attainment"`
	// ThroughputRPS is completions per simulated second of the safety
	// phase (completions during the drain are not counted).
	ThroughputRPS float64 `json:"throughput_rps"`
	// DeviceUtilization is total device busy time over devices × simulated
	// time (the drain included).
	DeviceUtilization float64 `json:"device_utilization"`
	// Batches counts the batches dispatched (retries included).
	Batches       int64         `json:"batches"`
	BatchSizeMean float64       `json:"batch_size_mean"`
	BatchSizes    []BatchBucket `json:"batch_sizes"`
	// QueuedHigh is the most items the batcher held queued at once.
	QueuedHigh       int              `json:"queued_high"`
	SimulatedSeconds float64          `json:"simulated_seconds"`
	WallSeconds      float64          `json:"wall_seconds"`
	Events           int64            `json:"events"`
	Violations       ViolationSummary `json:"violations"`
}

// Workload echoes the run's main parameters, so a report reads on its own.
type Workload struct {
	RateRPS   float64 `json:"rate_rps"`
	Devices   int     `json:"devices"`
	BatchMax  int     `json:"batch_max"`
	LatencyMs float64 `json:"latency_ms"`
	SLOMs     float64 `json:"slo_ms"`
	DurationS float64 `json:"duration_s"`
	Faults    bool    `json:"faults"`
}

// RequestCounts are per-outcome request counts. Offered is what the traffic
// sent; Accepted is what the batcher did not reject; Lost were submitted and
// never answered; Duplicated counts extra replies.
type RequestCounts struct {
	Offered    int64 `json:"offered"`
	Accepted   int64 `json:"accepted"`
	Completed  int64 `json:"completed"`
	Rejected   int64 `json:"rejected"`
	Expired    int64 `json:"expired"`
	Failed     int64 `json:"failed"`
	Cancelled  int64 `json:"cancelled"`
	Lost       int64 `json:"lost"`
	Duplicated int64 `json:"duplicated"`
}

// BatchBucket counts the batches whose size is in [Min, Max].
type BatchBucket struct {
	Min   int   `json:"min"`
	Max   int   `json:"max"`
	Count int64 `json:"count"`
}

// ViolationSummary is the number of invariant violations and the first few,
// described. A lost request is one violation (invariant 1), as is each
// duplicate reply, so Count is zero only if Lost and Duplicated are.
type ViolationSummary struct {
	Count int64    `json:"count"`
	First []string `json:"first"`
	// ByKind splits Count by kind, for tests; it is not part of the JSON
	// form.
	ByKind [ViolationKinds]int64 `json:"-"`
}

// OK reports whether the run kept every checked invariant: no violation, no
// lost and no duplicated request.
func (r Report) OK() bool {
	return r.Violations.Count == 0 && r.Requests.Lost == 0 && r.Requests.Duplicated == 0
}

// reportInput is what a report is built from, gathered by Run.
type reportInput struct {
	seed      uint64
	traceHash uint64
	workload  Workload
	offered   int64
	ledger    *Ledger
	busy      time.Duration
	devices   int
	safety    time.Duration
	simulated time.Duration
	wall      time.Duration
	events    int64
	batchMax  int
	// extra are violations found outside the ledger (device overlaps,
	// undelivered submits), and extraKinds their kinds, one per extra.
	extra      []string
	extraKinds []ViolationKind
}

// batchBuckets is how many buckets the batch size distribution has.
const batchBuckets = 10

func newReport(in reportInput) Report {
	l := in.ledger
	c := l.Counts()
	rep := Report{
		Seed:      in.seed,
		TraceHash: fmt.Sprintf("%016x", in.traceHash),
		Workload:  in.workload,
		Requests: RequestCounts{
			Offered:    in.offered,
			Accepted:   c.Submitted - c.Outcomes[actors.Rejected],
			Completed:  c.Outcomes[actors.Completed],
			Rejected:   c.Outcomes[actors.Rejected],
			Expired:    c.Outcomes[actors.Expired],
			Failed:     c.Outcomes[actors.Failed],
			Cancelled:  c.Outcomes[actors.Cancelled],
			Lost:       c.Lost,
			Duplicated: c.Duplicated,
		},
		LatencyMs:        l.latency.percentiles(),
		QueueMs:          l.queueWait.percentiles(),
		ComputeMs:        l.compute.percentiles(),
		Batches:          c.Batches,
		BatchSizes:       bucketBatchSizes(l.BatchSizes(), in.batchMax),
		QueuedHigh:       c.QueuedHigh,
		SimulatedSeconds: round(in.simulated.Seconds(), 6),
		WallSeconds:      round(in.wall.Seconds(), 6),
		Events:           in.events,
	}
	if wanted := rep.Requests.Accepted - rep.Requests.Cancelled; wanted > 0 {
		rep.SLOAttainment = float64(c.SLOMet) / float64(wanted)
	}
	if in.safety > 0 {
		rep.ThroughputRPS = float64(l.CompletedBy(in.safety)) / in.safety.Seconds()
	}
	if in.devices > 0 && in.simulated > 0 {
		rep.DeviceUtilization = in.busy.Seconds() / (float64(in.devices) * in.simulated.Seconds())
	}
	if c.Batches > 0 {
		rep.BatchSizeMean = round(float64(c.BatchItems)/float64(c.Batches), 3)
	}
	rep.SLOAttainment = round(rep.SLOAttainment, 6)
	rep.ThroughputRPS = round(rep.ThroughputRPS, 3)
	rep.DeviceUtilization = round(rep.DeviceUtilization, 6)
	n, first := l.Violations()
	rep.Violations.Count = n + int64(len(in.extra))
	rep.Violations.First = append(append([]string{}, in.extra...), first...)
	rep.Violations.ByKind = l.ViolationsByKind()
	for i := range in.extra {
		k := ViolationOther
		if i < len(in.extraKinds) && in.extraKinds[i] < ViolationKinds {
			k = in.extraKinds[i]
		}
		rep.Violations.ByKind[k]++
	}
	return rep
}

// bucketBatchSizes folds per-size counts (index = size, last index =
// invalid sizes, which the ledger reports as violations) into batchBuckets
// equal-width buckets over 1..batchMax.
func bucketBatchSizes(sizes []int64, batchMax int) []BatchBucket {
	if batchMax < 1 {
		return nil
	}
	width := (batchMax + batchBuckets - 1) / batchBuckets
	var out []BatchBucket
	for lo := 1; lo <= batchMax; lo += width {
		b := BatchBucket{Min: lo, Max: min(lo+width-1, batchMax)}
		for n := b.Min; n <= b.Max && n < len(sizes)-1; n++ {
			b.Count += sizes[n]
		}
		out = append(out, b)
	}
	return out
}

// WriteTable prints the report as an aligned, readable table.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	wl := r.Workload
	p("seed\t%d", r.Seed)
	p("trace hash\t%s", r.TraceHash)
	p("workload\t%g req/s, %d devices, batch max %d, latency %g ms, SLO %g ms, %g s, faults %v",
		wl.RateRPS, wl.Devices, wl.BatchMax, wl.LatencyMs, wl.SLOMs, wl.DurationS, wl.Faults)
	p("")
	q := r.Requests
	p("requests\toffered\taccepted\tcompleted\trejected\texpired\tfailed\tcancelled\tlost\tduplicated")
	p("\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d",
		q.Offered, q.Accepted, q.Completed, q.Rejected, q.Expired, q.Failed, q.Cancelled, q.Lost, q.Duplicated)
	p("")
	p("ms\tp50\tp95\tp99\tmax")
	for _, row := range []struct {
		name string
		p    Percentiles
	}{{"latency", r.LatencyMs}, {"queue wait", r.QueueMs}, {"compute", r.ComputeMs}} {
		p("%s\t%.3f\t%.3f\t%.3f\t%.3f", row.name, row.p.P50, row.p.P95, row.p.P99, row.p.Max)
	}
	p("")
	p("SLO attainment\t%.4f", r.SLOAttainment)
	p("throughput\t%.1f req/s", r.ThroughputRPS)
	p("device utilization\t%.4f", r.DeviceUtilization)
	p("batches\t%d, mean size %.2f", r.Batches, r.BatchSizeMean)
	var sizes strings.Builder
	for i, b := range r.BatchSizes {
		if i > 0 {
			sizes.WriteString("  ")
		}
		fmt.Fprintf(&sizes, "%d-%d:%d", b.Min, b.Max, b.Count)
	}
	p("batch sizes\t%s", sizes.String())
	p("queued high\t%d", r.QueuedHigh)
	p("simulated\t%.3f s", r.SimulatedSeconds)
	p("wall\t%.3f s (%.0fx real time)", r.WallSeconds, speedup(r.SimulatedSeconds, r.WallSeconds))
	p("events\t%d", r.Events)
	p("violations\t%d", r.Violations.Count)
	for _, v := range r.Violations.First {
		p("\t%s", v)
	}
	return tw.Flush()
}

// round keeps digits decimals: the report's figures are measurements, and
// printing float noise (116.666666666) suggests precision they lack.
func round(x float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(x*p) / p
}

func speedup(simulated, wall float64) float64 {
	if wall <= 0 {
		return 0
	}
	return simulated / wall
}
