package scenarios

import (
	"flag"
	"testing"
)

var long = flag.Bool("scenarios.long", false, "also run the scenarios marked long: true (reference-1h, cluster/fleet-100)")

// TestScenarios runs every built-in scenario with its own seed and fails on
// any broken expectation or invariant, naming the scenario, the check and
// the value observed.
func TestScenarios(t *testing.T) {
	names := Builtins()
	if len(names) == 0 {
		t.Fatal("no built-in scenarios")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			s, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			if s.Long && !*long {
				t.Skip("long: run with -scenarios.long")
			}
			if len(s.Checks()) == 0 {
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
				for _, c := range res.Checks {
					if c.Observed != nil {
						t.Logf("%-45s observed %g", c.Check, *c.Observed)
					}
				}
			}
		})
	}
}
