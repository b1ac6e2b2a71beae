package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/config"
)

func TestLoadUsage(t *testing.T) {
	for _, c := range []struct {
		args           []string
		status         int
		stdout, stderr string
	}{
		{[]string{"load", "-h"}, exitOK, "coordinated omission", ""},
		{[]string{"load", "--url", "http://10.0.0.1:8080"}, exitUsage, "", "not a loopback address"},
		{[]string{"load", "--arrival", "bursty"}, exitUsage, "", "--arrival"},
		{[]string{"load", "--duration", "11m"}, exitUsage, "", "Duration 11m0s"},
		{[]string{"load", "--in-flight-max", "0"}, exitUsage, "", "InFlightMax 0"},
		{[]string{"load", "--connections", "20000"}, exitUsage, "", "Connections 20000"},
		{[]string{"load", "stray"}, exitUsage, "", `unexpected argument "stray"`},
	} {
		var stdout, stderr bytes.Buffer
		got := run(c.args, &stdout, &stderr)
		if got != c.status || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("batchd %q: status %d\nstdout %q\nstderr %q\nwant %d, %q, %q", c.args, got, stdout.String(), stderr.String(), c.status, c.stdout, c.stderr)
		}
	}
	var stdout, stderr bytes.Buffer
	run([]string{"load", "-h"}, &stdout, &stderr)
	if strings.Contains(stdout.String(), "baseline") {
		t.Errorf("hidden flag shown:\n%s", stdout.String())
	}
}

// TestLoadAgainstServe: `batchd load` against `batchd serve` (the embedded
// default): every request gets an HTTP answer, and every 200 its own
// output. (Latency targets are benchmarks, not unit tests: a shared CI
// machine may well expire some requests.)
func TestLoadAgainstServe(t *testing.T) {
	base, _ := startServe(t, string(config.Embedded)+"\n", &bytes.Buffer{})
	var stdout, stderr bytes.Buffer
	args := []string{"load", "--url", base, "--rate", "300", "--duration", "1s", "--json"}
	if got := run(args, &stdout, &stderr); got != exitOK {
		t.Fatalf("status %d: %s", got, stderr.String())
	}
	var rep struct {
		Requests  struct{ Sent, OK, WrongOutput int64 } `json:"requests"`
		Status    map[string]int64                      `json:"status"`
		LatencyMs map[string]struct{ P50, P99 float64 } `json:"latency_ms"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	var answered int64
	for _, n := range rep.Status {
		answered += n
	}
	if rep.Requests.Sent < 200 || rep.Requests.OK == 0 || answered != rep.Requests.Sent || rep.Requests.WrongOutput != 0 ||
		rep.LatencyMs["ok"].P50 < 100 {
		t.Errorf("report %+v", rep)
	}
}
