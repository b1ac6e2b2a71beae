package sim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// A rate so small that the gap to the next arrival does not fit in a
// Duration once meant 1 ns gaps and millions of requests (rapid found it).
func TestTrafficTinyRateOffersNothing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rate, cfg.Duration = 1e-270, 10*time.Millisecond
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests.Offered > 1 {
		t.Fatalf("offered %d requests at 1e-270/s in 10 ms", rep.Requests.Offered)
	}
}

// poisonTally counts, from the Submits it sees, the poison inputs each
// tenant sent.
type poisonTally struct {
	prefix string
	total  map[string]int // tenant -> requests
	poison map[string]int // tenant -> poison requests
	inputs map[string]int // poison input -> requests
}

func (p *poisonTally) Deliver(_ time.Duration, _, _ actors.Address, msg actors.Message) {
	m, ok := msg.(actors.Submit)
	if !ok {
		return
	}
	p.total[m.Req.Tenant]++
	if strings.HasPrefix(m.Req.Input, p.prefix) {
		p.poison[m.Req.Tenant]++
		p.inputs[m.Req.Input]++
	}
}

// A poison share sends that share of a poison tenant's requests with one of
// the poison inputs, and none of the other tenants'.
func TestTrafficPoisonShare(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 5 * time.Second
	cfg.Traffic.Tenants = []string{"a", "b", "c"}
	cfg.Traffic.PoisonShare = 0.1
	cfg.Traffic.PoisonPrefix = "P#"
	cfg.Traffic.PoisonInputs = 3
	cfg.Traffic.PoisonTenants = []string{"b"}
	tally := &poisonTally{prefix: "P#", total: map[string]int{}, poison: map[string]int{}, inputs: map[string]int{}}
	cfg.Observers = []Observer{tally}
	if _, err := Run(cfg); err != nil {
		t.Fatal(err)
	}
	if tally.poison["a"] != 0 || tally.poison["c"] != 0 {
		t.Errorf("tenants a and c sent %d and %d poison inputs; only b should", tally.poison["a"], tally.poison["c"])
	}
	// About 1,667 requests of b: 167 poison, σ ≈ 12.
	n, k := tally.total["b"], tally.poison["b"]
	if want := float64(n) * 0.1; math.Abs(float64(k)-want) > 5*math.Sqrt(want) {
		t.Errorf("b sent %d poison inputs in %d requests; want about %.0f", k, n, want)
	}
	if len(tally.inputs) != 3 || tally.inputs["P#0"] == 0 || tally.inputs["P#1"] == 0 || tally.inputs["P#2"] == 0 {
		t.Errorf("poison inputs %v; want P#0, P#1 and P#2", tally.inputs)
	}
}

func TestTrafficPoisonValidate(t *testing.T) {
	base := DefaultTrafficConfig()
	base.Target, base.ReplyTo = BatcherAddr, LedgerAddr
	base.Tenants = []string{"a", "b"}
	for _, tc := range []struct {
		name string
		edit func(*TrafficConfig)
		ok   bool
	}{
		{"none", func(c *TrafficConfig) {}, true},
		{"share", func(c *TrafficConfig) { c.PoisonShare, c.PoisonPrefix = 0.02, "P" }, true},
		{"all", func(c *TrafficConfig) {
			c.PoisonShare, c.PoisonPrefix, c.PoisonInputs, c.PoisonTenants = 1, "P", PoisonInputsLimit, []string{"b"}
		}, true},
		{"no prefix", func(c *TrafficConfig) { c.PoisonShare = 0.02 }, false},
		{"negative share", func(c *TrafficConfig) { c.PoisonShare, c.PoisonPrefix = -0.1, "P" }, false},
		{"share above 1", func(c *TrafficConfig) { c.PoisonShare, c.PoisonPrefix = 1.5, "P" }, false},
		{"NaN share", func(c *TrafficConfig) { c.PoisonShare, c.PoisonPrefix = math.NaN(), "P" }, false},
		{"negative inputs", func(c *TrafficConfig) { c.PoisonShare, c.PoisonPrefix, c.PoisonInputs = 0.02, "P", -1 }, false},
		{"too many inputs", func(c *TrafficConfig) { c.PoisonShare, c.PoisonPrefix, c.PoisonInputs = 0.02, "P", PoisonInputsLimit+1 }, false},
		{"unknown tenant", func(c *TrafficConfig) { c.PoisonShare, c.PoisonPrefix, c.PoisonTenants = 0.02, "P", []string{"x"} }, false},
		{"prefix without share", func(c *TrafficConfig) { c.PoisonPrefix = "P" }, false},
		{"tenants without share", func(c *TrafficConfig) { c.PoisonTenants = []string{"a"} }, false},
		{"long prefix", func(c *TrafficConfig) { c.PoisonShare, c.PoisonPrefix = 0.02, strings.Repeat("P", InputLenLimit) }, false},
	} {
		c := base
		tc.edit(&c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v; want ok %v", tc.name, err, tc.ok)
		}
	}
}
