package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// TestReadReplay: lines are read in arrival order (the recorder writes them
// in completion order), shifted to start at zero, with every field a
// replay needs; blank lines and unknown fields are skipped.
func TestReadReplay(t *testing.T) {
	in := `{"arrival_s": 10.5, "tenant": "b", "model": "m", "version": "v2", "input_len": 40, "outcome": "completed", "latency_ms": 120}

{"arrival_s": 10.25, "tenant": "a", "model": "m", "params": "{\"k\":1}", "priority": 1, "timeout_ms": 250, "input_len": 0, "outcome": "rejected"}
{"arrival_s": 12, "tenant": "a", "model": "n", "input_len": 7}
`
	got, err := ReadReplay(strings.NewReader(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []ReplayRequest{
		{Arrival: 0, Tenant: "a", Model: "m", Params: `{"k":1}`, Priority: 1, Timeout: 250 * time.Millisecond, InputLen: 1},
		{Arrival: 250 * time.Millisecond, Tenant: "b", Model: "m", Version: "v2", InputLen: 40},
		{Arrival: 1750 * time.Millisecond, Tenant: "a", Model: "n", InputLen: 7},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if d := ReplayDuration(got); d != 1751*time.Millisecond {
		t.Errorf("ReplayDuration %v", d)
	}
}

// TestReadReplayErrors: a malformed record is refused with its line
// number, and so is a file over the limit.
func TestReadReplayErrors(t *testing.T) {
	good := `{"arrival_s": 1, "model": "m", "input_len": 3}` + "\n"
	for _, c := range []struct {
		in, want string
	}{
		{good + "{not json\n", "line 2"},
		{good + "\n" + `{"arrival_s": 1, "input_len": 3}` + "\n", "line 3: bad record: no model"},
		{`{"model": "m", "input_len": 3}`, "line 1: bad record: no arrival_s"},
		{`{"arrival_s": -1, "model": "m", "input_len": 3}`, "arrival_s -1"},
		{`{"arrival_s": 1, "model": "m"}`, "no input_len"},
		{`{"arrival_s": 1, "model": "m", "input_len": -2}`, "input_len -2"},
		{`{"arrival_s": 1, "model": "m", "input_len": 2, "priority": 5}`, "priority 5"},
		{`{"arrival_s": 1, "model": "m", "input_len": 2, "timeout_ms": -5}`, "timeout_ms -5"},
		{`{"arrival_s": 1, "model": "m", "input_len": 2, "input": "abc"}`, "input of 3 bytes, input_len 2"},
		{"\n\n", "no requests"},
		{good + good + good, "line 3: more than 2 requests"},
	} {
		_, err := ReadReplay(strings.NewReader(c.in), 2)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.want)
		}
	}
	_, err := ReadReplay(strings.NewReader(`{"arrival_s": 1}`), 0)
	if !errors.Is(err, ErrReplayLine) {
		t.Errorf("error %v does not wrap ErrReplayLine", err)
	}
}

// replayConfig is a one-device run of reqs at a fixed 100 ms per batch.
func replayConfig(reqs []ReplayRequest) Config {
	cfg := DefaultConfig()
	cfg.Devices = 1
	cfg.Replay = reqs
	cfg.Duration = ReplayDuration(reqs)
	cfg.Latency = actors.FixedLatency(100 * time.Millisecond)
	return cfg
}

// TestReplayRun: the simulator offers exactly the recorded requests, at
// their times, with their tenants, models and deadlines: requests that
// arrive together share a batch, a request whose timeout is shorter than a
// batch is refused for its deadline, and the run is deterministic.
func TestReplayRun(t *testing.T) {
	reqs := []ReplayRequest{
		{Arrival: 0, Tenant: "a", Model: "m", InputLen: 10},
		{Arrival: 0, Tenant: "b", Model: "m", InputLen: 20},
		{Arrival: 0, Tenant: "b", Model: "m", InputLen: 30},
		// After the first batch: a batch of its own.
		{Arrival: 2 * time.Second, Tenant: "a", Model: "n", InputLen: 5},
		// Cannot finish within 50 ms on a 100 ms device: refused at
		// admission for its deadline.
		{Arrival: 4 * time.Second, Tenant: "c", Model: "m", InputLen: 5, Timeout: 50 * time.Millisecond},
	}
	rep, err := Run(replayConfig(reqs))
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Check(); err != nil {
		t.Fatalf("%v: %v", err, rep.Violations.First)
	}
	q := rep.Requests
	if q.Offered != 5 || q.Completed != 4 || q.Rejected != 1 || rep.Rejections["deadline"] != 1 {
		t.Errorf("requests %+v, rejections %v; want 5 offered, 4 completed, 1 rejected for its deadline", q, rep.Rejections)
	}
	if rep.Batches != 2 || rep.BatchSizeMean != 2 {
		t.Errorf("%d batches of mean size %v, want 2 of 2 (3 together, then 1)", rep.Batches, rep.BatchSizeMean)
	}
	if a, b, c := rep.Tenants["a"], rep.Tenants["b"], rep.Tenants["c"]; a.Offered != 2 || b.Offered != 2 || c.Offered != 1 || c.Rejected != 1 {
		t.Errorf("tenants %+v", rep.Tenants)
	}
	if rep.Models["n"].Completed != 1 || rep.Models["m"].Completed != 3 {
		t.Errorf("models %+v", rep.Models)
	}
	// The lone request at 2 s waits its linger (min(SLO - compute -
	// margin, compute/devices) = 95 ms) and runs 100 ms.
	if p := rep.Models["n"].LatencyMs; p.Max != 195 {
		t.Errorf("model n latency %+v, want 195 ms", p)
	}
	again, err := Run(replayConfig(reqs))
	if err != nil || again.TraceHash != rep.TraceHash {
		t.Errorf("second run: hash %s vs %s, %v", again.TraceHash, rep.TraceHash, err)
	}
}

// TestReplayValidate: a replay whose arrivals do not fit the run, or are
// out of order, is refused before it starts.
func TestReplayValidate(t *testing.T) {
	reqs := []ReplayRequest{{Arrival: 0, Model: "m", InputLen: 1}, {Arrival: time.Second, Model: "m", InputLen: 1}}
	cfg := replayConfig(reqs)
	cfg.Duration = time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "at or after Duration") {
		t.Errorf("arrival at Duration: %v", err)
	}
	cfg = replayConfig([]ReplayRequest{reqs[1], reqs[0]})
	cfg.Duration = 2 * time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "increasing") {
		t.Errorf("out of order: %v", err)
	}
	cfg = replayConfig([]ReplayRequest{{Model: "m"}})
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "InputLen 0") {
		t.Errorf("empty input: %v", err)
	}
}

// TestReplayInputs: a recorded input is offered as it was: a poison input
// fails its request (and only it), where a made-up one would not.
func TestReplayInputs(t *testing.T) {
	got, err := ReadReplay(strings.NewReader(`{"arrival_s": 0, "model": "m", "input_len": 8, "input": "poison-1"}`+"\n"), 0)
	if err != nil || len(got) != 1 || got[0].Input != "poison-1" || got[0].InputLen != 8 {
		t.Fatalf("read %+v, %v", got, err)
	}
	reqs := []ReplayRequest{
		{Arrival: 0, Tenant: "a", Model: "m", InputLen: 8, Input: "poison-1"},
		{Arrival: time.Second, Tenant: "a", Model: "m", InputLen: 8},
	}
	cfg := replayConfig(reqs)
	cfg.Faults.PoisonPrefix = "poison"
	rep, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if q := rep.Requests; q.Failed != 1 || q.Completed != 1 {
		t.Errorf("requests %+v, want the poison one failed and the other completed", q)
	}
}

// TestLoadReplay: a recording replaces the sources and sets the safety
// phase; a missing or malformed file is an error that names it.
func TestLoadReplay(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.jsonl"), filepath.Join(dir, "bad.jsonl")
	os.WriteFile(good, []byte(`{"arrival_s": 0, "model": "m", "input_len": 3}`+"\n"+`{"arrival_s": 2, "model": "m", "input_len": 3}`+"\n"), 0o600)
	os.WriteFile(bad, []byte(`{"arrival_s": 0, "input_len": 3}`+"\n"), 0o600)
	cfg := DefaultConfig()
	if err := LoadReplay(good, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Replay) != 2 || cfg.Sources != nil || cfg.Duration != 2*time.Second+time.Millisecond {
		t.Errorf("replay %d requests, sources %v, duration %v", len(cfg.Replay), cfg.Sources, cfg.Duration)
	}
	for _, path := range []string{bad, filepath.Join(dir, "none")} {
		if err := LoadReplay(path, &cfg); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("LoadReplay(%s): %v, want an error naming the file", path, err)
		}
	}
}
