package sim

import (
	"fmt"
	"time"

	"github.com/batchd/batchd/actors"
)

// The arrival processes beyond Poisson and Constant, for scenarios whose
// traffic is not stationary. Their numbers follow Constant's, so the zero
// value is still Poisson and the existing processes draw exactly as before.
const (
	// Diurnal is a Poisson process whose rate follows TrafficConfig.RateCurve
	// over [Start, Stop): a day (or any cycle) compressed into the source's
	// span. It is drawn by thinning (Lewis and Shedler): candidates at the
	// curve's peak rate, each kept with probability rate(t)/peak, which is
	// exact for a piecewise-linear rate and needs no integral.
	Diurnal ArrivalProcess = Constant + 1 + iota
	// Burst is a compound Poisson process: groups of TrafficConfig.BurstSize
	// requests, 1 ns apart, with exponential gaps between groups, so that the
	// mean rate is still Rate. It models clients that fan out a batch of
	// calls at once: the same mean load as Poisson, much higher short-term
	// peaks.
	Burst
)

// Bounds on the non-stationary processes.
const (
	// RateCurveLimit bounds the points of a RateCurve: a day at one point
	// a minute, and more than enough for any shape read by people.
	RateCurveLimit = 1440
	// BurstSizeLimit bounds a Burst group: larger groups are a queue
	// test, not traffic.
	BurstSizeLimit = 100_000
	// thinningTriesMax bounds the candidates one Diurnal gap may reject,
	// so a curve that is zero for a long stretch costs a bounded loop; the
	// candidate after the last try is taken, whatever the curve says there.
	thinningTriesMax = 1 << 24
)

// validateArrival checks the fields of the non-stationary processes.
func (c TrafficConfig) validateArrival() error {
	switch c.Arrival {
	case Poisson, Constant:
		return nil
	case Diurnal:
		if len(c.RateCurve) < 2 || len(c.RateCurve) > RateCurveLimit {
			return fmt.Errorf("traffic config: RateCurve has %d points: Diurnal needs 2 to %d", len(c.RateCurve), RateCurveLimit)
		}
		peak := 0.0
		for i, x := range c.RateCurve {
			if !(x >= 0 && x <= 1) {
				return fmt.Errorf("traffic config: RateCurve[%d] %v: need a multiple of Rate in [0, 1]", i, x)
			}
			peak = max(peak, x)
		}
		if peak == 0 {
			return fmt.Errorf("traffic config: RateCurve is zero everywhere")
		}
		if c.Stop <= c.Start {
			return fmt.Errorf("traffic config: Diurnal needs a Stop after Start (the curve spans them)")
		}
	case Burst:
		if c.BurstSize < 1 || c.BurstSize > BurstSizeLimit {
			return fmt.Errorf("traffic config: BurstSize %d: Burst needs 1 to %d", c.BurstSize, BurstSizeLimit)
		}
	default:
		return fmt.Errorf("traffic config: Arrival %d: unknown process", c.Arrival)
	}
	return nil
}

// curveAt is the RateCurve's multiple at virtual time at: the points are
// evenly spaced from Start (the first) to Stop (the last), joined by
// straight lines.
func (c *TrafficConfig) curveAt(at time.Duration) float64 {
	n := len(c.RateCurve)
	span := c.Stop - c.Start
	x := float64(at-c.Start) / float64(span) * float64(n-1)
	switch {
	case x <= 0:
		return c.RateCurve[0]
	case x >= float64(n-1):
		return c.RateCurve[n-1]
	}
	i := int(x)
	frac := x - float64(i)
	return c.RateCurve[i] + frac*(c.RateCurve[i+1]-c.RateCurve[i])
}

// curvePeak is the RateCurve's largest multiple.
func (c *TrafficConfig) curvePeak() float64 {
	peak := 0.0
	for _, x := range c.RateCurve {
		peak = max(peak, x)
	}
	return peak
}

// diurnalGap draws the time from the later of now and Start to the next
// arrival of a Diurnal source, by thinning.
func (t *Traffic) diurnalGap(ctx actors.Context) time.Duration {
	r := ctx.Rand()
	base := max(ctx.Now(), t.cfg.Start)
	peakRate := t.cfg.Rate * t.cfg.curvePeak()
	c := float64(base)
	for range thinningTriesMax {
		c += r.ExpFloat64() / peakRate * float64(time.Second)
		if c >= float64(t.cfg.Stop) {
			return gapNever
		}
		if r.Float64()*peakRate < t.cfg.Rate*t.cfg.curveAt(time.Duration(c)) {
			break
		}
	}
	return max(time.Duration(c)-base, 1)
}

// burstGap draws the gap to the next arrival of a Burst source: 1 ns
// inside a group, an exponential gap of mean BurstSize/Rate before a new
// group.
func (t *Traffic) burstGap(ctx actors.Context) time.Duration {
	if t.groupLeft > 0 {
		t.groupLeft--
		return 1
	}
	t.groupLeft = t.cfg.BurstSize - 1
	s := ctx.Rand().ExpFloat64() * float64(t.cfg.BurstSize) / t.cfg.Rate
	if ns := s * float64(time.Second); ns < float64(gapNever) {
		return max(time.Duration(ns), 1)
	}
	return gapNever
}

// DiurnalCurve is a default day for Diurnal sources: 24 hourly multiples
// of the peak rate, from a night trough at a fifth of the peak (04:00)
// through a morning ramp to an afternoon peak (14:00 to 16:00) and an
// evening decline, the usual shape of interactive traffic in one region.
func DiurnalCurve() []float64 {
	return []float64{
		0.35, 0.28, 0.23, 0.21, 0.20, 0.22, 0.30, 0.45, // 00:00-07:00
		0.62, 0.76, 0.86, 0.92, 0.95, 0.98, 1.00, 1.00, // 08:00-15:00
		1.00, 0.96, 0.90, 0.82, 0.72, 0.62, 0.52, 0.43, // 16:00-23:00
	}
}
