package generate

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai"
	simgen "github.com/batchd/batchd/sim/gen"
)

// TestLiveFigures runs the simulator's reference generation workload
// (sim/gen.DefaultConfig: 2 devices of gen.DefaultConfig, prompts of median
// 256 tokens, outputs of median 64, max_tokens 1024, two tenants) live,
// through Generate, for BATCHD_GEN_LIVE_DURATION (default 60s) of Poisson
// arrivals at each rate of BATCHD_GEN_LIVE_RATES (req/s), with static
// batching when BATCHD_GEN_STATIC is set, BATCHD_GEN_LIVE_RUNS times
// (default 1); then the same config in the simulator, on the very same
// arrivals (simgen.Arrivals), with every tenant's latencies pooled as
// here. It times what a client sees: TTFT from the call to the first
// token, TPOT (last - first) / (tokens - 1), tokens/s over the run. For
// the figures, not for `make test`: it skips unless BATCHD_GEN_LIVE_RATES
// is set.
//
// Near capacity one run of the simulator is not a figure to hold the live
// one to: there a step that costs a microsecond more moves the TTFT p95
// by several percent (which requests expire, and so who waits behind
// whom, changes), and a live step costs tens to hundreds of microseconds
// more than its model, never the same twice. So the simulator also runs
// as an ensemble, ensembleRuns times with each step costing k/32 of what
// the live steps added on average (their lateness and handover, k = 0 to
// 32), and the live runs' medians are compared with the ensemble's, beside
// the live runs' band (least to most) and the ensemble's quartiles and
// band.
//
//	BATCHD_GEN_LIVE_RATES=16,32 BATCHD_GEN_LIVE_RUNS=3 go test -count=1 -timeout 30m -run TestLiveFigures -v ./engine/generate/
func TestLiveFigures(t *testing.T) {
	rates := os.Getenv("BATCHD_GEN_LIVE_RATES")
	if rates == "" {
		t.Skip("set BATCHD_GEN_LIVE_RATES (req/s, comma-separated) to time the reference workload live")
	}
	dur, err := time.ParseDuration(cmp.Or(os.Getenv("BATCHD_GEN_LIVE_DURATION"), "60s"))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := strconv.Atoi(cmp.Or(os.Getenv("BATCHD_GEN_LIVE_RUNS"), "1"))
	if err != nil || runs < 1 {
		t.Fatalf("BATCHD_GEN_LIVE_RUNS %q: want a count of at least 1", os.Getenv("BATCHD_GEN_LIVE_RUNS"))
	}
	for _, f := range splitComma(rates) {
		rate, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatal(err)
		}
		cfg := simgen.DefaultConfig(1, rate)
		cfg.Duration = dur
		cfg.Gen.Static = os.Getenv("BATCHD_GEN_STATIC") != ""
		var live figureSet
		var over time.Duration
		for i := range runs {
			lr := runLive(t, cfg)
			t.Logf("LIVE %d/%d rate %v req/s, static %v, %v of arrivals: %s", i+1, runs, rate, cfg.Gen.Static, dur, lr)
			t.Logf("    live steps: %d, each past its predicted end by %v on average, and %v from its result to the next step handed over", lr.steps, lr.stepLate, lr.handover)
			live.add(pctMs(lr.ttft, 0.5), pctMs(lr.ttft, 0.95), lr.point().TokensPerSec)
			over += (lr.stepLate + lr.handover) / time.Duration(runs)
		}
		var ens figureSet
		for k := range ensembleRuns {
			c := cfg
			c.Cost = c.Gen.Cost
			c.Cost.Base += over * time.Duration(k) / (ensembleRuns - 1)
			rep, err := simgen.Run(c)
			if err != nil {
				t.Fatal(err)
			}
			ens.add(rep.TTFT.P50, rep.TTFT.P95, rep.WindowTokensPerSec)
			if k%8 == 0 {
				t.Logf("SIM+%v a step, rate %v req/s: %s", (c.Cost.Base - c.Gen.Cost.Base).Round(time.Microsecond), rate, simSummary(rep))
			}
		}
		t.Logf("rate %v req/s: live (%d runs) against the simulator's ensemble (%d runs, +0 to +%v a step): %s",
			rate, runs, ensembleRuns, over.Round(time.Microsecond), live.against(ens))
	}
}

// ensembleRuns is how many times TestLiveFigures runs the simulator for a
// rate, each step's cost raised by a share of the live overhead: enough
// that the ensemble's median p95 is not one run's chaos (a run takes 0.1
// s).
const ensembleRuns = 33

// figureSet holds runs' TTFT p50 and p95 (ms) and tokens/s while
// arrivals went on.
type figureSet struct{ p50, p95, tps []float64 }

func (s *figureSet) add(p50, p95, tps float64) {
	s.p50, s.p95, s.tps = append(s.p50, p50), append(s.p95, p95), append(s.tps, tps)
}

// against compares s's medians with ens's, with ens's band.
func (s figureSet) against(ens figureSet) string {
	one := func(name, unit string, l, e []float64) string {
		lm, em := median(l), median(e)
		return fmt.Sprintf("%s %.1f against %.1f%s (%+.1f%%; live %.1f-%.1f, ensemble %.1f-%.1f, quartiles %.1f-%.1f)",
			name, lm, em, unit, 100*(lm/em-1), slices.Min(l), slices.Max(l), slices.Min(e), slices.Max(e), quantile(e, 0.25), quantile(e, 0.75))
	}
	return one("TTFT p50", " ms", s.p50, ens.p50) + "; " + one("p95", " ms", s.p95, ens.p95) + "; " + one("tokens/s", "", s.tps, ens.tps)
}

func median(v []float64) float64 { return quantile(v, 0.5) }

// quantile is v's q-quantile, interpolated between the two nearest ranks.
func quantile(v []float64, q float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}

func pctMs(d []time.Duration, q float64) float64 { return float64(pctAt(d, q)) / 1e6 }

type liveReport struct {
	offered, completed, failed int
	tokens, windowTokens       int64
	makespan, window           time.Duration
	// steps run, and what each added to its cost on average: the wait
	// past its predicted end, the handover to the next.
	steps              int64
	stepLate, handover time.Duration
	ttft, tpot, e2e    []time.Duration
	errs               map[string]int
}

func (r liveReport) String() string {
	return fmt.Sprintf("%d offered, %d completed, %d refused or failed %v; %d tokens in %v: %.0f tokens/s (%.0f while arrivals went on); TTFT ms %s; TPOT ms %s; e2e ms %s",
		r.offered, r.completed, r.failed, r.errs, r.tokens, r.makespan.Round(time.Millisecond),
		float64(r.tokens)/r.makespan.Seconds(), r.point().TokensPerSec, pcts(r.ttft), pcts(r.tpot), pcts(r.e2e))
}

// point is the run's SweepPoint (its Rate and Sustained unset).
func (r liveReport) point() simgen.SweepPoint {
	p := simgen.SweepPoint{TTFTP95: pctAt(r.ttft, 0.95)}
	if r.window > 0 {
		p.TokensPerSec = float64(r.windowTokens) / r.window.Seconds()
	}
	if r.offered > 0 {
		p.Lost = 1 - float64(r.completed)/float64(r.offered)
	}
	return p
}

func pctAt(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

func pcts(d []time.Duration) string {
	if len(d) == 0 {
		return "-"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) float64 {
		return float64(s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]) / 1e6
	}
	return fmt.Sprintf("p50 %.1f / p95 %.1f / p99 %.1f", at(0.5), at(0.95), at(0.99))
}

func simSummary(rep *simgen.Report) string {
	return fmt.Sprintf("%d offered, outcomes %v; %d tokens: %.0f tokens/s (%.0f while arrivals went on); TTFT ms p50 %.1f / p95 %.1f / p99 %.1f; TPOT ms p50 %.1f / p95 %.1f / p99 %.1f; KV mean %.1f%%",
		rep.Requests, rep.Outcomes, rep.Tokens, rep.TokensPerSec, rep.WindowTokensPerSec, rep.TTFT.P50, rep.TTFT.P95, rep.TTFT.P99, rep.TPOT.P50, rep.TPOT.P95, rep.TPOT.P99, 100*rep.KVMean)
}

// runLive offers cfg's workload to a live Service: the simulator's very
// arrivals (simgen.Arrivals: the same seed gives the same prompts, hence
// the same emulated output lengths, the same tenants and arrival times),
// each sent at its arrival time from its own goroutine, as an HTTP
// handler would be.
func runLive(t *testing.T, cfg simgen.Config) liveReport {
	s := newService(t, Config{Models: []string{cfg.Gen.Model}, Gen: cfg.Gen, OutLen: cfg.OutLen})
	all := simgen.Arrivals(cfg)
	var (
		mu  sync.Mutex
		rep = liveReport{offered: len(all), errs: map[string]int{}}
		wg  sync.WaitGroup
	)
	start := time.Now()
	window := start.Add(cfg.Duration)
	var last time.Time
	for _, a := range all {
		time.Sleep(time.Until(start.Add(a.Req.Arrival)))
		wg.Go(func() {
			sent := time.Now()
			var first, prev time.Time
			n, inWindow := 0, 0
			_, err := s.Generate(context.Background(), openai.Request{Model: cfg.Gen.Model, Prompt: a.Req.Prompt, MaxTokens: a.Req.MaxTokens, Tenant: a.Req.Tenant},
				func(string) error {
					now := time.Now()
					if n == 0 {
						first = now
					}
					if now.Before(window) {
						inWindow++
					}
					prev = now
					n++
					return nil
				})
			mu.Lock()
			defer mu.Unlock()
			rep.tokens += int64(n)
			rep.windowTokens += int64(inWindow)
			if prev.After(last) {
				last = prev
			}
			if err != nil {
				rep.failed++
				rep.errs[errKey(err)]++
				return
			}
			rep.completed++
			rep.ttft = append(rep.ttft, first.Sub(sent))
			rep.e2e = append(rep.e2e, prev.Sub(sent))
			if n > 1 {
				rep.tpot = append(rep.tpot, prev.Sub(first)/time.Duration(n-1))
			}
		})
	}
	wg.Wait()
	if len(all) > 0 {
		rep.makespan = last.Sub(start.Add(all[0].Req.Arrival))
	}
	rep.window = cfg.Duration
	st := s.Stats(cfg.Gen.Model)
	rep.steps, rep.stepLate, rep.handover = st.Steps, st.StepLateMean, st.HandoverMean
	return rep
}

func errKey(err error) string {
	if e, ok := err.(*openai.Error); ok {
		return strconv.Itoa(e.Status) + " " + e.Code
	}
	return err.Error()
}

func splitComma(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// TestLiveSustainedFigures sweeps the long-tail workload
// (simgen.LongTailConfig: outputs of median 64, p99 about 1,000) live,
// for continuous batching between the rates of BATCHD_GEN_LIVE_SUSTAIN
// ("lo,hi" req/s) and for static batching between those of
// BATCHD_GEN_LIVE_SUSTAIN_STATIC (default "0.25,1"), by bisection
// (BATCHD_GEN_LIVE_SUSTAIN_STEPS halvings, default 3), each run
// BATCHD_GEN_LIVE_DURATION (default 60s) of the simulator's arrivals:
// the highest tokens/s (while arrivals go on) with the TTFT p95 of
// completed requests within 1 s (the scheduler's TTFT SLO) and at most 1%
// of the requests not completed, and the ratio. The simulator's point for
// each rate tried is printed beside it. For the figures: it skips unless
// BATCHD_GEN_LIVE_SUSTAIN is set.
//
//	BATCHD_GEN_LIVE_SUSTAIN=20,32 go test -count=1 -timeout 60m -run TestLiveSustainedFigures -v ./engine/generate/
func TestLiveSustainedFigures(t *testing.T) {
	cont := os.Getenv("BATCHD_GEN_LIVE_SUSTAIN")
	if cont == "" {
		t.Skip("set BATCHD_GEN_LIVE_SUSTAIN=lo,hi (req/s) to sweep the long-tail workload live")
	}
	static := cmp.Or(os.Getenv("BATCHD_GEN_LIVE_SUSTAIN_STATIC"), "0.25,1")
	steps, err := strconv.Atoi(cmp.Or(os.Getenv("BATCHD_GEN_LIVE_SUSTAIN_STEPS"), "3"))
	if err != nil {
		t.Fatal(err)
	}
	dur, err := time.ParseDuration(cmp.Or(os.Getenv("BATCHD_GEN_LIVE_DURATION"), "60s"))
	if err != nil {
		t.Fatal(err)
	}
	bound := simgen.SustainBound{TTFTP95: time.Second, LostMax: 0.01}
	var best [2]simgen.SweepPoint
	for i, rng := range []string{cont, static} {
		f := splitComma(rng)
		if len(f) != 2 {
			t.Fatalf("%q: want lo,hi", rng)
		}
		lo, err1 := strconv.ParseFloat(f[0], 64)
		hi, err2 := strconv.ParseFloat(f[1], 64)
		if err := cmp.Or(err1, err2); err != nil {
			t.Fatal(err)
		}
		isStatic := i == 1
		run := func(rate float64) (simgen.SweepPoint, error) {
			cfg := simgen.LongTailConfig(1, rate)
			cfg.Duration = dur
			cfg.Gen.Static = isStatic
			live := runLive(t, cfg)
			rep, err := simgen.Run(cfg)
			if err != nil {
				return simgen.SweepPoint{}, err
			}
			sp := rep.Point()
			sp.Rate = rate
			sp.Sustained = sp.TTFTP95 <= bound.TTFTP95 && sp.Lost <= bound.LostMax
			t.Logf("static %v, rate %.3f: LIVE %s\n    SIM %v", isStatic, rate, live, sp)
			return live.point(), nil
		}
		b, tried, err := simgen.Sweep(run, bound, lo, hi, steps)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range tried {
			t.Logf("static %v: LIVE %v", isStatic, p)
		}
		t.Logf("static %v: sustains LIVE %v", isStatic, b)
		best[i] = b
	}
	if best[1].TokensPerSec > 0 {
		t.Logf("LIVE continuous / static tokens/s at TTFT p95 <= %v, <= %.0f%% lost: %.0f / %.0f = %.2fx",
			bound.TTFTP95, 100*bound.LostMax, best[0].TokensPerSec, best[1].TokensPerSec, best[0].TokensPerSec/best[1].TokensPerSec)
	}
}
