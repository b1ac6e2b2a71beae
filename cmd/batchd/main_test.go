package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestExitStatus(t *testing.T) {
	for _, c := range []struct {
		args   []string
		status int
		stderr string
	}{
		{nil, exitUsage, "usage: batchd"},
		{[]string{"frob"}, exitUsage, `unknown command "frob"`},
		{[]string{"help"}, exitOK, ""},
		{[]string{"sim", "-h"}, exitOK, ""},
		{[]string{"sim", "--rate", "x"}, exitUsage, "invalid value"},
		{[]string{"sim", "--bogus"}, exitUsage, "not defined: -bogus"},
		{[]string{"sim", "--devices", "0"}, exitUsage, "Devices 0"},
		{[]string{"sim", "--crash-rate", "2"}, exitUsage, "CrashRate"},
		{[]string{"sim", "--arrival", "bursty"}, exitUsage, "--arrival"},
		{[]string{"sim", "stray"}, exitUsage, `unexpected argument "stray"`},
		{[]string{"sim", "--duration", "1s"}, exitOK, ""},
	} {
		var stdout, stderr bytes.Buffer
		got := run(c.args, &stdout, &stderr)
		if got != c.status || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("batchd %q: status %d, stderr %q; want %d and %q", c.args, got, stderr.String(), c.status, c.stderr)
		}
	}
}

func TestSimJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"sim", "--rate", "1000", "--devices", "6", "--batch-max", "100", "--latency", "100ms",
		"--duration", "2s", "--seed", "7", "--json"}
	if got := run(args, &stdout, &stderr); got != exitOK {
		t.Fatalf("status %d: %s", got, stderr.String())
	}
	var rep struct {
		Seed      uint64 `json:"seed"`
		TraceHash string `json:"trace_hash"`
		Requests  struct {
			Offered, Completed, Lost, Duplicated int64
		} `json:"requests"`
		LatencyMs struct{ P95 float64 } `json:"latency_ms"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	if rep.Seed != 7 || len(rep.TraceHash) != 16 || rep.Requests.Offered == 0 ||
		rep.Requests.Completed != rep.Requests.Offered || rep.LatencyMs.P95 >= 200 {
		t.Errorf("report %+v", rep)
	}
}
