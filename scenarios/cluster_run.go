package scenarios

import (
	"fmt"
	"io"
	"strings"

	"github.com/batchd/batchd/sim/cluster"
)

// ClusterResult is one run of a cluster scenario: the cluster simulator's
// report and the outcome of every expectation. Its JSON form is what
// `batchd sim-cluster SCENARIO --json` prints.
type ClusterResult struct {
	Scenario    string `json:"scenario"`
	Description string `json:"description"`
	File        string `json:"file"`
	Seed        uint64 `json:"seed"`
	// Passed is true when every check held and the cluster checker found
	// no violation (nothing lost or answered twice among others).
	Passed bool           `json:"passed"`
	Checks []CheckResult  `json:"checks"`
	Report cluster.Report `json:"report"`
}

// Failures are the messages of the failed checks, and one for the
// checker's violations.
func (r *ClusterResult) Failures() []string {
	var out []string
	if rep := r.Report; rep.ViolationCount > 0 || rep.Lost > 0 || rep.Twice > 0 {
		first := ""
		if len(rep.Violations) > 0 {
			first = rep.Violations[0]
		}
		out = append(out, fmt.Sprintf("cluster scenario %q (%s): the checker found %d violations, %d lost, %d answered twice: %q",
			r.Scenario, r.File, rep.ViolationCount, rep.Lost, rep.Twice, first))
	}
	for _, c := range r.Checks {
		if !c.Passed {
			out = append(out, c.Message)
		}
	}
	return out
}

// Run simulates the scenario with the given seed and checks its
// expectations.
func (s *ClusterScenario) Run(seed uint64) (*ClusterResult, error) {
	cfg, err := s.ClusterConfig(seed)
	if err != nil {
		return nil, err
	}
	return s.RunConfig(cfg)
}

// RunConfig runs a configuration derived from the scenario
// (ClusterConfig, then changed by the caller) and checks the scenario's
// expectations against its report.
func (s *ClusterScenario) RunConfig(cfg cluster.Config) (*ClusterResult, error) {
	rep, err := cluster.Run(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster scenario %s: %w", s.Name, err)
	}
	res := &ClusterResult{
		Scenario: s.Name, Description: s.Description, File: s.file, Seed: cfg.Seed,
		Checks: s.Evaluate(&rep), Report: rep,
	}
	res.Passed = len(res.Failures()) == 0
	return res, nil
}

// WriteTable prints the scenario's name and description, the cluster
// report's summary, the nodes detected dead, and one line per
// expectation with its verdict: what `batchd sim-cluster SCENARIO`
// prints.
func (r *ClusterResult) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "cluster scenario %s (%s, seed %d)\n", r.Scenario, r.File, r.Seed)
	if d := strings.TrimSpace(r.Description); d != "" {
		fmt.Fprintln(w, wrap(d, 80))
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, r.Report.Summary())
	if len(r.Report.Detected) > 0 {
		fmt.Fprint(w, "detected dead:")
		for _, n := range sortedKeys(r.Report.Detected) {
			fmt.Fprintf(w, " %s at %v", n, r.Report.Detected[n])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	return writeChecks(w, r.Scenario, r.Passed, r.Checks)
}
