package scenarios

import (
	"testing"
)

// TestClusterScenarios runs every built-in cluster scenario with its own
// seed and fails on any broken expectation or checker violation.
func TestClusterScenarios(t *testing.T) {
	names := ClusterBuiltins()
	if len(names) == 0 {
		t.Fatal("no built-in cluster scenarios")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			s, err := ClusterBuiltin(name)
			if err != nil {
				t.Fatal(err)
			}
			if s.Long && !*long {
				t.Skip("long: run with -scenarios.long")
			}
			if len(s.checks) == 0 {
				t.Fatal("a scenario without expectations checks nothing")
			}
			res, err := s.Run(s.Seed)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range res.Failures() {
				t.Error(f)
			}
			if testing.Verbose() {
				rep := res.Report
				t.Logf("wall %.2f s; detected %v\n%s", rep.WallSeconds, rep.Detected, rep.Summary())
				for _, w := range rep.Windows {
					if w.Late > 0 {
						t.Logf("second %v: %d arrived, %d late, p99 %.1f ms", w.StartS, w.Arrived, w.Late, w.LatencyP99Ms)
					}
				}
				for _, c := range res.Checks {
					if c.Observed != nil {
						t.Logf("%-60s observed %g", c.Check, *c.Observed)
					}
				}
			}
		})
	}
}
