package server

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/generate"
	"github.com/batchd/batchd/engine/openai"
)

// TestBytenetGenFigures times generation on bytenet's CPU generator (one
// device, the generation section's defaults otherwise) through Generate:
// Poisson arrivals at BATCHD_GEN_BYTENET_RATE req/s for
// BATCHD_GEN_BYTENET_DURATION (default 20s), prompts of 256 random
// printable bytes, max_tokens BATCHD_GEN_BYTENET_TOKENS (default 128;
// bytenet has no stop byte, so every stream runs to it), every other
// request sampled (temperature 0.8, its own seed). It reports tokens/s
// over the run and TTFT and TPOT ((last - first) / (tokens - 1))
// percentiles, as a client sees them, and how far past its predicted end
// a step ended on average (the cost model's error). BATCHD_GEN_BYTENET_COST
// (a YAML flow mapping, {base: 8ms, per_token: 40us, per_kv_token: 500ns})
// sets the cost the scheduler predicts with; by default bytenet's own
// (config.BytenetCPUCost); BATCHD_GEN_BYTENET_MARGIN the reply_margin (by
// default the section's). For the figures, not for `make test`: it skips
// unless BATCHD_GEN_BYTENET_RATE is set.
//
//	BATCHD_GEN_BYTENET_RATE=20 go test -count=1 -run TestBytenetGenFigures -v ./engine/server/
func TestBytenetGenFigures(t *testing.T) {
	rateS := os.Getenv("BATCHD_GEN_BYTENET_RATE")
	if rateS == "" {
		t.Skip("set BATCHD_GEN_BYTENET_RATE (req/s) to time bytenet generation on the CPU")
	}
	rate, err := strconv.ParseFloat(rateS, 64)
	if err != nil || !(rate > 0) {
		t.Fatalf("BATCHD_GEN_BYTENET_RATE %q: want a rate > 0", rateS)
	}
	dur, maxTokens := 20*time.Second, 128
	if v := os.Getenv("BATCHD_GEN_BYTENET_DURATION"); v != "" {
		if dur, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	if v := os.Getenv("BATCHD_GEN_BYTENET_TOKENS"); v != "" {
		if maxTokens, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	conf := "generation:\n  enabled: true\n  backend: bytenet\n  models: [bytenet]\n"
	if v := os.Getenv("BATCHD_GEN_BYTENET_COST"); v != "" {
		conf += "  cost: " + v + "\n" // a flow mapping: {base: 8ms, per_token: 40us}
	}
	if v := os.Getenv("BATCHD_GEN_BYTENET_MARGIN"); v != "" {
		conf += "  reply_margin: " + v + "\n"
	}
	f, err := config.Load("bytenet.yaml", []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	s, err := generate.New(generate.Config{Models: f.Generation.Models, Gen: f.GenConfig(), OutLen: f.GenOutputLen(), NewStep: newBytenetGen})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	rng := rand.New(rand.NewPCG(1, 2))
	var (
		mu             sync.Mutex
		wg             sync.WaitGroup
		ttft, tpot     []time.Duration
		tokens, failed int
		offered        int
		last           time.Time
		errs           = map[string]int{}
	)
	start := time.Now()
	for at := time.Duration(0); ; offered++ {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= dur {
			break
		}
		p := make([]byte, 256)
		for i := range p {
			p[i] = byte(32 + rng.IntN(95))
		}
		req := openai.Request{Model: "bytenet", Prompt: string(p), MaxTokens: maxTokens}
		if offered%2 == 1 {
			req.Temperature, req.Seed = 0.8, int64(offered)
		}
		time.Sleep(time.Until(start.Add(at)))
		wg.Go(func() {
			sent := time.Now()
			var first, prev time.Time
			n := 0
			_, err := s.Generate(context.Background(), req, func(string) error {
				prev = time.Now()
				if n == 0 {
					first = prev
				}
				n++
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			tokens += n
			if prev.After(last) {
				last = prev
			}
			if err != nil {
				failed++
				errs[err.Error()]++
				return
			}
			ttft = append(ttft, first.Sub(sent))
			if n > 1 {
				tpot = append(tpot, prev.Sub(first)/time.Duration(n-1))
			}
		})
	}
	wg.Wait()
	span := last.Sub(start)
	st := s.Stats("bytenet")
	t.Logf("bytenet on the CPU, 1 device, cost %+v, %v req/s for %v, prompts 256 B, max_tokens %d: %d offered, %d failed %v; %d tokens in %v: %.0f tokens/s; %d steps (%.1f tokens a step, each %v past its predicted end on average); TTFT ms %s; TPOT ms %s",
		f.GenConfig().Cost, rate, dur, maxTokens, offered, failed, errs, tokens, span.Round(time.Millisecond), float64(tokens)/span.Seconds(),
		st.Steps, float64(st.Tokens)/float64(max(st.Steps, 1)), st.StepLateMean, pcts(ttft), pcts(tpot))
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
	return fmt.Sprintf("p50 %.2f / p95 %.2f / p99 %.2f", at(0.5), at(0.95), at(0.99))
}
