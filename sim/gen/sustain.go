package gen

import (
	"fmt"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/gen"
)

// LongTailOutLen is the output length distribution of the throughput
// target's long-tail workload: lognormal of median 64 and sigma 1.18, so
// its p99 is about 1,000 tokens (64·e^(2.326·1.18) = 997), cut at 1,024.
var LongTailOutLen = gen.Lognormal{Median: 64, Sigma: 1.18, Max: 1024}

// LongTailConfig is the reference workload (DefaultConfig) with the
// long-tail outputs (LongTailOutLen).
func LongTailConfig(seed uint64, rate float64) Config {
	cfg := DefaultConfig(seed, rate)
	cfg.OutLen = LongTailOutLen
	return cfg
}

// SweepPoint is one run of a rate sweep: its offered rate (req/s), the
// tokens/s delivered during the arrivals, the TTFT p95 of completed
// requests (every tenant pooled), and the share of the offered requests
// that did not complete.
type SweepPoint struct {
	Rate         float64
	TokensPerSec float64
	TTFTP95      time.Duration
	Lost         float64
	Sustained    bool
}

func (p SweepPoint) String() string {
	return fmt.Sprintf("rate %.2f req/s: %.0f tokens/s, TTFT p95 %.1f ms, %.2f%% not completed, sustained %v",
		p.Rate, p.TokensPerSec, float64(p.TTFTP95)/1e6, 100*p.Lost, p.Sustained)
}

// SustainBound is what a rate must keep to be sustained: the TTFT p95 of
// completed requests within TTFTP95, and at most LostMax of the offered
// requests not completed (expired, failed early, refused).
type SustainBound struct {
	TTFTP95 time.Duration
	LostMax float64
}

// Sweep finds the highest rate in [lo, hi] that keeps b, by bisection
// (steps halvings after lo and hi): run runs the workload at a rate. It
// returns the best sustained point (Rate 0 if even lo is not) and every
// point tried, in order. It assumes that what a rate sustains, a lower
// rate sustains too.
func Sweep(run func(rate float64) (SweepPoint, error), b SustainBound, lo, hi float64, steps int) (SweepPoint, []SweepPoint, error) {
	var tried []SweepPoint
	try := func(rate float64) (SweepPoint, error) {
		p, err := run(rate)
		if err != nil {
			return p, err
		}
		p.Rate = rate
		p.Sustained = p.TTFTP95 <= b.TTFTP95 && p.Lost <= b.LostMax
		tried = append(tried, p)
		return p, nil
	}
	best, err := try(lo)
	if err != nil || !best.Sustained {
		return SweepPoint{}, tried, err
	}
	top, err := try(hi)
	if err != nil {
		return best, tried, err
	}
	if top.Sustained {
		return top, tried, nil
	}
	for range steps {
		p, err := try((lo + hi) / 2)
		if err != nil {
			return best, tried, err
		}
		if p.Sustained {
			best, lo = p, p.Rate
		} else {
			hi = p.Rate
		}
	}
	return best, tried, nil
}

// Point is the report's SweepPoint (its Rate and Sustained unset).
func (rep *Report) Point() SweepPoint {
	p := SweepPoint{TokensPerSec: rep.WindowTokensPerSec, TTFTP95: time.Duration(rep.TTFT.P95 * 1e6)}
	if rep.Requests > 0 {
		p.Lost = 1 - float64(rep.Outcomes[actors.Completed.String()])/float64(rep.Requests)
	}
	return p
}
