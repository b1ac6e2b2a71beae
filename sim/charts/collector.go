package charts

import (
	"math"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
)

// Bounds on what a Collector keeps.
const (
	// TenantsMax bounds the tenants drawn one by one; the rest are
	// gathered under sim.OtherName.
	TenantsMax = 16
	// samplesMax bounds the latencies kept per tenant and per time bin;
	// past it a sampler keeps every second one (see sampler).
	samplesMax = 1 << 18
	// BinsMax bounds the bins of the time series.
	BinsMax = 2000
	// cdfPoints is the number of points of a drawn CDF.
	cdfPoints = 1000
)

// Collector is a sim.Observer that gathers the series of a run's charts:
// each completed request's end-to-end latency (reply delivery - arrival,
// the ledger's definition) by tenant and by arrival time, and the size of
// every batch dispatched (retries included, as in the report). Its memory
// is bounded (TenantsMax, samplesMax, BinsMax).
type Collector struct {
	bin      time.Duration
	batchMax int

	tenantOf map[uint64]int // request ID -> tenant index, until its reply
	names    []string       // tenant index -> name
	index    map[string]int
	tenants  []sampler
	bins     []sampler
	sizes    []int64 // index = batch size; the last counts sizes past batchMax
}

var _ sim.Observer = (*Collector)(nil)

// NewCollector returns a Collector whose time series has bins of width bin
// (at least a millisecond) and whose batch sizes go up to batchMax.
func NewCollector(bin time.Duration, batchMax int) *Collector {
	return &Collector{
		bin:      max(bin, time.Millisecond),
		batchMax: max(batchMax, 1),
		tenantOf: make(map[uint64]int),
		index:    make(map[string]int),
		sizes:    make([]int64, max(batchMax, 1)+2),
	}
}

// BinFor returns the bin width that splits a run of duration d into about
// 200 bins, at least 100 ms each.
func BinFor(d time.Duration) time.Duration {
	return max(d/200, 100*time.Millisecond)
}

// Deliver implements sim.Observer.
func (c *Collector) Deliver(at time.Duration, _, _ actors.Address, msg actors.Message) {
	switch m := msg.(type) {
	case actors.Submit:
		c.tenantOf[m.Req.ID] = c.tenant(m.Req.Tenant)
	case actors.Reply:
		t, ok := c.tenantOf[m.ID]
		if !ok {
			return // a duplicate reply: the ledger reports it
		}
		delete(c.tenantOf, m.ID)
		if m.Outcome != actors.Completed {
			return
		}
		ms := float64(at-m.Arrival) / float64(time.Millisecond)
		c.tenants[t].add(ms)
		b := min(int(m.Arrival/c.bin), BinsMax-1)
		for len(c.bins) <= b {
			c.bins = append(c.bins, sampler{})
		}
		c.bins[b].add(ms)
	case actors.RunBatch:
		n := min(len(m.Batch.Items), c.batchMax+1)
		c.sizes[n]++
	}
}

func (c *Collector) tenant(name string) int {
	if i, ok := c.index[name]; ok {
		return i
	}
	if len(c.names) == TenantsMax {
		name = sim.OtherName
		if i, ok := c.index[name]; ok {
			return i
		}
	}
	i := len(c.names)
	c.names = append(c.names, name)
	c.index[name] = i
	c.tenants = append(c.tenants, sampler{})
	return i
}

// sampler keeps values up to samplesMax; when full it drops every second
// one and from then on keeps one value in 2, then 4, ...: a deterministic
// systematic sample, spread over the whole run rather than its start.
type sampler struct {
	vals   []float32
	stride int
	seen   int
}

func (s *sampler) add(v float64) {
	if s.stride == 0 {
		s.stride = 1
	}
	s.seen++
	if (s.seen-1)%s.stride != 0 {
		return
	}
	if len(s.vals) == samplesMax {
		kept := s.vals[:0]
		for i := 0; i < len(s.vals); i += 2 {
			kept = append(kept, s.vals[i])
		}
		s.vals = kept
		s.stride *= 2
		if (s.seen-1)%s.stride != 0 {
			return
		}
	}
	s.vals = append(s.vals, float32(v))
}

// sorted returns the kept values in increasing order.
func (s *sampler) sorted() []float64 {
	out := make([]float64, len(s.vals))
	for i, v := range s.vals {
		out[i] = float64(v)
	}
	slices.Sort(out)
	return out
}

// quantile is the nearest-rank q-quantile of sorted xs (the ledger's
// definition), NaN for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	i := min(max(int(math.Ceil(q*float64(len(xs))))-1, 0), len(xs)-1)
	return xs[i]
}

// Point is one point of a series.
type Point struct{ X, Y float64 }

// CDF is one tenant's latency distribution: Y is the fraction of its
// completed requests with a latency of at most X milliseconds.
type CDF struct {
	Tenant string
	// Completed is the number of completed requests it describes (all of
	// them, even when only a sample was kept).
	Completed int
	Points    []Point
}

// TimeBin is the latency of the requests that arrived in [FromS, FromS +
// bin width).
type TimeBin struct {
	FromS               float64
	Completed           int
	P50Ms, P95Ms, P99Ms float64
}

// Series are the values a run's charts draw.
type Series struct {
	// CDFs has one entry per tenant, sorted by name.
	CDFs []CDF
	// Bins is the latency over arrival time; BinS is their width.
	Bins []TimeBin
	BinS float64
	// Queue is the queued requests over time (Report.Autoscale).
	Queue []Point
	// Devices and Ready are the autoscaled fleet over time
	// (Report.Scaling): devices up (booting or running) and the batcher's
	// healthy ones; Load is the offered rate per timeline step
	// (Report.Timeline), req/s. Empty without autoscale.
	Devices, Ready, Load []Point
	// BatchSizes counts the batches by size: BatchSizes[n] for size n,
	// from 1 to the batch max (index 0 is unused).
	BatchSizes []int64
}

// Series returns the gathered values, with the queue depth over time read
// from the run's report.
func (c *Collector) Series(rep sim.Report) Series {
	s := Series{BinS: c.bin.Seconds(), BatchSizes: slices.Clone(c.sizes[:c.batchMax+1])}
	for i, name := range c.names {
		xs := c.tenants[i].sorted()
		cdf := CDF{Tenant: name, Completed: c.tenants[i].seen}
		// cdfPoints ranks, or every value when there are fewer.
		n := min(len(xs), cdfPoints)
		for k := 1; k <= n; k++ {
			q := float64(k) / float64(n)
			cdf.Points = append(cdf.Points, Point{X: quantile(xs, q), Y: q})
		}
		s.CDFs = append(s.CDFs, cdf)
	}
	slices.SortFunc(s.CDFs, func(a, b CDF) int {
		switch {
		case a.Tenant < b.Tenant:
			return -1
		case a.Tenant > b.Tenant:
			return 1
		}
		return 0
	})
	for i := range c.bins {
		xs := c.bins[i].sorted()
		b := TimeBin{FromS: (time.Duration(i) * c.bin).Seconds(), Completed: c.bins[i].seen}
		if len(xs) > 0 {
			b.P50Ms, b.P95Ms, b.P99Ms = quantile(xs, 0.50), quantile(xs, 0.95), quantile(xs, 0.99)
		}
		s.Bins = append(s.Bins, b)
	}
	for _, a := range rep.Autoscale {
		s.Queue = append(s.Queue, Point{X: a.T, Y: float64(a.QueueDepth)})
	}
	if sc := rep.Scaling; sc != nil {
		for _, p := range sc.Series {
			s.Devices = append(s.Devices, Point{X: p.T, Y: float64(p.Devices)})
			s.Ready = append(s.Ready, Point{X: p.T, Y: float64(p.Ready)})
		}
		for i, st := range rep.Timeline {
			w := rep.Workload.DurationS - st.FromS
			if i+1 < len(rep.Timeline) {
				w = rep.Timeline[i+1].FromS - st.FromS
			}
			if w > 0 {
				s.Load = append(s.Load, Point{X: st.FromS + w/2, Y: float64(st.Offered) / w})
			}
		}
	}
	return s
}
