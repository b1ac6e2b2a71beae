package main

import (
	"bytes"
	"encoding/json"
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
