package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// profileConfig runs `batchd profile --config` on the serve configuration
// cfg and returns the latency table it wrote, parsed, its text, and the
// command's exit code and stderr.
func profileConfig(t *testing.T, cfg string, args ...string) (actors.LatencyModel, string, int, string) {
	t.Helper()
	dir := t.TempDir()
	path, out := filepath.Join(dir, "serve.yaml"), filepath.Join(dir, "latency.csv")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"profile", "--config", path, "--out", out, "--warmup", "0"}, args...), &stdout, &stderr)
	data, err := os.ReadFile(out)
	if err != nil {
		return actors.LatencyModel{}, "", code, stderr.String()
	}
	m, err := actors.ParseLatencyTable(data)
	if err != nil {
		t.Fatalf("the table profile wrote does not parse: %v\n%s", err, data)
	}
	return m, string(data), code, stderr.String()
}

// TestProfileConfigEmulated: --config profiles the file's backend as serve
// builds it; the table it writes is one the simulator reads, a row per
// size, each no faster than the emulated device's fixed 5 ms.
func TestProfileConfigEmulated(t *testing.T) {
	m, text, code, stderr := profileConfig(t, "devices:\n  latency: 5ms\nmodels:\n  - name: echo\n", "--sizes", "1,4", "--lengths", "8", "--reps", "3")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if len(m.Table) != 2 || m.Table[0].BatchSize != 1 || m.Table[1].BatchSize != 4 {
		t.Fatalf("table %+v, want sizes 1 and 4", m.Table)
	}
	for _, p := range m.Table {
		if p.Latency < 5*time.Millisecond {
			t.Errorf("batch of %d: %v, faster than the device's 5 ms", p.BatchSize, p.Latency)
		}
	}
	if !strings.Contains(text, "devices.backend emulated, model echo version v1") {
		t.Errorf("the table's header does not name what was measured:\n%s", text)
	}
}

// TestProfileConfigWorker: a worker process (the Python helper) is
// profiled through the worker protocol; a worker that fails an item fails
// the profile, naming the item, rather than timing an error.
func TestProfileConfigWorker(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	model := "import batchd_worker\n" +
		"FAIL = False\n" +
		"def batch(inputs):\n" +
		"    return [ValueError('no') if FAIL else x.upper() for x in inputs]\n" +
		"batchd_worker.serve(batch)\n"
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte(model), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("devices:\n  backend: worker\n  count: 3\n  worker:\n    cmd: [%q, %q]\n    dir: %q\n    env: {PYTHONPATH: %q}\nmodels:\n  - name: upper\n",
		debianPython, filepath.Join(dir, "model.py"), dir, workerPythonDir(t))
	m, text, code, stderr := profileConfig(t, cfg, "--sizes", "1,10,100", "--lengths", "16", "--reps", "3")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if len(m.Table) != 3 || m.Table[2].BatchSize != 100 {
		t.Fatalf("table %+v, want sizes 1, 10, 100", m.Table)
	}
	if !strings.Contains(text, "devices.backend worker, model upper") {
		t.Errorf("header:\n%s", text)
	}
	if n := strings.Count(stderr, "worker ready"); n != 1 {
		t.Errorf("%d workers started for a profile of one device (devices.count 3):\n%s", n, stderr)
	}

	// The same model failing every item.
	failing := strings.Replace(model, "FAIL = False", "FAIL = True", 1)
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte(failing), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, code, stderr := profileConfig(t, cfg, "--sizes", "1", "--lengths", "16", "--reps", "1"); code != exitFail || !strings.Contains(stderr, "item 0") {
		t.Errorf("a worker failing every item: exit %d, stderr %q; want 1 and the item named", code, stderr)
	}
}

// TestProfileConfigUsage: a backend that needs a configuration asks for it, and
// a --backend that contradicts the file is refused before anything starts.
func TestProfileConfigUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--backend", "worker"}, "--config FILE"},
		{[]string{"--backend", "upstream"}, "--config FILE"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"profile"}, c.args...), &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("profile %v: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), exitUsage, c.want)
		}
	}
	_, _, code, stderr := profileConfig(t, "devices:\n  latency: 5ms\nmodels:\n  - name: echo\n", "--backend", "cpu", "--sizes", "1", "--lengths", "8")
	if code != exitUsage || !strings.Contains(stderr, "devices.backend emulated") {
		t.Errorf("--backend cpu against an emulated file: exit %d, stderr %q", code, stderr)
	}
}

// TestProfileConfigUpstream: an upstream OIP server (batchd itself, its
// devices 5 ms each) profiled through the upstream backend: every batch
// is one infer call, no faster than the upstream's device.
func TestProfileConfigUpstream(t *testing.T) {
	var out bytes.Buffer
	base, stop := startServe(t, "devices:\n  latency: 5ms\n  count: 2\npolicy:\n  slo: 5s\n  linger_max: 1ms\n", &out)
	defer stop()
	cfg := fmt.Sprintf("devices:\n  backend: upstream\n  count: 4\n  upstream:\n    url: %s\n    ready_timeout: 5s\nmodels:\n  - name: echo\n", base)
	m, text, code, stderr := profileConfig(t, cfg, "--sizes", "1,8", "--lengths", "16", "--reps", "3")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if len(m.Table) != 2 {
		t.Fatalf("table %+v, want sizes 1 and 8", m.Table)
	}
	for _, p := range m.Table {
		if p.Latency < 5*time.Millisecond {
			t.Errorf("batch of %d: %v, faster than the upstream's 5 ms device", p.BatchSize, p.Latency)
		}
	}
	if !strings.Contains(text, "devices.backend upstream, model echo") {
		t.Errorf("header:\n%s", text)
	}
}

// TestProfileConfigCPU: a serve config of the cpu backend is profiled on
// the model serve would run, bytenet, which it registers itself.
func TestProfileConfigCPU(t *testing.T) {
	m, text, code, stderr := profileConfig(t, "devices:\n  backend: cpu\n", "--sizes", "1,2", "--lengths", "16", "--reps", "2")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if len(m.Table) != 2 || !strings.Contains(text, "devices.backend cpu, model bytenet") {
		t.Errorf("table %+v:\n%s", m.Table, text)
	}
}
