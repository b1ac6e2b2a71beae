package ledger

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"sort"
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
	// GoodputRPS is the requests completed by their deadline per simulated
	// second of the safety phase: the throughput that was worth having.
	// Unlike ThroughputRPS it counts the safety phase's arrivals that
	// complete (in time) during the drain.
	GoodputRPS float64 `json:"goodput_rps"`
	// DeviceUtilization is total device busy time over devices × simulated
	// time (the drain included).
	DeviceUtilization float64 `json:"device_utilization"`
	// DeviceBusy is each device's busy time over the simulated time, in
	// device order (nodes one after another in a scenario): an uneven
	// fleet (warm models placed badly, a device out of service) shows
	// here, where the mean above hides it.
	DeviceBusy []float64 `json:"device_busy"`
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

	// Tenants and Models break the requests down by tenant and by model
	// name (tenants past Config.NamesMax under OtherName).
	Tenants map[string]NameStats `json:"tenants"`
	Models  map[string]NameStats `json:"models"`
	// Versions breaks the requests down by "model@version", the version
	// the batcher resolved (empty for a request rejected before it was
	// routed): how a canary's traffic split really went.
	Versions map[string]NameStats `json:"versions"`
	// Fairness measures how evenly the tenants were served.
	Fairness Fairness `json:"fairness"`
	// Rejections counts the rejected requests by Reply.Reason.
	Rejections map[string]int64 `json:"rejections"`
	// Autoscale samples the batcher's Signals every Config.SignalsEvery of
	// virtual time: the recommendation over the run, next to the queue
	// and the devices' busy fraction it is meant to lead.
	Autoscale []AutoscaleSample `json:"autoscale"`
	// Windows break the tenants down by arrival time, one entry per pair
	// of neighbouring Config.Windows boundaries; absent without them.
	Windows []WindowStats `json:"windows,omitempty"`
	// Timeline breaks all requests down by arrival time in steps of
	// Config.TimelineEvery; absent when it is zero.
	Timeline []TimelineStep `json:"timeline,omitempty"`
	// Scaling is the autoscaled fleet; absent when the run had none.
	Scaling *ScalingReport `json:"scaling,omitempty"`
}

// NameStats are the figures of one tenant's or one model's requests.
type NameStats struct {
	Offered   int64 `json:"offered"`
	Completed int64 `json:"completed"`
	Rejected  int64 `json:"rejected"`
	// RejectedBy splits Rejected by Reply.Reason (rate_limited, quota,
	// overloaded, ...).
	RejectedBy map[string]int64 `json:"rejected_by"`
	Expired    int64            `json:"expired"`
	Failed     int64            `json:"failed"`
	Cancelled  int64            `json:"cancelled"`
	// LatencyMs is over the completed requests, exact (nearest rank), where
	// the run-wide LatencyMs comes from a 3-digit histogram.
	LatencyMs Percentiles `json:"latency_ms"`
	// SLOAttainment is as the report's: completed by the deadline over
	// accepted and not cancelled.
	SLOAttainment float64 `json:"slo_attainment"`
	// ThroughputRPS is completions per second of the safety phase (of the
	// window, for Report.Windows: completions of the requests that arrived
	// in it, per second of it).
	ThroughputRPS float64 `json:"throughput_rps"`
	// GoodputRPS is as the report's: completed by the deadline, per second
	// of the safety phase (of the window, for Report.Windows).
	GoodputRPS float64 `json:"goodput_rps"`
	// QueueMeanMs and ComputeMeanMs split the completed requests' mean
	// latency into waiting (enqueue to dispatch) and running (dispatch to
	// done): slow because batching waits, or because the model is slow.
	// Absent in Report.Windows.
	QueueMeanMs   float64 `json:"queue_mean_ms,omitempty"`
	ComputeMeanMs float64 `json:"compute_mean_ms,omitempty"`
}

// Fairness is Jain's index, (Σx)² / (n·Σx²), of the tenants' throughputs
// x (completions per second of the safety phase): 1 when all are equal, 1/n
// when one tenant has everything. JainWeighted divides each throughput by
// the tenant's weight first, so it is 1 when service follows the weights.
// Both only measure fairness when every tenant is backlogged (offers more
// than its share): a tenant that asks for little gets little, fairly.
type Fairness struct {
	Tenants        int     `json:"tenants"`
	JainThroughput float64 `json:"jain_throughput"`
	JainWeighted   float64 `json:"jain_weighted"`
}

// AutoscaleSample is one reading of actors.Batcher.Signals.
type AutoscaleSample struct {
	// T is the virtual time of the reading, in seconds.
	T              float64 `json:"t"`
	DevicesNeeded  int     `json:"devices_needed"`
	DevicesHealthy int     `json:"devices_healthy"`
	// QueueDepth is the requests queued under all keys.
	QueueDepth int `json:"queue_depth"`
	// Keys counts the compatibility keys with recent arrivals, and
	// BatchSizeMean is their recent batches' mean size weighted by their
	// arrival rates: traffic fragmented over many keys shows as many keys
	// and small batches while the devices stay busy.
	Keys          int     `json:"keys"`
	BatchSizeMean float64 `json:"batch_size_mean"`
	// BusyFractionMean is the devices' mean busy fraction over the
	// interval since the previous reading (the batcher's own figure is
	// since each device registered, which hides a change).
	BusyFractionMean float64 `json:"busy_fraction_mean"`
}

// WindowStats is the breakdown of the requests that arrived in [FromS,
// ToS) seconds: all of them, per tenant and per model.
type WindowStats struct {
	FromS   float64              `json:"from_s"`
	ToS     float64              `json:"to_s"`
	All     NameStats            `json:"all"`
	Tenants map[string]NameStats `json:"tenants"`
	Models  map[string]NameStats `json:"models"`
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
	// Retried counts the requests that ran in more than one batch (a
	// crash, a hang, a failed batch split to isolate a poison input).
	Retried int64 `json:"retried"`
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

// ErrViolations is returned by Check for a report that broke an invariant.
var ErrViolations = errors.New("sim: invariants violated")

// Check returns nil for a report whose run kept every checked invariant,
// else ErrViolations wrapped with the counts.
func (r Report) Check() error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("%w: %d violations, %d lost, %d duplicated",
		ErrViolations, r.Violations.Count, r.Requests.Lost, r.Requests.Duplicated)
}

// ReportInput is what a report is built from besides the ledger, gathered
// by the run (sim.Run): the workload, the world's figures and the
// violations found outside the ledger.
type ReportInput struct {
	Seed      uint64
	TraceHash uint64
	Workload  Workload
	// Offered is the requests the traffic sent.
	Offered int64
	// Busy is the devices' total busy time, PerDevice each device's.
	Busy      time.Duration
	PerDevice []time.Duration
	Devices   int
	// Safety is the safety phase's length (arrivals end with it).
	Safety time.Duration
	// Simulated is the virtual time the run took, Wall the real time.
	Simulated time.Duration
	Wall      time.Duration
	Events    int64
	BatchMax  int
	// Extra are violations found outside the ledger (device overlaps,
	// undelivered submits), and ExtraKinds their kinds, one per extra.
	Extra      []string
	ExtraKinds []ViolationKind
	// Weight is a tenant's weight, for Fairness.JainWeighted; nil: 1.
	Weight func(tenant string) float64
	// Windows are the run's window boundaries (sim.Config.Windows).
	Windows []time.Duration
	// TimelineEvery is the timeline's step (sim.Config.TimelineEvery);
	// zero leaves the timeline out.
	TimelineEvery time.Duration
}

// batchBuckets is how many buckets the batch size distribution has.
const batchBuckets = 10

// Report builds the run's report from the ledger, finished (Finish), and
// in.
func (l *Ledger) Report(in ReportInput) Report {
	c := l.Counts()
	rep := Report{
		Seed:      in.Seed,
		TraceHash: fmt.Sprintf("%016x", in.TraceHash),
		Workload:  in.Workload,
		Requests: RequestCounts{
			Offered:    in.Offered,
			Accepted:   c.Submitted - c.Outcomes[actors.Rejected],
			Completed:  c.Outcomes[actors.Completed],
			Rejected:   c.Outcomes[actors.Rejected],
			Expired:    c.Outcomes[actors.Expired],
			Failed:     c.Outcomes[actors.Failed],
			Cancelled:  c.Outcomes[actors.Cancelled],
			Lost:       c.Lost,
			Duplicated: c.Duplicated,
			Retried:    l.retried(),
		},
		LatencyMs:        l.latency.percentiles(),
		QueueMs:          l.queueWait.percentiles(),
		ComputeMs:        l.compute.percentiles(),
		Batches:          c.Batches,
		BatchSizes:       bucketBatchSizes(l.BatchSizes(), in.BatchMax),
		QueuedHigh:       c.QueuedHigh,
		SimulatedSeconds: round(in.Simulated.Seconds(), 6),
		WallSeconds:      round(in.Wall.Seconds(), 6),
		Events:           in.Events,
	}
	if wanted := rep.Requests.Accepted - rep.Requests.Cancelled; wanted > 0 {
		rep.SLOAttainment = float64(c.SLOMet) / float64(wanted)
	}
	if in.Safety > 0 {
		rep.ThroughputRPS = float64(l.CompletedBy(in.Safety)) / in.Safety.Seconds()
		rep.GoodputRPS = round(float64(c.SLOMet)/in.Safety.Seconds(), 3)
	}
	if in.Devices > 0 && in.Simulated > 0 {
		rep.DeviceUtilization = in.Busy.Seconds() / (float64(in.Devices) * in.Simulated.Seconds())
		for _, b := range in.PerDevice {
			rep.DeviceBusy = append(rep.DeviceBusy, round(b.Seconds()/in.Simulated.Seconds(), 3))
		}
	}
	if c.Batches > 0 {
		rep.BatchSizeMean = round(float64(c.BatchItems)/float64(c.Batches), 3)
	}
	rep.SLOAttainment = round(rep.SLOAttainment, 6)
	rep.ThroughputRPS = round(rep.ThroughputRPS, 3)
	rep.DeviceUtilization = round(rep.DeviceUtilization, 6)
	n, first := l.Violations()
	rep.Violations.Count = n + int64(len(in.Extra))
	rep.Violations.First = append(append([]string{}, in.Extra...), first...)
	rep.Violations.ByKind = l.ViolationsByKind()
	for i := range in.Extra {
		k := ViolationOther
		if i < len(in.ExtraKinds) && in.ExtraKinds[i] < ViolationKinds {
			k = in.ExtraKinds[i]
		}
		rep.Violations.ByKind[k]++
	}
	l.addBreakdown(&rep, in)
	return rep
}

// addBreakdown fills the per-tenant and per-model figures, the fairness
// indexes, the rejections by reason, the windows and the autoscaling
// readings.
func (l *Ledger) addBreakdown(rep *Report, in ReportInput) {
	all := time.Duration(math.MaxInt64)
	tenants := l.Tenants()
	byTenant := l.tallies(len(tenants), func(r *record) int { return int(r.tenant) }, 0, all, in.Safety)
	models, ofKey := l.modelGroups()
	byModel := l.tallies(len(models), func(r *record) int { return ofKey[r.key] }, 0, all, in.Safety)

	rep.Tenants = make(map[string]NameStats, len(tenants))
	rep.Rejections = map[string]int64{}
	var xs, ws []float64
	for i, name := range tenants {
		t := &byTenant[i]
		st := t.stats(in.Safety)
		if i < len(l.tenantSplit) {
			st.QueueMeanMs, st.ComputeMeanMs = l.tenantSplit[i].means()
		}
		rep.Tenants[name] = st
		for r, n := range t.rejectedBy {
			if n > 0 {
				rep.Rejections[actors.Reason(r).String()] += n
			}
		}
		x := float64(t.completedBy) / max(in.Safety.Seconds(), 1e-9)
		w := 1.0
		if in.Weight != nil {
			w = in.Weight(name)
		}
		xs, ws = append(xs, x), append(ws, x/w)
	}
	rep.Models = make(map[string]NameStats, len(models))
	for i, name := range models {
		st := byModel[i].stats(in.Safety)
		st.QueueMeanMs, st.ComputeMeanMs = l.splitOf(ofKey, i).means()
		rep.Models[name] = st
	}
	versions, ofVersion := l.versionGroups()
	byVersion := l.tallies(len(versions), func(r *record) int { return ofVersion[r.key] }, 0, all, in.Safety)
	rep.Versions = make(map[string]NameStats, len(versions))
	for i, name := range versions {
		if byVersion[i].offered == 0 {
			// The key a request had before the batcher resolved its
			// version, left with nothing once every request moved on.
			continue
		}
		st := byVersion[i].stats(in.Safety)
		st.QueueMeanMs, st.ComputeMeanMs = l.splitOf(ofVersion, i).means()
		rep.Versions[name] = st
	}
	rep.Fairness = Fairness{Tenants: len(tenants), JainThroughput: round(Jain(xs), 6), JainWeighted: round(Jain(ws), 6)}

	for i := 1; i < len(in.Windows); i++ {
		from, to := in.Windows[i-1], in.Windows[i]
		ts := l.tallies(len(tenants), func(r *record) int { return int(r.tenant) }, from, to, all)
		ms := l.tallies(len(models), func(r *record) int { return ofKey[r.key] }, from, to, all)
		ws := WindowStats{
			FromS: round(from.Seconds(), 6), ToS: round(to.Seconds(), 6),
			All:     l.tallies(1, func(*record) int { return 0 }, from, to, all)[0].stats(to - from),
			Tenants: make(map[string]NameStats, len(tenants)),
			Models:  make(map[string]NameStats, len(models)),
		}
		for j, name := range tenants {
			if ts[j].offered > 0 {
				ws.Tenants[name] = ts[j].stats(to - from)
			}
		}
		for j, name := range models {
			if ms[j].offered > 0 {
				ws.Models[name] = ms[j].stats(to - from)
			}
		}
		rep.Windows = append(rep.Windows, ws)
	}
	if l.sampler != nil {
		rep.Autoscale = l.sampler.samples
	}
	if in.TimelineEvery > 0 {
		rep.Timeline = l.timeline(in.TimelineEvery, in.Safety)
	}
}

// stats turns a groupTally into a NameStats, with throughput per second of
// span.
func (t *groupTally) stats(span time.Duration) NameStats {
	s := NameStats{
		Offered: t.offered, Completed: t.completed, Rejected: t.rejected,
		Expired: t.expired, Failed: t.failed, Cancelled: t.cancelled,
		RejectedBy: map[string]int64{},
		LatencyMs:  exactPercentiles(t.latency),
	}
	for r, n := range t.rejectedBy {
		if n > 0 {
			s.RejectedBy[actors.Reason(r).String()] = n
		}
	}
	if wanted := t.offered - t.rejected - t.cancelled; wanted > 0 {
		s.SLOAttainment = round(float64(t.sloMet)/float64(wanted), 6)
	}
	if span > 0 {
		s.ThroughputRPS = round(float64(t.completedBy)/span.Seconds(), 3)
		s.GoodputRPS = round(float64(t.sloMet)/span.Seconds(), 3)
	}
	return s
}

// exactPercentiles returns the nearest-rank percentiles of ds in
// milliseconds at microsecond resolution, reordering ds. It selects the
// four ranks rather than sorting: a report breaks a run down per tenant
// and per model, and sorting every group cost a tenth of a reference run.
func exactPercentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	rank := func(q float64) int { return min(max(int(math.Ceil(q*float64(len(ds))))-1, 0), len(ds)-1) }
	msAt := func(i int) float64 { return float64(ds[i]/time.Microsecond) / 1e3 }
	// Largest rank first: each selection leaves the smaller ranks to its
	// left, so the next one searches only that part.
	hi := len(ds)
	var p Percentiles
	for _, r := range []struct {
		q   float64
		dst *float64
	}{{1, &p.Max}, {0.99, &p.P99}, {0.95, &p.P95}, {0.50, &p.P50}} {
		k := rank(r.q)
		SelectKth(ds[:hi], k)
		*r.dst = msAt(k)
		hi = k + 1
	}
	return p
}

// SelectKth reorders ds so that ds[k] is the value a sort would put there,
// with no larger value before it and no smaller one after. Quickselect on
// the median of three, falling back to a sort of what is left after
// 2·log2(n)+8 rounds, so its worst case is a sort's.
func SelectKth(ds []time.Duration, k int) {
	lo, hi := 0, len(ds)-1
	for rounds := 2*bits.Len(uint(len(ds))) + 8; lo < hi; rounds-- {
		if rounds == 0 {
			slices.Sort(ds[lo : hi+1])
			return
		}
		mid := lo + (hi-lo)/2
		// Median of three into ds[mid].
		if ds[mid] < ds[lo] {
			ds[mid], ds[lo] = ds[lo], ds[mid]
		}
		if ds[hi] < ds[lo] {
			ds[hi], ds[lo] = ds[lo], ds[hi]
		}
		if ds[hi] < ds[mid] {
			ds[hi], ds[mid] = ds[mid], ds[hi]
		}
		pivot := ds[mid]
		i, j := lo, hi
		for i <= j {
			for ds[i] < pivot {
				i++
			}
			for ds[j] > pivot {
				j--
			}
			if i <= j {
				ds[i], ds[j] = ds[j], ds[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return // j < k < i: ds[k] equals the pivot
		}
	}
}

// Jain is Jain's fairness index of xs: 1 for no value or all zeros (no one
// was served less than another).
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// signalSampler reads the batcher's Signals every interval of virtual
// time, for Report.Autoscale. The ledger drives it (it sees every delivery
// already, and one comparison there is cheaper than an observer of its
// own). It reads, never sends: Signals only rolls the batcher's
// arrival-rate windows forward, which the batcher's own next arrival would
// do the same way, and no decision of the batcher reads them, so the run
// and its trace hash are unchanged.
type signalSampler struct {
	b      *actors.Batcher
	ledger *Ledger
	every  time.Duration
	next   time.Duration
	// busy is each device's busy time at the last reading.
	busy    map[actors.Address]time.Duration
	last    time.Duration
	samples []AutoscaleSample
}

// autoscaleSamplesMax bounds the readings kept: a day of virtual time at
// one a second.
const autoscaleSamplesMax = 100_000

// SampleSignals has the ledger read b's Signals every every of virtual
// time, for Report.Autoscale, as deliveries pass those times and at Finish.
// Call it before the first delivery.
func (l *Ledger) SampleSignals(b *actors.Batcher, every time.Duration) {
	l.sampler = &signalSampler{b: b, ledger: l, every: every, next: every, busy: make(map[actors.Address]time.Duration)}
	l.sampleAt = every
}

// advance takes the readings due before at, the time of a delivery about
// to happen, so each sees every delivery at or before its time and none
// after; it returns the time of the next reading.
func (s *signalSampler) advance(at time.Duration) time.Duration {
	for s.next < at && len(s.samples) < autoscaleSamplesMax {
		s.sample(s.next)
		s.next += s.every
	}
	if len(s.samples) >= autoscaleSamplesMax {
		return math.MaxInt64
	}
	return s.next
}

// finish takes the readings due up to end, the end of the run.
func (s *signalSampler) finish(end time.Duration) {
	s.advance(end + 1)
}

func (s *signalSampler) sample(now time.Duration) {
	sig := s.b.Signals(now)
	smp := AutoscaleSample{T: round(now.Seconds(), 6), DevicesNeeded: sig.DevicesNeeded, DevicesHealthy: sig.DevicesHealthy}
	var rate, sized float64
	for _, k := range sig.Keys {
		smp.QueueDepth += k.Depth
		if k.Rate > 0 {
			smp.Keys++
			rate += k.Rate
			sized += k.Rate * k.BatchSizeMean
		}
	}
	if rate > 0 {
		smp.BatchSizeMean = round(sized/rate, 3)
	}
	var busy float64
	n := 0
	for _, d := range sig.Devices {
		ld := s.ledger.devs[d.Device]
		if ld == nil || !ld.known || now <= ld.registered {
			continue
		}
		reg := ld.registered
		total := time.Duration(d.BusyFraction * float64(now-reg))
		since := max(s.last, reg)
		if now > since {
			busy += min(max(float64(total-s.busy[d.Device])/float64(now-since), 0), 1)
			n++
		}
		s.busy[d.Device] = total
	}
	if n > 0 {
		smp.BusyFractionMean = round(busy/float64(n), 6)
	}
	s.last = now
	s.samples = append(s.samples, smp)
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
	// RateRPS sums the sources' rates, which overstates traffic whose
	// sources take turns (phases); the mean is what was offered.
	rate := fmt.Sprintf("%g req/s", wl.RateRPS)
	if mean := float64(r.Requests.Offered) / wl.DurationS; wl.DurationS > 0 && math.Abs(mean-wl.RateRPS) > 0.1*wl.RateRPS {
		rate = fmt.Sprintf("%.0f req/s offered on average (sources' rates sum to %g)", mean, wl.RateRPS)
	}
	p("workload\t%s, %d devices, batch max %d, latency %g ms, SLO %g ms, %g s, faults %v",
		rate, wl.Devices, wl.BatchMax, wl.LatencyMs, wl.SLOMs, wl.DurationS, wl.Faults)
	p("")
	q := r.Requests
	p("requests\toffered\taccepted\tcompleted\trejected\texpired\tfailed\tcancelled\tlost\tduplicated\tretried")
	p("\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d",
		q.Offered, q.Accepted, q.Completed, q.Rejected, q.Expired, q.Failed, q.Cancelled, q.Lost, q.Duplicated, q.Retried)
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
	p("throughput\t%.1f req/s (goodput, within the SLO: %.1f req/s)", r.ThroughputRPS, r.GoodputRPS)
	p("device utilization\t%.4f", r.DeviceUtilization)
	if len(r.DeviceBusy) > 1 && len(r.DeviceBusy) <= deviceBusyRows {
		var b strings.Builder
		for i, x := range r.DeviceBusy {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.2f", x)
		}
		p("device busy\t%s", b.String())
	}
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
	if err := tw.Flush(); err != nil {
		return err
	}
	return r.writeBreakdown(w)
}

// writeBreakdown prints the per-tenant and per-model tables, the fairness
// indexes, the rejections, the windows and the autoscaling readings.
func (r Report) writeBreakdown(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	table := func(title string, m map[string]NameStats) {
		if len(m) == 0 {
			return
		}
		p("")
		p("%s\toffered\tcompleted\trejected\texpired\tfailed\tp50 ms\tp95 ms\tp99 ms\tqueue/compute ms\tSLO\treq/s\trejected by", title)
		for _, name := range sortedKeys(m) {
			s := m[name]
			split := "-"
			if s.QueueMeanMs > 0 || s.ComputeMeanMs > 0 {
				split = fmt.Sprintf("%.1f/%.1f", s.QueueMeanMs, s.ComputeMeanMs)
			}
			p("%s\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%s\t%.4f\t%.1f\t%s", name, s.Offered, s.Completed, s.Rejected, s.Expired, s.Failed,
				s.LatencyMs.P50, s.LatencyMs.P95, s.LatencyMs.P99, split, s.SLOAttainment, s.ThroughputRPS, CountList(s.RejectedBy))
		}
	}
	table("tenant", r.Tenants)
	table("model", r.Models)
	if len(r.Versions) > 1 {
		table("version", r.Versions)
	}
	if r.Fairness.Tenants > 0 {
		p("")
		p("fairness\tJain %.4f, weighted %.4f over %d tenants", r.Fairness.JainThroughput, r.Fairness.JainWeighted, r.Fairness.Tenants)
	}
	if len(r.Rejections) > 0 {
		p("rejections\t%s", CountList(r.Rejections))
	}
	for _, win := range r.Windows {
		table(fmt.Sprintf("%g-%g s", win.FromS, win.ToS), win.Tenants)
	}
	if len(r.Timeline) > 0 {
		p("")
		p("timeline\tfrom s\toffered\trejected\tunserved\tp50 ms\tp99 ms\tSLO")
		// A long run is summed up by at most autoscaleRows steps.
		step := (len(r.Timeline) + autoscaleRows - 1) / autoscaleRows
		for i := 0; i < len(r.Timeline); i += step {
			s := r.Timeline[i]
			p("\t%g\t%d\t%d\t%d\t%.3f\t%.3f\t%.4f", s.FromS, s.Offered, s.Rejected, s.Unserved, s.LatencyMs.P50, s.LatencyMs.P99, s.SLOAttainment)
		}
	}
	if len(r.Autoscale) > 0 {
		p("")
		p("autoscale\tt s\tdevices needed\tqueue depth\tbusy\tkeys\tbatch mean")
		// A long run is summed up by at most autoscaleRows readings.
		step := (len(r.Autoscale) + autoscaleRows - 1) / autoscaleRows
		for i := 0; i < len(r.Autoscale); i += step {
			a := r.Autoscale[i]
			p("\t%g\t%d\t%d\t%.3f\t%d\t%.1f", a.T, a.DevicesNeeded, a.QueueDepth, a.BusyFractionMean, a.Keys, a.BatchSizeMean)
		}
	}
	return tw.Flush()
}

// deviceBusyRows bounds the devices whose busy fraction the table prints
// one by one (the JSON has them all).
const deviceBusyRows = 64

// autoscaleRows bounds the autoscaling readings the table prints.
const autoscaleRows = 20

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// CountList prints counts by name as "a:1 b:2", sorted by name.
func CountList(m map[string]int64) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%d", k, m[k])
	}
	return b.String()
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

// ScalingReport is the autoscaled fleet of a run (sim.Config.Autoscale):
// what it cost and what the policy decided.
type ScalingReport struct {
	// DeviceHours counts each device from when it was asked to boot (its
	// cold start is paid for) to the end of its drain, over the safety
	// phase; StaticDeviceHours is the starting fleet's over the same
	// time, and DeviceHoursRatio the one over the other.
	DeviceHours       float64 `json:"device_hours"`
	StaticDeviceHours float64 `json:"static_device_hours"`
	DeviceHoursRatio  float64 `json:"device_hours_ratio"`
	// DevicesMin and DevicesMax are the fewest and most devices up
	// (booting or running) in Series.
	DevicesMin int `json:"devices_min"`
	DevicesMax int `json:"devices_max"`
	// Decisions are the policy's ScaleTo, in order.
	Decisions []ScaleDecision `json:"decisions"`
	// Series has a point per reading of the signals and per decision.
	Series []ScalingPoint `json:"series"`
}

// ScaleDecision is one actors.ScaleTo.
type ScaleDecision struct {
	T       float64 `json:"t"`
	Devices int     `json:"devices"`
	Reason  string  `json:"reason"`
}

// ScalingPoint is the fleet at time T (seconds): Devices up (booting or
// running), Ready the batcher's healthy devices, Target the policy's.
type ScalingPoint struct {
	T       float64 `json:"t"`
	Devices int     `json:"devices"`
	Ready   int     `json:"ready"`
	Target  int     `json:"target"`
}
