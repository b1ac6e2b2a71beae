package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rssEnv, set to 1, runs TestJobsSubmitRSS: a measurement, not a check
// (memory figures depend on the machine and the Go runtime), so it is off
// by default. Run it with
//
//	BATCHD_MEASURE_RSS=1 go test -count=1 -run '^TestJobsSubmitRSS$' -v ./cmd/batchd/
//
// and BATCHD_RSS_STREAMS_MAX=8 to set jobs.streams_max (eight at once all
// accepted; the default, 4, answers four of them 503).
const rssEnv = "BATCHD_MEASURE_RSS"

// procMemKB reads a "Name:   123 kB" line of /proc/pid/status.
func procMemKB(t *testing.T, pid int, name string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}

// TestJobsSubmitRSS reports the server's resident memory before and after
// one 15 MB async batch, then after eight at once, and after a pause.
func TestJobsSubmitRSS(t *testing.T) {
	if os.Getenv(rssEnv) != "1" {
		t.Skip("a measurement: set " + rssEnv + "=1")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "batchd.yaml")
	// Slow devices and a small window: the measurement is of the
	// submissions, not of the items running.
	yaml := fmt.Sprintf(`http:
  addr: 127.0.0.1:0
devices:
  count: 1
  latency: 1s
models:
  - name: echo
    versions: [{name: v1}]
jobs:
  dir: %s
  window_job: 1
  window_total: 1
`, filepath.Join(dir, "data"))
	if n := os.Getenv("BATCHD_RSS_STREAMS_MAX"); n != "" {
		yaml += "  streams_max: " + n + "\n"
	}
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	const items, inputBytes = 10_000, 1_480
	body := func(tag int) []byte {
		var b bytes.Buffer
		b.WriteString(`{"async": true, "items": [`)
		pad := strings.Repeat("x", inputBytes)
		for i := range items {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"input": "%d-%d-%s"}`, tag, i, pad)
		}
		b.WriteString("]}")
		return b.Bytes()
	}
	s := startServer(t, cfg)
	pid := s.cmd.Process.Pid
	post := func(b []byte) int {
		resp, err := http.Post(s.base+"/v1/models/echo/batch", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Errorf("submit: %v", err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	report := func(what string) {
		t.Logf("%-34s RSS %4d MB (peak %4d MB)", what, procMemKB(t, pid, "VmRSS")>>10, procMemKB(t, pid, "VmHWM")>>10)
	}
	b0 := body(0)
	t.Logf("body %.1f MB, %d items", float64(len(b0))/1e6, items)
	report("at start")
	if code := post(b0); code != http.StatusAccepted {
		t.Fatalf("one submission: %d", code)
	}
	report("after one submission")
	bodies := make([][]byte, 8)
	for i := range bodies {
		bodies[i] = body(i + 1)
	}
	var wg sync.WaitGroup
	codes := make([]int, len(bodies))
	for i, b := range bodies {
		wg.Go(func() { codes[i] = post(b) })
	}
	wg.Wait()
	t.Logf("eight at once: statuses %v", codes)
	report("after eight at once")
	// The runtime gives idle memory back over minutes (the scavenger);
	// this shows what is still held shortly after.
	time.Sleep(10 * time.Second)
	report("10 s later")
}
