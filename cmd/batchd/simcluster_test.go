package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// batchd sim-cluster: a crash and a restart under load, the same trace for
// the same seed, nothing lost; bad faults are a usage error.
func TestSimCluster(t *testing.T) {
	args := []string{"sim-cluster", "--nodes", "3", "--rate", "1200", "--duration", "15s", "--faults", "crash:n001@3s,restart:n001@8s", "--json"}
	var hashes []uint64
	for range 2 {
		var stdout, stderr bytes.Buffer
		if got := run(args, &stdout, &stderr); got != exitOK {
			t.Fatalf("exit %d: %s", got, stderr.String())
		}
		var rep struct {
			TraceHash              uint64
			Accepted, Completed    int64
			Lost, Twice, WithFront int64
			ViolationCount         int64
		}
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Accepted == 0 || rep.Lost != 0 || rep.Twice != 0 || rep.ViolationCount != 0 || rep.Completed < rep.Accepted*9/10 {
			t.Fatalf("report %+v", rep)
		}
		hashes = append(hashes, rep.TraceHash)
	}
	if hashes[0] != hashes[1] {
		t.Fatalf("the same seed gave traces %x and %x", hashes[0], hashes[1])
	}
	var stdout, stderr bytes.Buffer
	if got := run([]string{"sim-cluster", "--faults", "crash:n001"}, &stdout, &stderr); got != exitUsage || !strings.Contains(stderr.String(), "--faults") {
		t.Fatalf("bad faults: exit %d, %q", got, stderr.String())
	}
}

// batchd sim-cluster SCENARIO: a built-in cluster scenario passes (exit
// 0, its checks in the JSON); flags given override it (per-node batching
// on global-batching's 2 devices fails its expectations: exit 1); a file
// whose expectation fails exits 1 naming the check; a one-node scenario
// or an unknown name is a usage error.
func TestSimClusterScenario(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if got := run([]string{"sim-cluster", "--seed", "1", "global-batching", "--json"}, &stdout, &stderr); got != exitOK {
		t.Fatalf("global-batching: exit %d: %s", got, stderr.String())
	}
	var res struct {
		Scenario string
		Passed   bool
		Checks   []struct {
			Check    string
			Observed *float64
			Passed   bool
		}
		Report struct{ Nodes int }
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Scenario != "global-batching" || !res.Passed || len(res.Checks) < 4 || res.Report.Nodes != 30 {
		t.Fatalf("result %+v", res)
	}

	stdout.Reset()
	stderr.Reset()
	if got := run([]string{"sim-cluster", "global-batching", "--per-node"}, &stdout, &stderr); got != exitFail ||
		!strings.Contains(stderr.String(), `expect "not_completed <= 3"`) || !strings.Contains(stdout.String(), "scenario global-batching FAILED") {
		t.Fatalf("--per-node over global-batching: exit %d\n%s\n%s", got, stdout.String(), stderr.String())
	}

	file := filepath.Join(t.TempDir(), "tight.yaml")
	text := "name: tight\ncluster: {nodes: 2, devices_per_node: 1}\ntraffic: {rate: 100, duration: 3s, drain: 2s}\nexpect:\n  - lost == 0\n  - p99_ms < 50\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if got := run([]string{"sim-cluster", file}, &stdout, &stderr); got != exitFail || !strings.Contains(stderr.String(), "tight.yaml:6): expect \"p99_ms < 50\"") {
		t.Fatalf("a failing expectation: exit %d: %s", got, stderr.String())
	}

	for _, arg := range []string{"reference", "no-such-scenario"} {
		stderr.Reset()
		if got := run([]string{"sim-cluster", arg}, &stdout, &stderr); got != exitUsage || !strings.Contains(stderr.String(), "unknown scenario") {
			t.Fatalf("%s: exit %d: %s", arg, got, stderr.String())
		}
	}
}
