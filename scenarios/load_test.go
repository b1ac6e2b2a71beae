package scenarios

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
)

// minimal is a valid scenario that the error cases below break one line
// at a time; its line numbers are the ones the cases expect.
const minimal = `name: tiny
nodes:
  - {name: a, devices: 2, models: [m]}
  - {name: b, devices: 1}
models:
  - name: m
    versions: [{name: v1, weight: 9}, {name: v2, weight: 1}]
tenants:
  - {name: x, weight: 2, priority: high}
  - {name: y, rate: 10, burst: 5}
traffic:
  - duration: 2s
    rate: 300
    tenants: {x: 2, y: 1}
  - duration: 1s
    rate: 50
    arrival: burst
    burst_size: 5
    tenants: {x: 1}
faults:
  schedule:
    - {at: 1s, kind: crash, node: b, device: 0}
expect:
  - p95_ms < 200
  - tenant:x share > 0.5
`

func parse(t *testing.T, text string) (*Scenario, error) {
	t.Helper()
	return Parse("s.yaml", []byte(text), func(string) ([]byte, error) { return nil, os.ErrNotExist })
}

// TestParseMapsOntoSimConfig: every part of a valid scenario lands where
// the simulator reads it.
func TestParseMapsOntoSimConfig(t *testing.T) {
	s, err := parse(t, minimal)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := s.SimConfig(9)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Seed != 9 || cfg.Devices != 3 || cfg.Duration != 3*time.Second {
		t.Errorf("seed %d, devices %d, duration %v; want 9, 3, 3s (the phases run one after another)", cfg.Seed, cfg.Devices, cfg.Duration)
	}
	if len(cfg.DeviceModels) != 3 || cfg.DeviceModels[1][0] != "m" || len(cfg.DeviceModels[2]) != 0 {
		t.Errorf("device models %v: want node a's two devices warm for m, node b's for any", cfg.DeviceModels)
	}
	if len(cfg.Sources) != 3 {
		t.Fatalf("%d sources, want one per (phase, tenant): 3", len(cfg.Sources))
	}
	x, y, burst := cfg.Sources[0], cfg.Sources[1], cfg.Sources[2]
	if x.Rate != 200 || y.Rate != 100 || x.Tenants[0] != "x" || y.Tenants[0] != "y" {
		t.Errorf("phase 0 split: x %v %v, y %v %v; want 200 and 100 by the shares 2:1", x.Tenants, x.Rate, y.Tenants, y.Rate)
	}
	if x.Priority != actors.PriorityHigh || y.Priority != actors.PriorityNormal {
		t.Errorf("priorities %d, %d: want the tenants' (high, normal)", x.Priority, y.Priority)
	}
	if burst.Start != 2*time.Second || burst.Stop != 3*time.Second || burst.Arrival != sim.Burst || burst.BurstSize != 5 {
		t.Errorf("phase 1: %v to %v, arrival %v, burst %d", burst.Start, burst.Stop, burst.Arrival, burst.BurstSize)
	}
	if len(x.Mix) != 1 || x.Mix[0].Model != "m" || x.Mix[0].Version != "" {
		t.Errorf("mix %+v: want the registry's model, version left to routing", x.Mix)
	}
	b := cfg.Batcher
	if len(b.Models) != 1 || b.Models[0].Versions[1].Weight != 1 || len(b.Tenants) != 2 || b.Tenants[1].Rate != 10 || b.Tenants[0].Weight != 2 {
		t.Errorf("batcher registry %+v, tenants %+v", b.Models, b.Tenants)
	}
	if len(cfg.FaultSchedule) != 1 || cfg.FaultSchedule[0].Device != 2 || cfg.FaultSchedule[0].Kind != sim.FaultCrash {
		t.Errorf("schedule %+v: node b's device 0 is device 2", cfg.FaultSchedule)
	}
	if got := cfg.Windows; len(got) != 3 || got[1] != 2*time.Second {
		t.Errorf("windows %v: want the phases' bounds 0, 2s, 3s", got)
	}
	if cfg.Latency.Base != 100*time.Millisecond {
		t.Errorf("latency %+v: want the default fixed 100ms", cfg.Latency)
	}
}

// TestParsePolicyLearnOverrun: the policy's learn_overrun and overrun_max
// reach the batcher; both default to the batcher's own defaults.
func TestParsePolicyLearnOverrun(t *testing.T) {
	for _, c := range []struct {
		text string
		want bool
		max  time.Duration
	}{
		{minimal, false, actors.DefaultBatcherConfig().OverrunMax},
		{strings.Replace(minimal, "name: tiny", "name: tiny\npolicy: {learn_overrun: true, overrun_max: 20ms}", 1), true, 20 * time.Millisecond},
	} {
		s, err := parse(t, c.text)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := s.SimConfig(1)
		if err != nil {
			t.Fatal(err)
		}
		if b := cfg.Batcher; b.LearnOverrun != c.want || b.OverrunMax != c.max {
			t.Errorf("learn_overrun %v, overrun_max %v; want %v, %v", b.LearnOverrun, b.OverrunMax, c.want, c.max)
		}
	}
}

// TestParseErrors: each mistake is reported with the file, its line and
// the key's path, and nothing else is wrong with the file.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, old, new string
		want           string
	}{
		{"unknown top key", "name: tiny", "name: tiny\nnme: x", `s.yaml:2: nme: unknown key (did you mean "name"?)`},
		{"unknown nested key", "    rate: 300", "    rat: 300", `s.yaml:13: traffic[0].rat: unknown key (did you mean "rate"?)`},
		{"unknown key in a flow mapping", "{name: b, devices: 1}", "{name: b, devics: 1}", `s.yaml:4: nodes[1].devics: unknown key (did you mean "devices"?)`},
		{"duration without unit", "  - duration: 2s", "  - duration: fast", "s.yaml:12: traffic[0].duration: cannot unmarshal !!str `fast` into a duration"},
		{"negative rate", "    rate: 300", "    rate: -3", "s.yaml:13: traffic[0].rate: -3: want a finite number >= 0"},
		{"unlisted tenant", "tenants: {x: 2, y: 1}", "tenants: {x: 2, z: 1}", `s.yaml:14: traffic[0].tenants.z: tenant "z" is not listed`},
		{"unknown model", "nodes:\n  - {name: a, devices: 2, models: [m]}", "nodes:\n  - {name: a, devices: 2, models: [q]}", `s.yaml:3: nodes[0].models[0]: "q" is not in the registry`},
		{"bad priority", "priority: high", "priority: urgent", `s.yaml:9: tenants[0].priority: "urgent": want low, normal or high`},
		{"device out of range", "node: b, device: 0", "node: b, device: 1", `s.yaml:22: faults.schedule[0].device: 1: node "b" has devices 0 to 0`},
		{"fault after the run", "{at: 1s, kind: crash", "{at: 3s, kind: crash", "s.yaml:22: faults.schedule[0].at: 3s: want 0s to"},
		{"unknown metric", "  - p95_ms < 200", "  - p96_ms < 200", `s.yaml:24: expect[0]: "p96_ms < 200": unknown metric "p96_ms"`},
		{"unknown tenant scope", "  - tenant:x share > 0.5", "  - tenant:q share > 0.5", `s.yaml:25: expect[1]: "tenant:q share > 0.5": scope "tenant:q": no traffic of tenant "q"`},
		{"not a window", "  - tenant:x share > 0.5", "  - window:0s-3s tenant:x p95_ms < 9", `scope "window:0s-3s": not a window`},
		{"bad operator", "  - p95_ms < 200", "  - p95_ms ~ 200", `s.yaml:24: expect[0]: "p95_ms ~ 200": operator "~"`},
		{"burst size on poisson", "    rate: 300", "    rate: 300\n    burst_size: 4", "s.yaml:14: traffic[0].burst_size: only a burst phase has a burst size"},
		{"phase past duration", "name: tiny", "name: tiny\nduration: 2500ms", "traffic[1].duration: the phase ends at 3s, after the scenario's duration 2.5s"},
		{"two latency models", "name: tiny", "name: tiny\ndevices: {latency: {fixed: 1s, base: 2s}}", "s.yaml:2: devices.latency: give one of fixed, base/per_item/table/fanout and profile"},
		{"negative overrun cap", "name: tiny", "name: tiny\npolicy: {overrun_max: -1ms}", "s.yaml:2: policy.overrun_max: -1ms"},
		{"missing profile", "name: tiny", "name: tiny\ndevices:\n  latency: {profile: p.csv}", `s.yaml:3: devices.latency.profile: "p.csv"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := strings.Replace(minimal, c.old, c.new, 1)
			if text == minimal {
				t.Fatalf("the case does not change the file: %q not found", c.old)
			}
			_, err := parse(t, text)
			if err == nil {
				t.Fatalf("accepted; want %q", c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
			if n := strings.Count(err.Error(), "\n"); n > 0 {
				t.Errorf("%d mistakes reported for one: %v", n+1, err)
			}
		})
	}
}

// TestLoadProfileRelative: a file's latency profile is read next to it,
// and becomes the latency table.
func TestLoadProfileRelative(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p", "lat.csv"), []byte("1,10ms\n100,50ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(minimal, "name: tiny", "name: tiny\ndevices: {latency: {profile: p/lat.csv}}", 1)
	file := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := s.SimConfig(1)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Latency.Predict(100, 1); got != 50*time.Millisecond {
		t.Errorf("latency of a full batch %v, want the profile's 50ms", got)
	}
	if _, err := Find(file); err != nil {
		t.Errorf("Find by path: %v", err)
	}
	if _, err := Find("no-such-scenario"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Find(no-such-scenario): %v, want ErrUnknown", err)
	}
}

// TestBuiltinsNamed: every built-in file names itself, has a
// description, and a scenario asks only for what it may.
func TestBuiltinsNamed(t *testing.T) {
	for _, name := range Builtins() {
		s, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		if s.Name != name || strings.TrimSpace(s.Description) == "" {
			t.Errorf("%s: name %q, description %q", name, s.Name, s.Description)
		}
	}
	if _, err := Builtin("../load"); !errors.Is(err, ErrUnknown) {
		t.Errorf("a path as a built-in name: %v", err)
	}
}

// TestEvaluate: checks pass and fail on the values they read, a failure
// names scenario, file, line, check and the value, and a scope without
// data fails rather than passing on a zero.
func TestEvaluate(t *testing.T) {
	text := strings.Replace(minimal, "  - tenant:x share > 0.5", "  - tenant:x share > 0.5\n  - tenant:y p99_ms < 10\n  - rejected_rate_limited == 4\n  - autoscale_max_devices >= 3", 1)
	s, err := parse(t, text)
	if err != nil {
		t.Fatal(err)
	}
	rep := sim.Report{
		Requests:   sim.RequestCounts{Offered: 100, Accepted: 96, Completed: 96, Rejected: 4},
		LatencyMs:  sim.Percentiles{P95: 150},
		Rejections: map[string]int64{"rate_limited": 4},
		Tenants: map[string]sim.NameStats{
			"x": {Offered: 40, Completed: 40},
			"y": {Offered: 60, Completed: 0, Rejected: 4},
		},
		Autoscale: []sim.AutoscaleSample{{T: 1, DevicesNeeded: 2}, {T: 2, DevicesNeeded: 3}},
	}
	res := s.Evaluate(&rep)
	want := []bool{true, false, false, true, true}
	if len(res) != len(want) {
		t.Fatalf("%d results for %d checks", len(res), len(want))
	}
	for i, r := range res {
		if r.Passed != want[i] {
			t.Errorf("%q: passed %v, want %v (%s)", r.Check, r.Passed, want[i], r.Message)
		}
	}
	if m := res[1].Message; !strings.Contains(m, `scenario "tiny" (s.yaml:25)`) || !strings.Contains(m, "tenant:x share > 0.5") || !strings.Contains(m, "observed 0.4") {
		t.Errorf("failure message %q: want scenario, file:line, check and observed value", m)
	}
	if res[2].Observed != nil || !strings.Contains(res[2].Message, "no data") {
		t.Errorf("a p99 of a tenant with nothing completed: %+v", res[2])
	}
	out, err := json.Marshal(res)
	if err != nil || !strings.Contains(string(out), `"observed":null`) {
		t.Errorf("JSON of the results: %s, %v", out, err)
	}
}

// TestRunDeterministic: the same scenario and seed give the same trace
// and the same result; another seed gives another trace.
func TestRunDeterministic(t *testing.T) {
	s, err := parse(t, minimal)
	if err != nil {
		t.Fatal(err)
	}
	run := func(seed uint64) []byte {
		res, err := s.Run(seed)
		if err != nil {
			t.Fatal(err)
		}
		res.Report.WallSeconds = 0
		out, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b, c := run(4), run(4), run(5)
	if string(a) != string(b) {
		t.Error("two runs with seed 4 differ")
	}
	if string(a) == string(c) {
		t.Error("seeds 4 and 5 gave the same result")
	}
}
