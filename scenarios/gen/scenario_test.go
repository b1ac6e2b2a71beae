package gen

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var long = flag.Bool("scenarios.long", false, "also run the generation scenarios marked long")

// TestScenarios runs every built-in generation scenario at its seed and
// fails on a broken expectation (each file's expect: is its test).
func TestScenarios(t *testing.T) {
	names := Builtins()
	if len(names) < 3 {
		t.Fatalf("built-in scenarios %v: want the files of scenarios/gen", names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			s, err := Find(name)
			if err != nil {
				t.Fatal(err)
			}
			if s.Long && !*long {
				t.Skip("long: run with -scenarios.long")
			}
			res, err := s.Run(s.Seed)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Checks) == 0 {
				t.Fatal("no expectation checked")
			}
			if f := res.Failures(); len(f) > 0 {
				var b strings.Builder
				res.WriteText(&b)
				t.Fatalf("failed:\n  %s\n%s", strings.Join(f, "\n  "), b.String())
			}
		})
	}
}

// A check that cannot hold fails, with what was observed: the loader and
// the evaluation do read the report (a check of the reference run's
// tokens/s above a million fails).
func TestExpectationCanFail(t *testing.T) {
	s, err := Parse("x.yaml", []byte("name: x\nduration: 2s\nrates: [8]\nexpect:\n  - tokens_per_sec > 1000000\n  - tenant:a completed > 0.5\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(1)
	if err != nil {
		t.Fatal(err)
	}
	if f := res.Failures(); len(f) != 1 || !strings.Contains(f[0], "tokens_per_sec > 1000000") {
		t.Fatalf("failures %v: want the tokens/s check alone", f)
	}
}

// The loader is strict: an unknown key, a bad expectation, a tenant or a
// rate an expectation names that the scenario does not have, and a
// distribution that cannot be drawn from are errors that name the file.
func TestParseRejects(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"name: x\nrates: [1]\nrate: 2\n", "field rate not found"},
		{"name: x\nrates: [1]\nexpect: [ttft_p42_ms < 1]\n", "unknown metric"},
		{"name: x\nrates: [1]\nexpect: [tenant:c completed > 0]\n", "not one of the scenario's tenants"},
		{"name: x\nrates: [1]\nexpect: [rate:2 completed > 0]\n", "not one of the scenario's rates"},
		{"name: x\nrates: [1]\nexpect: [tenant:a kv_peak > 0]\n", "the group's"},
		{"name: x\nrates: [1]\noutput: {median: 0}\n", "OutLen"},
		{"name: x\nrates: []\n", "at least one rate"},
		{"name: X\nrates: [1]\n", "lowercase"},
	} {
		_, err := Parse("bad.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.yaml") {
			t.Errorf("%q: error %v, want one naming bad.yaml with %q", c.yaml, err, c.want)
		}
	}
}

// The charts are written, PNG and SVG, one per figure.
func TestWriteCharts(t *testing.T) {
	s, err := Parse("x.yaml", []byte("name: x\nduration: 2s\nrates: [4, 8]\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths, err := res.WriteCharts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 6 {
		t.Fatalf("charts %v: want kv_use, ttft_cdf and throughput, PNG and SVG", paths)
	}
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || st.Size() < 1000 || filepath.Dir(p) != dir {
			t.Errorf("%s: %v, %v", p, st, err)
		}
	}
}
