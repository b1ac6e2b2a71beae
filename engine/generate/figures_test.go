package generate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
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
// (sim/gen.DefaultConfig: 2 devices of DefaultGenConfig, prompts of median
// 256 tokens, outputs of median 64, max_tokens 1024, two tenants) live,
// through Generate, for BATCHD_GEN_LIVE_DURATION (default 60s) of Poisson
// arrivals at each rate of BATCHD_GEN_LIVE_RATES (req/s), with static
// batching when BATCHD_GEN_STATIC is set; then the same config in the
// simulator, with every tenant's latencies pooled as here. It times what
// a client sees: TTFT from the call to the first token, TPOT (last - first)
// / (tokens - 1), tokens/s over the run. For the figures, not for `make
// test`: it skips unless BATCHD_GEN_LIVE_RATES is set.
//
//	BATCHD_GEN_LIVE_RATES=16 go test -count=1 -run TestLiveFigures -v ./engine/generate/
func TestLiveFigures(t *testing.T) {
	rates := os.Getenv("BATCHD_GEN_LIVE_RATES")
	if rates == "" {
		t.Skip("set BATCHD_GEN_LIVE_RATES (req/s, comma-separated) to time the reference workload live")
	}
	dur := time.Minute
	if v := os.Getenv("BATCHD_GEN_LIVE_DURATION"); v != "" {
		var err error
		if dur, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range splitComma(rates) {
		rate, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatal(err)
		}
		cfg := simgen.DefaultConfig(1, rate)
		cfg.Duration = dur
		cfg.Gen.Static = os.Getenv("BATCHD_GEN_STATIC") != ""
		live := runLive(t, cfg)
		t.Logf("LIVE  rate %v req/s, static %v, %v of arrivals: %s", rate, cfg.Gen.Static, dur, live)
		rep, err := simgen.Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("SIM   rate %v req/s, static %v, %v of arrivals: %s", rate, cfg.Gen.Static, dur, simSummary(rep))
	}
}

type liveReport struct {
	offered, completed, failed int
	tokens                     int64
	makespan                   time.Duration
	ttft, tpot, e2e            []time.Duration
	errs                       map[string]int
}

func (r liveReport) String() string {
	return fmt.Sprintf("%d offered, %d completed, %d refused or failed %v; %d tokens in %v: %.0f tokens/s; TTFT ms %s; TPOT ms %s; e2e ms %s",
		r.offered, r.completed, r.failed, r.errs, r.tokens, r.makespan.Round(time.Millisecond),
		float64(r.tokens)/r.makespan.Seconds(), pcts(r.ttft), pcts(r.tpot), pcts(r.e2e))
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
	var ttft, tpot simgen.Percentiles
	completed := 0
	for i, tr := range rep.Tenants {
		completed += tr.Completed
		if i == 0 {
			ttft, tpot = tr.TTFT, tr.TPOT
		}
	}
	return fmt.Sprintf("%d offered, outcomes %v; %d tokens: %.0f tokens/s; tenant a: TTFT ms p50 %.1f / p95 %.1f / p99 %.1f; TPOT ms p50 %.1f / p95 %.1f / p99 %.1f; KV mean %.1f%%",
		rep.Requests, rep.Outcomes, rep.Tokens, rep.TokensPerSec, ttft.P50, ttft.P95, ttft.P99, tpot.P50, tpot.P95, tpot.P99, 100*rep.KVMean)
}

// runLive offers cfg's workload to a live Service: the same
// distributions as the simulator (its own draws), sent at their arrival
// times, every request its own goroutine, as an HTTP handler would be.
func runLive(t *testing.T, cfg simgen.Config) liveReport {
	s := newService(t, Config{Models: []string{cfg.Gen.Model}, Gen: cfg.Gen, OutLen: cfg.OutLen})
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6c697665))
	type arrival struct {
		at     time.Duration
		tenant string
		prompt string
	}
	var all []arrival
	for _, tn := range cfg.Tenants {
		at := time.Duration(0)
		for {
			at += time.Duration(rng.ExpFloat64() / tn.Rate * float64(time.Second))
			if at >= cfg.Duration {
				break
			}
			p := make([]byte, cfg.PromptLen.Draw(rng))
			for i := range p {
				p[i] = 'a' + byte(rng.IntN(26))
			}
			all = append(all, arrival{at, tn.Name, string(p)})
		}
	}
	slices.SortFunc(all, func(a, b arrival) int { return int(a.at - b.at) })
	var (
		mu  sync.Mutex
		rep = liveReport{offered: len(all), errs: map[string]int{}}
		wg  sync.WaitGroup
	)
	start := time.Now()
	var last time.Time
	for _, a := range all {
		time.Sleep(time.Until(start.Add(a.at)))
		wg.Go(func() {
			sent := time.Now()
			var first, prev time.Time
			n := 0
			_, err := s.Generate(context.Background(), openai.Request{Model: cfg.Gen.Model, Prompt: a.prompt, MaxTokens: cfg.MaxTokens, Tenant: a.tenant},
				func(string) error {
					now := time.Now()
					if n == 0 {
						first = now
					}
					prev = now
					n++
					return nil
				})
			mu.Lock()
			defer mu.Unlock()
			rep.tokens += int64(n)
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
	rep.makespan = last.Sub(start)
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
