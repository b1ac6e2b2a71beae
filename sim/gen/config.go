package gen

import (
	"fmt"
	"time"

	"github.com/batchd/batchd/actors/gen"
)

// Config is one simulated generation run.
type Config struct {
	// Seed is the master seed: arrivals, prompts, cancels and faults are
	// drawn from streams named after it.
	Seed uint64
	// Gen configures the scheduler (and through Gen.Devices the devices).
	Gen gen.Config
	// Cost is the devices' true step cost; zero means Gen.Cost (the
	// scheduler predicts exactly).
	Cost gen.Cost
	// Tenants offer the traffic.
	Tenants []Tenant
	// PromptLen is the prompt length distribution.
	PromptLen gen.Lognormal
	// OutLen is the emulated generator's output length distribution: a
	// stream ends where the model ends it, or at MaxTokens.
	OutLen    gen.Lognormal
	MaxTokens int
	// Duration is how long arrivals go on; the run then drains.
	Duration time.Duration
	// CancelFrac of the requests are cancelled by their client at a
	// uniform time within CancelWithin of arrival.
	CancelFrac   float64
	CancelWithin time.Duration
	// CrashP and HangP are the chances that a step crashes its device or
	// hangs it, while faults are on (before FaultsUntil).
	CrashP, HangP float64
	FaultsUntil   time.Duration
	// RequestsMax bounds the arrivals drawn (a run's memory).
	RequestsMax int
}

// Tenant is one tenant's traffic.
type Tenant struct {
	Name     string
	Weight   int
	Priority int8
	// Rate is the tenant's Poisson arrival rate, requests per second.
	Rate float64
}

// DefaultConfig is the reference generation workload: two devices of
// gen.DefaultConfig, two equal tenants, prompts of median 256 tokens and
// outputs of median 64 (both lognormal with sigma 1, so a tenth of the
// outputs pass 230 tokens), max_tokens 1024, a minute of arrivals at rate
// req/s in all, no faults.
func DefaultConfig(seed uint64, rate float64) Config {
	return Config{
		Seed: seed,
		Gen:  gen.DefaultConfig("llm", "v1", 2),
		Tenants: []Tenant{
			{Name: "a", Weight: 1, Rate: rate / 2},
			{Name: "b", Weight: 1, Rate: rate / 2},
		},
		PromptLen:   gen.Lognormal{Median: 256, Sigma: 1, Max: 4096},
		OutLen:      gen.Lognormal{Median: 64, Sigma: 1, Max: 1024},
		MaxTokens:   1024,
		Duration:    time.Minute,
		RequestsMax: 1 << 20,
	}
}

// Validate reports the first field that makes the run impossible.
func (c Config) Validate() error {
	if err := c.Gen.Validate(); err != nil {
		return err
	}
	if err := c.PromptLen.Validate(); err != nil {
		return fmt.Errorf("sim gen: PromptLen: %w", err)
	}
	if err := c.OutLen.Validate(); err != nil {
		return fmt.Errorf("sim gen: OutLen: %w", err)
	}
	switch {
	case len(c.Tenants) == 0:
		return fmt.Errorf("sim gen: no tenants")
	case c.MaxTokens < 1 || c.Duration <= 0 || c.RequestsMax < 1:
		return fmt.Errorf("sim gen: MaxTokens %d, Duration %v, RequestsMax %d: must be positive", c.MaxTokens, c.Duration, c.RequestsMax)
	case c.CancelFrac < 0 || c.CancelFrac > 1 || c.CrashP < 0 || c.HangP < 0 || c.CrashP+c.HangP > 1:
		return fmt.Errorf("sim gen: CancelFrac %v, CrashP %v, HangP %v: want fractions", c.CancelFrac, c.CrashP, c.HangP)
	}
	for _, t := range c.Tenants {
		if t.Name == "" || !(t.Rate >= 0) {
			return fmt.Errorf("sim gen: tenant %+v: want a name and a rate >= 0", t)
		}
	}
	return nil
}
