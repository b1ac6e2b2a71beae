package gen

import (
	"fmt"
	"io"

	simgen "github.com/batchd/batchd/sim/gen"
)

// Result is a scenario's runs, one per rate, and its checks.
type Result struct {
	Scenario *Scenario
	Seed     uint64
	Rates    []float64
	Reports  []*simgen.Report
	Checks   []CheckResult
}

// Run runs the scenario at each of its rates with seed.
func (s *Scenario) Run(seed uint64) (*Result, error) {
	res := &Result{Scenario: s, Seed: seed}
	for _, rate := range s.Rates {
		cfg, err := s.Config(seed, rate)
		if err != nil {
			return nil, err
		}
		rep, err := simgen.Run(cfg)
		if err != nil {
			return nil, fmt.Errorf("%s at %v req/s: %w", s.Name, rate, err)
		}
		res.Rates = append(res.Rates, rate)
		res.Reports = append(res.Reports, rep)
		res.Checks = append(res.Checks, s.Evaluate(rate, rep)...)
	}
	return res, nil
}

// Failures are the checks that failed, as lines.
func (r *Result) Failures() []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, fmt.Sprintf("rate %v: %s (observed %.4g)", c.Rate, c.Check, c.Observed))
		}
	}
	return out
}

// WriteText writes the report: per rate, the outcomes, tokens/s, KV use
// over time, preemptions, and TTFT, TPOT and inter-token latency
// p50/p95/p99 per tenant; then the checks.
func (r *Result) WriteText(w io.Writer) error {
	s := r.Scenario
	static := "continuous"
	if s.Static {
		static = "static"
	}
	fmt.Fprintf(w, "scenario %s (%s), seed %d: %d devices, %s batching, TTFT SLO %v, %v of arrivals a rate\n",
		s.Name, s.File(), r.Seed, s.Devices, static, s.SLO.TTFT, s.Duration)
	for i, rep := range r.Reports {
		fmt.Fprintf(w, "\n== %v req/s\n%s", r.Rates[i], rep)
	}
	fmt.Fprintf(w, "\nexpectations:\n")
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s rate %v: %s (observed %.4g)\n", mark, c.Rate, c.Check, c.Observed)
	}
	_, err := fmt.Fprintf(w, "%d of %d expectations hold\n", len(r.Checks)-len(r.Failures()), len(r.Checks))
	return err
}
