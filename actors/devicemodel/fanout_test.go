package devicemodel

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// meanTook is the mean batch time of batches of n inputs over runs draws.
func meanTook(t *testing.T, m *Model, n, runs int) time.Duration {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	in := strings.Split(strings.Repeat("x,", n-1)+"x", ",")
	var sum time.Duration
	for range runs {
		f := m.Draw(0, rng, in)
		if f.Kind != FateDone {
			t.Fatalf("fate %v", f.Kind)
		}
		sum += f.Took
	}
	return sum / time.Duration(runs)
}

// Under a spread, each fanned-out call varies on its own and a batch ends
// with its last call: one call at a time, a batch of 100 lasts the sum of
// its calls (mean 100 calls); all at once, it lasts its slowest (far more
// than one mean call); without a spread, exactly its waves.
func TestFanoutSpreadPerCall(t *testing.T) {
	const call = 100 * time.Millisecond
	model := func(conc int, sigma float64) *Model {
		m, err := New(actors.LatencyModel{FanoutConcurrency: conc, FanoutCall: call}, FaultPlan{})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetLatencySpread(sigma); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if got := meanTook(t, model(8, 0), 100, 10); got != 13*call {
		t.Errorf("no spread: %v, want 13 waves of %v", got, call)
	}
	serial := meanTook(t, model(1, 0.5), 100, 400)
	if lo, hi := 97*call, 103*call; serial < lo || serial > hi {
		t.Errorf("one call at a time: mean batch %v, want the sum of 100 calls of mean %v (±3%%)", serial, call)
	}
	if wide := meanTook(t, model(100, 0.5), 100, 400); wide < 2*call {
		t.Errorf("all calls at once: mean batch %v, want its slowest call, over twice the mean call %v", wide, call)
	}
}
