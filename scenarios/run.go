package scenarios

import (
	"fmt"

	"github.com/batchd/batchd/sim"
)

// Result is one run of a scenario: the simulator's report and the
// outcome of every expectation. Its JSON form is what `batchd sim
// SCENARIO --json` prints and what --out writes as report.json.
type Result struct {
	Scenario    string `json:"scenario"`
	Description string `json:"description"`
	File        string `json:"file"`
	Seed        uint64 `json:"seed"`
	// Passed is true when every check held and the run kept every
	// invariant the simulator checks (nothing lost or answered twice).
	Passed bool          `json:"passed"`
	Checks []CheckResult `json:"checks"`
	Report sim.Report    `json:"report"`
}

// Failures are the messages of the failed checks, and one for broken
// invariants.
func (r *Result) Failures() []string {
	var out []string
	if !r.Report.OK() {
		out = append(out, fmt.Sprintf("scenario %q (%s): the simulator found %d invariant violations, %d lost, %d duplicated: %q",
			r.Scenario, r.File, r.Report.Violations.Count, r.Report.Requests.Lost, r.Report.Requests.Duplicated, r.Report.Violations.First))
	}
	for _, c := range r.Checks {
		if !c.Passed {
			out = append(out, c.Message)
		}
	}
	return out
}

// Run simulates the scenario with the given seed and checks its
// expectations. observers, if any, see every delivery of the run (a
// progress bar); they must not change it.
func (s *Scenario) Run(seed uint64, observers ...sim.Observer) (*Result, error) {
	cfg, err := s.SimConfig(seed)
	if err != nil {
		return nil, err
	}
	cfg.Observers = append(cfg.Observers, observers...)
	return s.RunConfig(cfg)
}

// RunConfig runs a configuration derived from the scenario (SimConfig,
// then changed by the caller) and checks the scenario's expectations
// against its report.
func (s *Scenario) RunConfig(cfg sim.Config) (*Result, error) {
	rep, err := sim.Run(cfg)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", s.Name, err)
	}
	res := &Result{
		Scenario: s.Name, Description: s.Description, File: s.file, Seed: cfg.Seed,
		Checks: s.Evaluate(&rep), Report: rep,
	}
	res.Passed = len(res.Failures()) == 0
	return res, nil
}
