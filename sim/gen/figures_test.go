package gen

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestFigures prints the reference generation workload's report at the
// rates in BATCHD_GEN_RATES (req/s, comma-separated), with device crashes
// at a chance of BATCHD_GEN_CRASHP per step (default 0) during the
// minute of arrivals, and with static batching instead of continuous
// when BATCHD_GEN_STATIC is set, and a TTFT SLO of BATCHD_GEN_TTFT (a
// duration; default 1s). It is for the figures in RESULTS.md, not for `make
// test`: it skips unless the variable is set.
//
//	BATCHD_GEN_RATES=16,48 go test -run TestFigures -v ./sim/gen/
func TestFigures(t *testing.T) {
	for _, rate := range envRates(t, "BATCHD_GEN_RATES", "print the generation figures") {
		cfg := DefaultConfig(1, rate)
		var err error
		if p := os.Getenv("BATCHD_GEN_CRASHP"); p != "" {
			if cfg.CrashP, err = strconv.ParseFloat(p, 64); err != nil {
				t.Fatalf("BATCHD_GEN_CRASHP: %v", err)
			}
			cfg.FaultsUntil = cfg.Duration
		}
		cfg.Gen.Static = os.Getenv("BATCHD_GEN_STATIC") != ""
		if v := os.Getenv("BATCHD_GEN_TTFT"); v != "" {
			if cfg.Gen.TTFT, err = time.ParseDuration(v); err != nil {
				t.Fatalf("BATCHD_GEN_TTFT: %v", err)
			}
		}
		rep, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rate %v req/s, crash chance per step %v, static batching %v, TTFT SLO %v, 2 devices, reference workload (seed 1):\n%s", rate, cfg.CrashP, cfg.Gen.Static, cfg.Gen.TTFT, rep)
		if len(rep.Violations) > 0 {
			t.Errorf("violations at rate %v", rate)
		}
	}
}

// TestStepCostSensitivityFigures prints the reference workload's TTFT
// p50 / p95 and tokens/s at each rate of BATCHD_GEN_SENSITIVITY (req/s,
// comma-separated) with every step's true cost raised by 0, 1, 2, 5, 10,
// 20, 50, 100 and 122 µs (the prediction unchanged): how far a run moves
// for what a live step adds, the reason the live figures compare with an
// ensemble of runs (engine/generate's TestLiveFigures). For RESULTS.md,
// not for `make test`: it skips unless the variable is set.
//
//	BATCHD_GEN_SENSITIVITY=16,32 go test -run TestStepCostSensitivityFigures -v ./sim/gen/
func TestStepCostSensitivityFigures(t *testing.T) {
	for _, rate := range envRates(t, "BATCHD_GEN_SENSITIVITY", "print the step cost sensitivity") {
		for _, us := range []time.Duration{0, 1, 2, 5, 10, 20, 50, 100, 122} {
			cfg := DefaultConfig(1, rate)
			cfg.Cost = cfg.Gen.Cost
			cfg.Cost.Base += us * time.Microsecond
			rep, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rate %v req/s, each step +%v: TTFT p50 %.1f / p95 %.1f ms, %.0f tokens/s while arrivals went on, outcomes %v",
				rate, us*time.Microsecond, rep.TTFT.P50, rep.TTFT.P95, rep.WindowTokensPerSec, rep.Outcomes)
		}
	}
}

// envRates is the rates (req/s, comma-separated) in the environment
// variable name; the test skips, saying it would then do what, when the
// variable is not set.
func envRates(t *testing.T, name, what string) []float64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("set %s (req/s, comma-separated) to %s", name, what)
	}
	var rates []float64
	for _, f := range splitComma(v) {
		rate, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rates = append(rates, rate)
	}
	return rates
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
