package sim

import (
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/batchd/batchd/actors"
)

// TestPropertySplitFairness is TestPropertyFairness across the
// accumulators of a split (Config.Split: one per model, every device
// shared between them, PolicyFair). Backlogged tenants of weights 1 to 4:
//
//   - each on a model of its own: each gets its weighted share (±10%) of
//     what all of them got, as with one batcher;
//   - spread (drawn with SPLIT_SPREAD set): tenant i sends to models m_0
//     to m_i, so tenants share keys and a tenant has requests in several
//     accumulators, charged in each and, through the devices they share
//     (actors.Share), in the others. One batcher does not give these their
//     weighted shares either (a tenant's own key and the keys it shares
//     are served by different rules: the fair order between keys,
//     admission within one), so the split must be no further off the
//     shares than one batcher on the same run, plus 5 points (or 10%).
//
// The ledger checks exactly one answer per request, its own output, and
// that no batch mixes keys; the policy recorder that every batch's items
// are of its key and went to a device warm for it.
//
// Seen to fail: with Offer.Before comparing aged levels between equal
// priorities (weights 1 and 2 on one device: 198.8 and 299.8 req/s, shares
// 166 and 332); with Offer.Served left 0 (the least slack first); with the
// charges not passed on between accumulators (spread; see the report).
func TestPropertySplitFairness(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Spread, tenants share keys as well (m_0 holds them all), so
		// the run is drawn as TestPropertyFairness draws a shared key
		// (its SLO and duration).
		spread := splitSpread && rapid.Bool().Draw(t, "spread")
		cfg, weights, _ := fairnessRun(t, true, spread)
		cfg.Split = true
		// Across keys only PolicyFair weighs tenants (TestPropertyFairness).
		cfg.Batcher.KeyPolicy = actors.PolicyFair
		if spread {
			for i := range cfg.Sources {
				cfg.Sources[i].Mix = nil
				for j := 0; j <= i; j++ {
					cfg.Sources[i].Mix = append(cfg.Sources[i].Mix, ModelMix{Model: fmt.Sprintf("m%d", j), Version: "v1", Weight: 1})
				}
			}
		}
		rep, rec := policyRun(t, cfg)
		if rec.errsN > 0 {
			t.Fatalf("%d batches broke their key: %v", rec.errsN, rec.errs)
		}
		xs := throughputs(rep, len(weights))
		worst, i := deviation(xs, weights)
		bound := 0.1
		if spread {
			one := cfg
			one.Split = false
			single, _ := policyRun(t, one)
			ys := throughputs(single, len(weights))
			was, _ := deviation(ys, weights)
			bound = max(bound, was+0.05)
			t.Logf("one batcher: %.1f req/s, %.3f off the weighted shares at worst", ys, was)
		}
		if worst > bound {
			t.Fatalf("tenant t%d (weight %g) is %.3f off its weighted share (at most %.3f; spread %v); all: %.1f req/s, weights %v\n%s",
				i, weights[i], worst, bound, spread, xs, weights, describeSources(cfg))
		}
	})
}

// deviation is the worst relative distance of a tenant's throughput from
// its weighted share of the total, and that tenant's index.
func deviation(xs, weights []float64) (float64, int) {
	total, sum := 0.0, 0.0
	for i := range xs {
		total += xs[i]
		sum += weights[i]
	}
	worst, at := 0.0, 0
	for i := range xs {
		share := total * weights[i] / sum
		if d := math.Abs(xs[i]-share) / share; d > worst {
			worst, at = d, i
		}
	}
	return worst, at
}

// throughputs is the completions per second of tenants t0 to t(n-1).
func throughputs(rep Report, n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = rep.Tenants[fmt.Sprintf("t%d", i)].ThroughputRPS
	}
	return xs
}

// splitSpread says whether TestPropertySplitFairness draws spread
// tenants.
var splitSpread = os.Getenv("SPLIT_SPREAD") != ""

// TestSplitSpreadFigures: tenants spread over models (tenant i sends to
// m_0 to m_i, as TestPropertySplitFairness draws with SPLIT_SPREAD) run
// through the split and through one batcher on the same draws, and the
// distribution of the worst tenant's distance from its weighted share is
// reported for both. The split must be no worse than one batcher on
// average (within 0.02). For the figures, not for `make test`: it skips
// unless SPLIT_SPREAD_FIGURES is set.
//
//	SPLIT_SPREAD_FIGURES=1 go test ./sim -run TestSplitSpreadFigures -v -rapid.checks=60 -rapid.seed=1
func TestSplitSpreadFigures(t *testing.T) {
	if os.Getenv("SPLIT_SPREAD_FIGURES") == "" {
		t.Skip("set SPLIT_SPREAD_FIGURES to compare the split with one batcher for spread tenants")
	}
	var split, one []float64
	rapid.Check(t, func(t *rapid.T) {
		cfg, weights, _ := fairnessRun(t, true, true)
		cfg.Split = true
		cfg.Batcher.KeyPolicy = actors.PolicyFair
		for i := range cfg.Sources {
			cfg.Sources[i].Mix = nil
			for j := 0; j <= i; j++ {
				cfg.Sources[i].Mix = append(cfg.Sources[i].Mix, ModelMix{Model: fmt.Sprintf("m%d", j), Version: "v1", Weight: 1})
			}
		}
		rep, _ := policyRun(t, cfg)
		d, _ := deviation(throughputs(rep, len(weights)), weights)
		split = append(split, d)
		cfg.Split = false
		rep, _ = policyRun(t, cfg)
		d, _ = deviation(throughputs(rep, len(weights)), weights)
		one = append(one, d)
	})
	summary := func(xs []float64) (mean float64, s string) {
		xs = slices.Sorted(slices.Values(xs))
		for _, x := range xs {
			mean += x
		}
		mean /= float64(len(xs))
		return mean, fmt.Sprintf("mean %.3f, p50 %.3f, p90 %.3f, max %.3f", mean, xs[len(xs)/2], xs[len(xs)*9/10], xs[len(xs)-1])
	}
	ms, ss := summary(split)
	mo, so := summary(one)
	t.Logf("%d draws, the worst tenant's distance from its weighted share: split %s; one batcher %s", len(split), ss, so)
	if ms > mo+0.02 {
		t.Errorf("the split is further off the weighted shares than one batcher on average: %.3f against %.3f", ms, mo)
	}
}
