package gen

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestLongTailOutLen: the long-tail workload's outputs have the
// throughput target's shape, median 64 and p99 about 1,000 tokens
// (within 5%, over 200,000 draws). Deliberate break: the reference
// workload's sigma 1 gives p99 655.
func TestLongTailOutLen(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 200_000
	v := make([]int, n)
	for i := range v {
		v[i] = LongTailOutLen.Draw(r)
	}
	slices.Sort(v)
	med, p99 := v[n/2], v[int(math.Ceil(0.99*float64(n)))-1]
	t.Logf("outputs: median %d, p99 %d", med, p99)
	if med < 61 || med > 67 || p99 < 950 || p99 > 1050 {
		t.Fatalf("median %d, p99 %d: want 64 and about 1,000", med, p99)
	}
}

// TestSweepFindsEdge: the sweep's bisection ends next to the highest
// sustained rate of a made-up workload (sustained below 10 req/s).
// Deliberate break: keeping the failing half (`lo = p.Rate` when not
// sustained) ends at 1.
func TestSweepFindsEdge(t *testing.T) {
	run := func(rate float64) (SweepPoint, error) {
		return SweepPoint{TokensPerSec: 100 * rate, TTFTP95: time.Duration(rate * float64(100*time.Millisecond))}, nil
	}
	best, tried, err := Sweep(run, SustainBound{TTFTP95: time.Second}, 1, 64, 10)
	if err != nil {
		t.Fatal(err)
	}
	if best.Rate > 10 || best.Rate < 9.9 || len(tried) != 12 {
		t.Fatalf("best %v after %d runs, want just under 10 after 12", best, len(tried))
	}
}

// TestSustainedFigures finds, for the long-tail workload (outputs of
// median 64, p99 about 1,000), the highest tokens/s that continuous and
// static batching each sustain with the TTFT p95 of completed requests
// within BATCHD_GEN_SUSTAIN_TTFT (default 1s; also the scheduler's TTFT
// SLO) and at most 1% of the
// requests not completed, by a rate sweep (bisection between
// BATCHD_GEN_SUSTAIN_LO, default 0.5, and 64 req/s, 10 halvings; each run
// BATCHD_GEN_SUSTAIN_DURATION of arrivals, default 1m), and their ratio.
// For the figures: it skips unless BATCHD_GEN_SUSTAIN is set.
//
//	BATCHD_GEN_SUSTAIN=1 go test -count=1 -run TestSustainedFigures -v ./sim/gen/
func TestSustainedFigures(t *testing.T) {
	if os.Getenv("BATCHD_GEN_SUSTAIN") == "" {
		t.Skip("set BATCHD_GEN_SUSTAIN=1 to sweep the rates continuous and static batching sustain")
	}
	bound := SustainBound{TTFTP95: time.Second, LostMax: 0.01}
	if v := os.Getenv("BATCHD_GEN_SUSTAIN_TTFT"); v != "" {
		var err error
		if bound.TTFTP95, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	seed := uint64(1)
	if v := os.Getenv("BATCHD_GEN_SUSTAIN_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = s
	}
	dur := time.Minute
	if v := os.Getenv("BATCHD_GEN_SUSTAIN_DURATION"); v != "" {
		var err error
		if dur, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	lo := 0.5
	if v := os.Getenv("BATCHD_GEN_SUSTAIN_LO"); v != "" {
		var err error
		if lo, err = strconv.ParseFloat(v, 64); err != nil {
			t.Fatal(err)
		}
	}
	var best [2]SweepPoint
	for i, static := range []bool{false, true} {
		run := func(rate float64) (SweepPoint, error) {
			cfg := LongTailConfig(seed, rate)
			cfg.Duration = dur
			cfg.Gen.Static = static
			// The scheduler's TTFT SLO is the bound: a request fails early
			// only when its first token cannot come within it.
			cfg.Gen.TTFT = bound.TTFTP95
			cfg.Gen.Timeout = max(cfg.Gen.Timeout, cfg.Gen.TTFT+time.Minute)
			rep, err := Run(cfg)
			if err != nil {
				return SweepPoint{}, err
			}
			if len(rep.Violations) > 0 {
				t.Errorf("violations at %v req/s:\n%s", rate, rep)
			}
			return rep.Point(), nil
		}
		b, tried, err := Sweep(run, bound, lo, 64, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range tried {
			t.Logf("static %v: %v", static, p)
		}
		t.Logf("static %v: sustains %v", static, b)
		best[i] = b
	}
	if best[1].TokensPerSec > 0 {
		t.Logf("continuous / static tokens/s at TTFT p95 <= %v, <= %.0f%% lost: %.0f / %.0f = %.2fx", bound.TTFTP95, 100*bound.LostMax,
			best[0].TokensPerSec, best[1].TokensPerSec, best[0].TokensPerSec/best[1].TokensPerSec)
	}
}

// TestArrivalsReplay: Arrivals is the workload a run offers, request for
// request (what a live run replays: prompt, tenant, max_tokens, arrival
// time), one seed gives one workload and another seed another.
// Deliberate break: the run offering a request at another time than its
// Arrival (`a.Req.Arrival = 0` in run.arrivals) fails it.
func TestArrivalsReplay(t *testing.T) {
	cfg := DefaultConfig(3, 20)
	cfg.Duration, cfg.CancelFrac, cfg.CancelWithin = 5*time.Second, 0.2, time.Second
	r, err := newRun(cfg)
	if err != nil {
		t.Fatal(err)
	}
	all := Arrivals(cfg)
	if len(all) != len(r.l.order) || len(all) < 50 {
		t.Fatalf("%d arrivals, the run offers %d", len(all), len(r.l.order))
	}
	cancels := 0
	for i, a := range all {
		got := r.l.recs[r.l.order[i]].req
		a.Req.ReplyTo = got.ReplyTo
		if got != a.Req {
			t.Fatalf("arrival %d: %+v, the run offers %+v", i, a.Req, got)
		}
		if a.CancelAt > 0 {
			cancels++
		}
	}
	if cancels == 0 {
		t.Fatal("no cancel drawn")
	}
	again := Arrivals(cfg)
	if !slices.Equal(all, again) {
		t.Fatal("one seed gave two workloads")
	}
	cfg.Seed++
	if other := Arrivals(cfg); len(other) > 0 && other[0].Req.Prompt == all[0].Req.Prompt {
		t.Fatal("another seed gave the same first prompt")
	}
}
