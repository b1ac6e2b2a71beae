package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchd/batchd/sim/plan"
)

// TestPlan: the seeds' case prints the formula's 4 and 6 beside the
// simulator's fleet; --json carries the same; --scenario and --config
// plan for their mix and server.
func TestPlan(t *testing.T) {
	short := []string{"--warmup", "1s", "--measure", "4s"}
	var stdout, stderr bytes.Buffer
	args := append([]string{"plan", "--rps", "1000", "--latency", "100ms", "--batch-max", "32", "--slo-p95", "200ms"}, short...)
	if got := run(args, &stdout, &stderr); got != exitOK {
		t.Fatalf("%v: exit %d: %s", args, got, stderr.String())
	}
	for _, want := range []string{"ceil(3.125) = 4", "ceil(4 / 0.7) = 6", "simulator  4 devices hold it", "why they differ"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the plan lacks %q:\n%s", want, stdout.String())
		}
	}

	stdout.Reset()
	if got := run(append(args, "--json"), &stdout, &stderr); got != exitOK {
		t.Fatalf("--json: exit %d: %s", got, stderr.String())
	}
	var res plan.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Formula.Devices != 4 || res.Formula.WithHeadroom != 6 || res.Devices != 4 || !res.Fleet.Holds || len(res.Why.Lines) == 0 {
		t.Errorf("--json: %+v", res)
	}

	for _, extra := range [][]string{
		{"--scenario", "fragmented-keys", "--rps", "300"},
		{"--config", "default", "--rps", "500"},
	} {
		stdout.Reset()
		if got := run(append(append([]string{"plan"}, extra...), append(short, "--json")...), &stdout, &stderr); got != exitOK {
			t.Fatalf("%v: exit %d: %s", extra, got, stderr.String())
		}
		var res plan.Result
		if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if res.Devices < res.Formula.Floor || !res.Fleet.Holds {
			t.Errorf("%v: %+v", extra, res)
		}
		if extra[1] == "fragmented-keys" && res.Fleet.Keys < 30 {
			t.Errorf("fragmented-keys: %d keys at once, want its 40 models' keys", res.Fleet.Keys)
		}
	}
}

// TestPlanUsage: mistakes are usage errors (exit 2), named.
func TestPlanUsage(t *testing.T) {
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"plan", "--rps", "-1"}, "rps -1"},
		{[]string{"plan", "--headroom", "2"}, "headroom 2"},
		{[]string{"plan", "--devices-max", "0"}, "devices bound 0"},
		{[]string{"plan", "--bogus"}, "bogus"},
		{[]string{"plan", "extra"}, `unexpected argument "extra"`},
		{[]string{"plan", "--scenario", "no-such"}, "--scenario"},
		{[]string{"plan", "--config", "/no/such.yaml"}, "--config"},
	} {
		var stdout, stderr bytes.Buffer
		if got := run(c.args, &stdout, &stderr); got != exitUsage || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, got, stderr.String(), exitUsage, c.stderr)
		}
	}
}
