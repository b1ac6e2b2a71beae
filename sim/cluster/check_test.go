package cluster

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
	"github.com/batchd/batchd/sim/swim"
)

// TestCheckerOutputs: the checker's records keep model, version and tenant
// as indexes; a reply with the request's own output passes and counts for
// its tenant, one with another model's, version's or input's output is a
// violation.
func TestCheckerOutputs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Nodes = 1
	r := &run{cfg: cfg, names: []string{"n000"}, index: map[string]int{"n000": 0}, up: []bool{true}, life: []int{0},
		w: sim.NewWorld(sim.DefaultWorldConfig(1))}
	c := newChecker(r)
	front := actors.Address{Node: "n000", ID: FrontID}
	waiter := actors.Address{Node: "n000", ID: WaiterID}
	reqs := []actors.Request{
		{ID: 1, Tenant: "a", Model: "m", Version: "v1", Input: "x"},
		{ID: 2, Tenant: "b", Model: "m", Version: "v2", Input: "y"},
		{ID: 3, Tenant: "a", Model: "k", Version: "v1", Input: "z"},
	}
	for _, q := range reqs {
		c.Deliver(0, actors.Address{ID: sourceIDBase}, front, actors.Submit{Req: q})
	}
	own := func(q actors.Request) string { return actors.EmulatedOutput(q.Model, q.Version, q.Input) }
	c.Deliver(time.Millisecond, front, waiter, actors.Reply{ID: 1, Outcome: actors.Completed, Output: own(reqs[0])})
	c.Deliver(time.Millisecond, front, waiter, actors.Reply{ID: 2, Outcome: actors.Completed, Output: own(reqs[1])})
	if c.rep.ViolationCount != 0 {
		t.Fatalf("own outputs: %v", c.rep.Violations)
	}
	// Request 3 (model k) answered with request 1's output (model m).
	c.Deliver(time.Millisecond, front, waiter, actors.Reply{ID: 3, Outcome: actors.Completed, Output: own(reqs[0])})
	if c.rep.ViolationCount != 1 {
		t.Fatalf("another request's output: %d violations, want 1", c.rep.ViolationCount)
	}
	rep := c.report(3, &swim.Result{}, 0)
	if rep.TenantCompleted["a"] != 2 || rep.TenantCompleted["b"] != 1 {
		t.Fatalf("TenantCompleted %v, want a:2 b:1", rep.TenantCompleted)
	}
}

// TestPct: the selected quantiles are those of a sorted copy (nearest
// rank), whatever the order asked for.
func TestPct(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 10, 101, 5000} {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(rng.IntN(1000)) * time.Microsecond
		}
		sorted := slices.Clone(d)
		slices.Sort(sorted)
		qs := []float64{0.99, 0.95, 0.50}
		got := pct(d, qs...)
		for i, q := range qs {
			k := min(max(int(q*float64(n)+0.999999)-1, 0), n-1)
			if want := float64(sorted[k]) / float64(time.Millisecond); got[i] != want {
				t.Fatalf("n %d q %v: %v, want %v", n, q, got[i], want)
			}
		}
	}
}
