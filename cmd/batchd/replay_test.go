package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/server"
	"github.com/batchd/batchd/sim"
)

// TestRecordReplay: `serve --record` writes one line per request, without
// the input text, which `sim --replay` reads back (the two packages agree
// on the format) and replays against another fleet: the same requests,
// tenants, models and input lengths.
func TestRecordReplay(t *testing.T) {
	f, err := config.Load("test.yaml", []byte("devices:\n  count: 2\n  latency: 5ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.HTTP.Addr = "127.0.0.1:0"
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := server.Options{Logger: log, Record: server.RecordOptions{Path: path, BytesMax: 1 << 20}}
	go func() { done <- server.Run(ctx, f, opts, io.Discard, func(a net.Addr) { addr <- a }) }()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a.String()
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	inputs := []string{"a", "secret-bb", "ccc", "dddd"}
	for _, in := range inputs {
		if code, _ := infer(t, base, "echo", in); code != http.StatusOK {
			t.Fatalf("infer %q: %d", in, code)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "secret") {
		t.Errorf("the input text is in the recording:\n%s", data)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("%d lines for %d requests:\n%s", len(lines), len(inputs), data)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first["outcome"] != "completed" || first["model"] != "echo" || first["input_len"] != 1.0 {
		t.Errorf("first line %s: %v", lines[0], err)
	}
	reqs, err := sim.ReadReplay(bytes.NewReader(data), 0)
	if err != nil {
		t.Fatal(err)
	}
	lens := map[int]bool{}
	for _, r := range reqs {
		lens[r.InputLen] = true
		if r.Model != "echo" || r.Tenant == "" {
			t.Errorf("replayed %+v", r)
		}
	}
	for _, in := range inputs {
		if !lens[len(in)] {
			t.Errorf("no replayed request of length %d: %+v", len(in), reqs)
		}
	}

	var stdout, stderr bytes.Buffer
	args := []string{"sim", "--replay", path, "--fleet", "devices=3,latency=40ms,batch-max=8", "--json"}
	if got := run(args, &stdout, &stderr); got != exitOK {
		t.Fatalf("sim --replay: %d %s", got, stderr.String())
	}
	var rep sim.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Requests.Offered != int64(len(inputs)) || rep.Requests.Completed != int64(len(inputs)) ||
		rep.Workload.Devices != 3 || rep.Workload.BatchMax != 8 || rep.Workload.LatencyMs != 40 || rep.Models["echo"].Completed != int64(len(inputs)) {
		t.Errorf("replay report: requests %+v, workload %+v", rep.Requests, rep.Workload)
	}
}

// TestSimReplayAndFleetUsage: bad recordings, fleets and flag mixes are
// usage errors that say what is wrong (and the line of a bad record).
func TestSimReplayAndFleetUsage(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	good := filepath.Join(dir, "good.jsonl")
	os.WriteFile(bad, []byte(`{"arrival_s": 0, "model": "m", "input_len": 3}`+"\n"+`{"arrival_s": 1, "input_len": 3}`+"\n"), 0o600)
	os.WriteFile(good, []byte(`{"arrival_s": 0, "model": "m", "input_len": 3}`+"\n"), 0o600)
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"sim", "--replay", bad}, "line 2: bad record: no model"},
		{[]string{"sim", "--replay", filepath.Join(dir, "none")}, "no such file"},
		{[]string{"sim", "--replay", good, "--rate", "5"}, "--rate: a replay's arrivals"},
		{[]string{"sim", "--fleet", "devices=0"}, "devices=0: want a positive integer"},
		{[]string{"sim", "--fleet", "gpus=4"}, `unknown key "gpus"`},
		{[]string{"sim", "--fleet", "devices=2,devices=3"}, "devices given twice"},
		{[]string{"sim", "--fleet", "latency=fast"}, "latency=fast: want a positive duration"},
		{[]string{"sim", "--fleet", "devices"}, "want key=value"},
		{[]string{"sim", "--fleet", "devices=2", "--devices", "3"}, "give the fleet one way"},
	} {
		var stdout, stderr bytes.Buffer
		if got := run(c.args, &stdout, &stderr); got != exitUsage || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("batchd %q: status %d, stderr %q; want %d and %q", c.args, got, stderr.String(), exitUsage, c.stderr)
		}
	}
	var stdout, stderr bytes.Buffer
	if got := run([]string{"serve", "--record-inputs"}, &stdout, &stderr); got != exitUsage || !strings.Contains(stderr.String(), "needs --record") {
		t.Errorf("--record-inputs alone: %d %q", got, stderr.String())
	}
	if got := run([]string{"serve", "--record", "x", "--record-max-bytes", "0"}, &stdout, &stderr); got != exitUsage {
		t.Errorf("--record-max-bytes 0: %d", got)
	}
}

// TestSimSweepAndCharts: --sweep prints one result per point and policy in
// order and, with --out, the sweep's charts; --out on a run writes its
// charts without changing the run (same trace hash); a bad spec is a
// usage error.
func TestSimSweepAndCharts(t *testing.T) {
	var stdout, stderr bytes.Buffer
	dir := t.TempDir()
	args := []string{"sim", "--sweep", "rate=100:300:100", "--duration", "1s", "--devices", "2", "--json", "--out", dir}
	if got := run(args, &stdout, &stderr); got != exitOK {
		t.Fatalf("sweep: %d %s", got, stderr.String())
	}
	var rs []struct {
		Policy string  `json:"policy"`
		Value  float64 `json:"value"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rs); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Policy+"@"+jsonNum(r.Value))
	}
	if strings.Join(got, " ") != "derived@100 eager@100 derived@200 eager@200 derived@300 eager@300" {
		t.Errorf("sweep order: %v", got)
	}
	for _, name := range []string{"sweep_latency.png", "sweep_latency.svg", "sweep_throughput.png", "sweep_throughput.svg"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}

	hash := func(extra ...string) string {
		var stdout, stderr bytes.Buffer
		args := append([]string{"sim", "--duration", "2s", "--json"}, extra...)
		if got := run(args, &stdout, &stderr); got != exitOK {
			t.Fatalf("%q: %d %s", args, got, stderr.String())
		}
		var rep sim.Report
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.TraceHash
	}
	runDir := filepath.Join(t.TempDir(), "run")
	if a, b := hash(), hash("--out", runDir); a != b {
		t.Errorf("--out changed the run: %s vs %s", a, b)
	}
	entries, _ := os.ReadDir(runDir)
	if len(entries) != 8 {
		t.Errorf("%d chart files in %s, want 8", len(entries), runDir)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--sweep", "rate=1:1000:1"}, "1000 points, at most 200"},
		{[]string{"sim", "--sweep", "speed=1:2:1"}, "unknown setting"},
		{[]string{"sim", "--sweep-parallel", "2"}, "needs --sweep"},
	} {
		var stdout, stderr bytes.Buffer
		if got := run(c.args, &stdout, &stderr); got != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("batchd %q: %d %q, want usage error %q", c.args, got, stderr.String(), c.want)
		}
	}
}

func jsonNum(v float64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
