package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestStatus: `batchd status` shows a node of a cluster as a table (this
// node marked, the owner of its model), and says a single node is none.
func TestStatus(t *testing.T) {
	var out bytes.Buffer
	base, stop := startServe(t, "cluster:\n  node: alpha\n  bind: 127.0.0.1:0\njobs:\n  dir: "+t.TempDir()+"\n", &out)
	defer stop()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"status", "--url", base}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"alpha *", "alive", "model echo: owner alpha"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, stdout.String())
		}
	}

	single, stopSingle := startServe(t, "devices:\n  count: 1\njobs:\n  dir: "+t.TempDir()+"\n", &out)
	defer stopSingle()
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"status", "--url", single}, &stdout, &stderr); code != exitFail || !strings.Contains(stderr.String(), "not a cluster") {
		t.Errorf("a single node: exit %d, stderr %q; want 1 and \"not a cluster\"", code, stderr.String())
	}
}
