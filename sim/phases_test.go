package sim

import (
	"math"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// arrivalRecorder notes the arrival time of every request.
type arrivalRecorder struct{ at []time.Duration }

func (r *arrivalRecorder) Deliver(at time.Duration, _, _ actors.Address, msg actors.Message) {
	if _, ok := msg.(actors.Submit); ok {
		r.at = append(r.at, at)
	}
}

// runArrivals runs one source on a fleet far larger than its load and
// returns its arrival times.
func runArrivals(t *testing.T, src TrafficConfig, d time.Duration) []time.Duration {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Seed = 3
	cfg.Devices = 16
	cfg.Duration = d
	cfg.Sources = []TrafficConfig{src}
	rec := &arrivalRecorder{}
	cfg.Observers = []Observer{rec}
	rep := mustRun(t, cfg)
	if err := rep.Check(); err != nil {
		t.Fatalf("%v: %q", err, rep.Violations.First)
	}
	return rec.at
}

// TestDiurnalFollowsCurve: a Diurnal source at peak 2,000 req/s over a
// curve that climbs from 0.1 to 1 and back offers, per fifth of its span,
// what the curve's integral says there (within 5 standard deviations of a
// Poisson count), and its total is Rate × curveMean × span.
func TestDiurnalFollowsCurve(t *testing.T) {
	src := DefaultTrafficConfig()
	src.Arrival = Diurnal
	src.Rate = 2000
	src.RateCurve = []float64{0.1, 1, 0.1}
	span := 10 * time.Second
	at := runArrivals(t, src, span)

	counts := make([]float64, 5)
	for _, a := range at {
		counts[int(a*5/span)]++
	}
	for i, got := range counts {
		// The mean of the curve over [i/5, (i+1)/5) of the span, by
		// midpoint sums over a fine grid.
		c := src
		c.Start, c.Stop = 0, span
		mean := 0.0
		const grid = 1000
		for j := range grid {
			x := time.Duration((float64(i) + (float64(j)+0.5)/grid) / 5 * float64(span))
			mean += c.curveAt(x) / grid
		}
		want := src.Rate * mean * span.Seconds() / 5
		if math.Abs(got-want) > 5*math.Sqrt(want) {
			t.Errorf("fifth %d: %v arrivals, want %.0f ± %.0f", i, got, want, 5*math.Sqrt(want))
		}
	}
	want := src.Rate * curveMean(src.RateCurve) * span.Seconds()
	if got := float64(len(at)); math.Abs(got-want) > 5*math.Sqrt(want) {
		t.Errorf("%v arrivals in all, want %.0f", got, want)
	}
	if counts[2] < 3*counts[0] {
		t.Errorf("the peak fifth has %v arrivals, the first %v: the curve did not shape the rate", counts[2], counts[0])
	}
}

// TestBurstGroups: a Burst source of groups of 25 sends requests in runs
// of exactly 25 a nanosecond apart, with gaps between groups far longer,
// at the configured mean rate.
func TestBurstGroups(t *testing.T) {
	src := DefaultTrafficConfig()
	src.Arrival = Burst
	src.BurstSize = 25
	src.Rate = 1000
	span := 10 * time.Second
	at := runArrivals(t, src, span)
	if len(at) == 0 {
		t.Fatal("no arrivals")
	}
	groups, run := 0, 1
	for i := 1; i < len(at); i++ {
		if at[i]-at[i-1] <= time.Nanosecond {
			run++
			continue
		}
		if run != 25 {
			t.Fatalf("a group of %d ended at %v, want 25", run, at[i-1])
		}
		groups++
		run = 1
	}
	// The last group may be cut by the end of the safety phase.
	if run > 25 {
		t.Fatalf("last group of %d", run)
	}
	want := src.Rate * span.Seconds()
	if got := float64(len(at)); math.Abs(got-want) > 5*25*math.Sqrt(want/25) {
		t.Errorf("%v arrivals in %d groups, want about %.0f", got, groups, want)
	}
}

// TestArrivalValidate: the new processes refuse what they cannot draw
// from.
func TestArrivalValidate(t *testing.T) {
	base := DefaultTrafficConfig()
	base.Target, base.ReplyTo = BatcherAddr, LedgerAddr
	base.Stop = time.Second
	for name, mod := range map[string]func(c *TrafficConfig){
		"diurnal without curve":   func(c *TrafficConfig) { c.Arrival = Diurnal },
		"diurnal curve above 1":   func(c *TrafficConfig) { c.Arrival, c.RateCurve = Diurnal, []float64{0.5, 1.5} },
		"diurnal all zero":        func(c *TrafficConfig) { c.Arrival, c.RateCurve = Diurnal, []float64{0, 0} },
		"diurnal without stop":    func(c *TrafficConfig) { c.Arrival, c.RateCurve, c.Stop = Diurnal, []float64{0, 1}, 0 },
		"burst without size":      func(c *TrafficConfig) { c.Arrival = Burst },
		"unknown arrival process": func(c *TrafficConfig) { c.Arrival = Burst + 1 },
	} {
		c := base
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := base
	c.Arrival, c.RateCurve = Diurnal, DiurnalCurve()
	if err := c.Validate(); err != nil {
		t.Errorf("the default day: %v", err)
	}
}

// curveMean is the mean multiple of a RateCurve over its span (the mean of
// its trapezoids): a Diurnal source offers Rate × curveMean requests per
// second on average. NaN for fewer than two points.
func curveMean(curve []float64) float64 {
	if len(curve) < 2 {
		return math.NaN()
	}
	sum := 0.0
	for i := 1; i < len(curve); i++ {
		sum += (curve[i-1] + curve[i]) / 2
	}
	return sum / float64(len(curve)-1)
}
