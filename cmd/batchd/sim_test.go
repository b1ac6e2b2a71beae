package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/batchd/batchd/scenarios"
	"github.com/batchd/batchd/sim"
)

// TestSimExperiment: --experiment starts from a named configuration of
// the batching-policy study, explicit flags still apply, and bad names and flags that do not
// fit it are usage errors.
func TestSimExperiment(t *testing.T) {
	for _, c := range []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"sim", "--experiment", "bogus"}, exitUsage, "want one of"},
		{[]string{"sim", "--policy", "random"}, exitUsage, "--policy"},
		{[]string{"sim", "--experiment=merge-on", "--rate", "5"}, exitUsage, "sources with rates of their own"},
	} {
		var stdout, stderr bytes.Buffer
		if got := run(c.args, &stdout, &stderr); got != c.status || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("batchd %q: status %d, stderr %q; want %d and %q", c.args, got, stderr.String(), c.status, c.stderr)
		}
	}
	var stdout, stderr bytes.Buffer
	args := []string{"sim", "--experiment", "merge-on", "--duration", "2s", "--policy", "slack", "--json"}
	if got := run(args, &stdout, &stderr); got != exitOK {
		t.Fatalf("status %d: %s", got, stderr.String())
	}
	var rep struct {
		Workload struct {
			RateRPS   float64 `json:"rate_rps"`
			Devices   int     `json:"devices"`
			DurationS float64 `json:"duration_s"`
		} `json:"workload"`
		Tenants map[string]any `json:"tenants"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if rep.Workload.RateRPS != 600 || rep.Workload.Devices != 4 || rep.Workload.DurationS != 2 || rep.Tenants["t"] == nil {
		t.Errorf("merge-on for 2 s: workload %+v, tenants %v", rep.Workload, rep.Tenants)
	}
}

// scenarioResult is the part of `batchd sim SCENARIO --json` the tests read.
type scenarioResult struct {
	Scenario string `json:"scenario"`
	Seed     uint64 `json:"seed"`
	Passed   bool   `json:"passed"`
	Checks   []struct {
		Check    string   `json:"check"`
		Observed *float64 `json:"observed"`
		Passed   bool     `json:"passed"`
	} `json:"checks"`
	Report struct {
		TraceHash string `json:"trace_hash"`
		Workload  struct {
			Devices int `json:"devices"`
		} `json:"workload"`
	} `json:"report"`
}

func runJSON(t *testing.T, args ...string) (scenarioResult, int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	status := run(append([]string{"sim"}, args...), &stdout, &stderr)
	var res scenarioResult
	if stdout.Len() > 0 {
		if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
			t.Fatalf("batchd sim %q: not JSON (%v): %s", args, err, stdout.String())
		}
	}
	return res, status, stderr.String()
}

// TestSimScenario: a built-in scenario by name runs with its own seed and
// passes; the seed flag may come before or after the name and changes the
// trace; a flag changes the scenario's fleet ("what if").
func TestSimScenario(t *testing.T) {
	res, status, stderr := runJSON(t, "reference", "--json")
	if status != exitOK || !res.Passed || res.Scenario != "reference" || res.Seed != 1 || len(res.Checks) == 0 {
		t.Fatalf("reference: status %d, result %+v, stderr %s", status, res, stderr)
	}
	before, _, _ := runJSON(t, "--seed", "2", "--json", "reference")
	after, _, _ := runJSON(t, "reference", "--seed", "2", "--json")
	if before.Seed != 2 || before.Report.TraceHash != after.Report.TraceHash || before.Report.TraceHash == res.Report.TraceHash {
		t.Errorf("seed 2 before the name: %s, after: %s, seed 1: %s", before.Report.TraceHash, after.Report.TraceHash, res.Report.TraceHash)
	}
	small, status, _ := runJSON(t, "reference", "--devices", "2", "--json")
	if small.Report.Workload.Devices != 2 {
		t.Errorf("--devices 2 on reference: %d devices", small.Report.Workload.Devices)
	}
	if status != exitFail || small.Passed {
		t.Errorf("reference on 2 devices: status %d, passed %v; its latency bound cannot hold there", status, small.Passed)
	}
}

// TestSimScenarioFails: a scenario file with an expectation that cannot
// hold exits 1 and names the check and the value; --out writes the same
// result as report.json.
func TestSimScenarioFails(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "s.yaml")
	text := "name: s\nnodes: [{name: a, devices: 2}]\ntraffic: [{duration: 2s, rate: 100}]\nexpect:\n  - lost == 0\n  - p50_ms < 50\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	status := run([]string{"sim", file, "--json", "--out", out}, &stdout, &stderr)
	if status != exitFail || !strings.Contains(stderr.String(), `expect "p50_ms < 50": observed `) || !strings.Contains(stderr.String(), "s.yaml:6") {
		t.Fatalf("status %d, stderr %q: want exit 1 naming the check, its line and the value", status, stderr.String())
	}
	data, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, stdout.Bytes()) {
		t.Error("report.json differs from the JSON printed")
	}
	var res scenarioResult
	if err := json.Unmarshal(data, &res); err != nil || res.Passed || !res.Checks[0].Passed || res.Checks[1].Passed {
		t.Fatalf("report.json: %+v, %v", res, err)
	}
	if obs := res.Checks[1].Observed; obs == nil || *obs < 50 {
		t.Errorf("p50 observed %v: a failed check must carry the value that failed it", obs)
	}
}

// TestSimScenarioUsage: mistakes on the command line are usage errors
// that say what is wrong.
func TestSimScenarioUsage(t *testing.T) {
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"sim", "no-such"}, "built-in: canary-95-5"},
		{[]string{"sim", "reference", "--experiment", "merge-on"}, "give one"},
		{[]string{"sim", "reference", "--rate", "5"}, "sources with rates of their own"},
		{[]string{"sim", "reference", "extra"}, `unexpected argument "extra"`},
		{[]string{"sim", "/nonexistent/s.yaml"}, "no such file"},
	} {
		var stdout, stderr bytes.Buffer
		if got := run(c.args, &stdout, &stderr); got != exitUsage || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("batchd %q: status %d, stderr %q; want %d and %q", c.args, got, stderr.String(), exitUsage, c.stderr)
		}
	}
}

// TestSimProgress: the progress bar is off when stderr is not a terminal
// (a pipe, a buffer) or the output is JSON; on a run it follows virtual
// time to the end of the safety phase and leaves the run unchanged (same
// trace hash).
func TestSimProgress(t *testing.T) {
	sc, err := scenarios.Builtin("reference")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sc.SimConfig(sc.Seed)
	if err != nil {
		t.Fatal(err)
	}
	long := cfg
	long.Duration = time.Hour
	if p := newProgress(&bytes.Buffer{}, long, false); p != nil {
		t.Error("a bar on a buffer")
	}
	if p := newProgress(os.Stderr, long, true); p != nil {
		t.Error("a bar with --json")
	}
	plain, err := sim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &progress{bar: progressbar.NewOptions64(int64(cfg.Duration/time.Second), progressbar.OptionSetWriter(io.Discard)), total: cfg.Duration}
	withBar := cfg
	withBar.Observers = []sim.Observer{p}
	rep, err := sim.Run(withBar)
	if err != nil {
		t.Fatal(err)
	}
	if rep.TraceHash != plain.TraceHash {
		t.Errorf("trace hash %s with the bar, %s without", rep.TraceHash, plain.TraceHash)
	}
	// It looked at the clock every progressEvery deliveries: it moved,
	// and never past the safety phase though the drain runs on.
	total := int64(cfg.Duration / time.Second)
	if got := p.bar.State().CurrentNum; got < 1 || got > total {
		t.Errorf("bar at %d of %d simulated seconds after the run", got, total)
	}
	p.close()
	if got := p.bar.State().CurrentNum; got != total {
		t.Errorf("bar at %d after close, want the full %d", got, total)
	}
}

// serveYAML is a serve configuration with every part the simulator takes
// (engine/fidelity's, which TestSimServerAgrees builds both sides from).
var serveYAML = filepath.Join("..", "..", "engine", "fidelity", "testdata", "serve.yaml")

// TestSimConfigRuns: `batchd sim --config FILE` and `--config default`
// run the file's server and report; with a scenario, the scenario's
// traffic and expectations run against it; mistakes are usage errors.
func TestSimConfigRuns(t *testing.T) {
	file := serveYAML
	type report struct {
		Workload struct {
			Devices  int `json:"devices"`
			BatchMax int `json:"batch_max"`
		} `json:"workload"`
		Requests struct {
			Completed int64 `json:"completed"`
		} `json:"requests"`
		Models  map[string]any `json:"models"`
		Tenants map[string]any `json:"tenants"`
	}
	for _, c := range []struct {
		config, model string
		devices       int
		batchMax      int
	}{
		{file, "resnet", 3, 32},
		{"default", "echo", 4, 100},
	} {
		var stdout, stderr bytes.Buffer
		args := []string{"sim", "--config", c.config, "--duration", "2s", "--rate", "300", "--json"}
		if got := run(args, &stdout, &stderr); got != exitOK {
			t.Fatalf("batchd %q: status %d: %s", args, got, stderr.String())
		}
		var rep report
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("not JSON: %v", err)
		}
		if rep.Workload.Devices != c.devices || rep.Workload.BatchMax != c.batchMax || rep.Models[c.model] == nil || rep.Requests.Completed == 0 {
			t.Errorf("--config %s: workload %+v, models %v, completed %d; want %d devices, batch max %d, model %s",
				c.config, rep.Workload, rep.Models, rep.Requests.Completed, c.devices, c.batchMax, c.model)
		}
	}
	res, status, stderr := runJSON(t, "--config", "default", "fair-share", "--json")
	if status != exitOK && status != exitFail {
		t.Fatalf("--config default fair-share: status %d: %s", status, stderr)
	}
	if res.Scenario != "fair-share" || res.Report.Workload.Devices != 4 {
		t.Errorf("--config default fair-share: scenario %q on %d devices; want the scenario on the file's 4", res.Scenario, res.Report.Workload.Devices)
	}

	cpu := filepath.Join(t.TempDir(), "cpu.yaml")
	if err := os.WriteFile(cpu, []byte("devices: {backend: cpu}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"sim", "--config", filepath.Join(t.TempDir(), "missing.yaml")}, "no such file"},
		{[]string{"sim", "--config", cpu}, "emulated devices only"},
		{[]string{"sim", "--config", file, "canary-95-5"}, `model "m"`},
		{[]string{"sim", "--config", "default", "--experiment", "merge-on"}, "give one"},
	} {
		var stdout, stderr bytes.Buffer
		if got := run(c.args, &stdout, &stderr); got != exitUsage || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("batchd %q: status %d, stderr %q; want %d and %q", c.args, got, stderr.String(), exitUsage, c.stderr)
		}
	}
}
