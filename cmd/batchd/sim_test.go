package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestSimExperiment: --experiment starts from a named configuration of
// issue 3, explicit flags still apply, and bad names and flags that do not
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
