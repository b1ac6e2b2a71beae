package scenarios

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/sim/cluster"
)

// TestClusterScenarios runs every built-in cluster scenario with its own
// seed and fails on any broken expectation or checker violation.
func TestClusterScenarios(t *testing.T) {
	names := ClusterBuiltins()
	if len(names) == 0 {
		t.Fatal("no built-in cluster scenarios")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			s, err := ClusterBuiltin(name)
			if err != nil {
				t.Fatal(err)
			}
			if s.Long && !*long {
				t.Skip("long: run with -scenarios.long")
			}
			if len(s.checks) == 0 {
				t.Fatal("a scenario without expectations checks nothing")
			}
			res, err := s.Run(s.Seed)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range res.Failures() {
				t.Error(f)
			}
			if testing.Verbose() {
				rep := res.Report
				t.Logf("wall %.2f s; detected %v\n%s", rep.WallSeconds, rep.Detected, rep.Summary())
				for _, w := range rep.Windows {
					if w.Late > 0 {
						t.Logf("second %v: %d arrived, %d late, p99 %.1f ms", w.StartS, w.Arrived, w.Late, w.LatencyP99Ms)
					}
				}
				for _, c := range res.Checks {
					if c.Observed != nil {
						t.Logf("%-60s observed %g", c.Check, *c.Observed)
					}
				}
			}
		})
	}
}

// parseClusterText parses a cluster scenario given as text.
func parseClusterText(t *testing.T, text string) (*ClusterScenario, error) {
	t.Helper()
	return ParseCluster("test.yaml", []byte(text), func(rel string) ([]byte, error) {
		return nil, fmt.Errorf("no profile %q in this test", rel)
	})
}

// A file that states only its name and cluster: section runs the cluster
// simulator's default configuration: the schema's defaults are
// cluster.DefaultConfig's, so the two cannot drift apart silently.
func TestClusterDefaults(t *testing.T) {
	s, err := parseClusterText(t, "name: d\ncluster: {}\n")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ClusterConfig(s.Seed)
	if err != nil {
		t.Fatal(err)
	}
	want := cluster.DefaultConfig()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults differ:\n got %+v\nwant %+v", got, want)
	}
}

// Every key of the schema reaches the cluster simulator's configuration,
// node references resolve to the owner and a non-owner of the model, and
// faults are the simulator's events.
func TestClusterConfigFromFile(t *testing.T) {
	s, err := parseClusterText(t, `name: c
seed: 7
cluster:
  nodes: 5
  devices: 3
  per_node: true
  grace: 50ms
  link: {latency: 1ms, jitter: 2ms, loss: 0.01}
  membership: {probe_interval: 500ms, suspicion_mult: 5, push_pull_interval: 5s, reconnect_interval: 6s, leave_grace: 2s}
devices:
  latency: {base: 20ms, per_item: 1ms}
  quarantine_after: 7
policy: {batch_max: 32, slo: 300ms}
traffic: {rate: 100, duration: 10s, drain: 2s, models: [a, b]}
faults:
  - crash:owner(a)@1s
  - restart:owner(a)@3s
  - partition:nonowner(a)|owner(a)@4s-5s
`)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := s.ClusterConfig(s.Seed)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 5 {
		names = append(names, cluster.NodeName(i))
	}
	owner, _ := member.Owner("a", names)
	non := names[0]
	if non == owner {
		non = names[1]
	}
	switch {
	case cfg.Seed != 7 || cfg.Nodes != 5 || cfg.Devices != 3 || !cfg.PerNode || cfg.Grace != 50*time.Millisecond:
		t.Errorf("cluster: %+v", cfg)
	case cfg.Link != cluster.LinkConfig{Latency: time.Millisecond, Jitter: 2 * time.Millisecond, Loss: 0.01}:
		t.Errorf("link: %+v", cfg.Link)
	case cfg.SWIM.ProbeInterval != 500*time.Millisecond || cfg.SWIM.SuspicionMult != 5 || cfg.SWIM.PushPullInterval != 5*time.Second ||
		cfg.SWIM.ReconnectInterval != 6*time.Second || cfg.SWIM.LeaveGrace != 2*time.Second:
		t.Errorf("membership: %+v", cfg.SWIM)
	case !reflect.DeepEqual(cfg.Device.Latency, actors.LatencyModel{Base: 20 * time.Millisecond, PerItem: time.Millisecond}) || !reflect.DeepEqual(cfg.Batcher.Latency, cfg.Device.Latency):
		t.Errorf("latency: device %+v, batcher %+v", cfg.Device.Latency, cfg.Batcher.Latency)
	case cfg.Device.QuarantineAfter != 7 || cfg.Batcher.BatchMax != 32 || cfg.Batcher.SLO != 300*time.Millisecond:
		t.Errorf("supervision or policy: %+v %+v", cfg.Device, cfg.Batcher)
	case cfg.Rate != 100 || cfg.Duration != 10*time.Second || cfg.Drain != 2*time.Second || !slices.Equal(cfg.Models, []string{"a", "b"}):
		t.Errorf("traffic: %+v", cfg)
	case len(cfg.Events) != 3 || cfg.Events[0].Node != owner || cfg.Events[0].At != time.Second ||
		cfg.Events[1].Node != owner || !slices.Equal(cfg.Events[2].A, []string{non}) || !slices.Equal(cfg.Events[2].B, []string{owner}):
		t.Errorf("faults (owner %s, non-owner %s): %+v", owner, non, cfg.Events)
	}
}

// Mistakes are reported with the file, the line and the key's path.
func TestClusterErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"name: x\ncluster: {nodez: 3}\n", `test.yaml:2: cluster.nodez: unknown key (did you mean "nodes"?)`},
		{"name: x\nnodes: []\ntraffic: {rate: 1}\n", "cluster: missing"},
		{"name: x\ncluster:\n  nodes: 0\n", "test.yaml:3: cluster.nodes"},
		{"name: x\ncluster: {devices_per_node: 0}\n", "cluster: no devices"},
		{"name: x\ncluster:\n  link: {loss: 1}\n", "test.yaml:3: cluster.link.loss"},
		{"name: x\ncluster: {}\ntraffic:\n  rate: -1\n", "test.yaml:4: traffic.rate"},
		{"name: x\ncluster: {}\nfaults:\n  - crash:n003@1s\n", `test.yaml:4: faults[0]: "crash:n003@1s": no node "n003" (the nodes are n000 to n002)`},
		{"name: x\ncluster: {}\nfaults:\n  - crash:owner(z)@1s\n", `faults[0]: "crash:owner(z)@1s": owner(z): no model "z"`},
		{"name: x\ncluster: {}\nfaults:\n  - crash:n000@1s,restart:n000@2s\n", "one fault an entry"},
		{"name: x\ncluster: {}\nfaults:\n  - crash:n000@50s\n", "after the run's end"},
		{"name: x\ncluster: {}\nfaults:\n  - boom:n000@5s\n", `unknown kind "boom"`},
		{"name: x\ncluster: {}\nexpect:\n  - goodput_rps > 1\n", `test.yaml:4: expect[0]: "goodput_rps > 1": unknown metric`},
		{"name: x\ncluster: {}\nexpect:\n  - detection_ms < 1\n", "detection_ms is a node's: add node:NODE"},
		{"name: x\ncluster: {}\nexpect:\n  - node:n000 p99_ms < 1\n", "p99_ms is the cluster's"},
		{"name: x\ncluster: {}\nexpect:\n  - window:1s-2s p99_ms < 1\n", "a window scopes only the per-second figures"},
		{"name: x\ncluster: {}\nexpect:\n  - window:2s-1s late == 0\n", "an empty window"},
		{"name: x\ncluster: {}\nexpect:\n  - window:detected(n009)-5s late == 0\n", `no node "n009"`},
		{"name: x\ncluster: {}\nexpect:\n  - window:detected(n000)+x-5s late == 0\n", "want detected(NODE)+DURATION"},
		{"name: x\ncluster: {}\nexpect:\n  - tenant:t p99_ms < 1\n", "want node: or window:"},
	} {
		_, err := parseClusterText(t, tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.text, err, tc.want)
		} else if !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v does not wrap ErrInvalid", tc.text, err)
		}
	}
}

// Each kind of scenario refuses the other's files and names, saying which
// command runs them.
func TestScenarioKinds(t *testing.T) {
	if _, err := Parse("c.yaml", []byte("name: c\ncluster: {}\n"), nil); err == nil || !strings.Contains(err.Error(), "batchd sim-cluster") {
		t.Errorf("a one-node parse of a cluster file: %v", err)
	}
	if _, err := Builtin("node-crash-owner"); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "batchd sim-cluster node-crash-owner") {
		t.Errorf("a cluster scenario's name to Builtin: %v", err)
	}
	if _, err := ClusterBuiltin("reference"); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "batchd sim reference") {
		t.Errorf("a one-node scenario's name to ClusterBuiltin: %v", err)
	}
	for _, n := range ClusterBuiltins() {
		if slices.Contains(Builtins(), n) {
			t.Errorf("%s is both a one-node and a cluster scenario", n)
		}
	}
}

// Every metric reads its own figure of the report, in its scope: a
// report built by hand, each value distinct.
func TestClusterMetrics(t *testing.T) {
	s, err := parseClusterText(t, "name: m\ncluster: {}\ntraffic: {duration: 5s}\nfaults: [crash:n001@1s, crash:n000@2s, restart:n001@4s]\n")
	if err != nil {
		t.Fatal(err)
	}
	rep := &cluster.Report{
		Offered: 1001, Accepted: 1000, Completed: 900, Failed: 3, Rejected: 4, Expired: 50, Cancelled: 5,
		Lost: 6, WithFront: 7, Twice: 8, ViolationCount: 9, LatencyP50Ms: 10, LatencyP95Ms: 11, LatencyP99Ms: 12,
		Batches: 13, Declined: 14, BatchMean: 15, NetLost: 16,
		Detected: map[string]time.Duration{"n001": 4200 * time.Millisecond},
		Windows: []cluster.Window{
			{StartS: 0, Arrived: 100, Completed: 100, LatencyP99Ms: 101},
			{StartS: 1, Arrived: 200, Completed: 150, Late: 40, LatencyP99Ms: 190},
			{StartS: 2, Arrived: 300, Completed: 0, Late: 300},
			{StartS: 3, Arrived: 250, Completed: 250, Late: 1, LatencyP99Ms: 201},
			{StartS: 4, Arrived: 150, Completed: 150, LatencyP99Ms: 120},
		},
	}
	rep.Membership.FalseDeaths = 17
	want := map[string]float64{
		"offered": 1001, "accepted": 1000, "completed": 900, "failed": 3, "rejected": 4, "expired": 50, "cancelled": 5,
		"lost": 6, "with_front": 7, "twice": 8, "violations": 9, "p50_ms": 10, "p95_ms": 11, "p99_ms": 12,
		"batches": 13, "declined": 14, "batch_size_mean": 15, "net_lost": 16, "false_deaths": 17,
		"completed_fraction": 0.9, "not_completed": 100,
		"arrived": 1000, "late": 341, "late_fraction": 0.341, "p99_step_max_ms": 201,
		// Detected at 4.2 s; the node's last fault before it is its crash
		// at 1 s (n000's crash is another node's, a restart is not a
		// fault to detect).
		"node:n001 detected_s": 4.2, "node:n001 detection_ms": 3200,
		// Seconds that overlap the window: [1, 3) holds seconds 1 and 2.
		"window:1s-3s arrived": 500, "window:1s-3s late": 340, "window:1s-3s completed": 150,
		"window:1s-3s p99_step_max_ms": 190,
		// From detection (4.2 s) on: second 4 only; from 2 s before it:
		// seconds 2, 3 and 4.
		"window:detected(n001)-10s late": 0, "window:detected(n001)-10s arrived": 150,
		"window:2s-detected(n001) p99_step_max_ms": 201,
	}
	for _, k := range sortedKeys(clusterMetricDoc) {
		if _, ok := want[k]; !ok && !clusterPerNode[k] {
			t.Errorf("metric %s has no case in this test", k)
		}
	}
	for _, text := range sortedKeys(want) {
		c, err := s.parseCheck(text + " == 0")
		if err != nil {
			t.Errorf("%s: %v", text, err)
			continue
		}
		got, ok := c.observe(s, rep)
		if !ok || math.Abs(got-want[text]) > 1e-9 {
			t.Errorf("%s: got %v (data %v), want %v", text, got, ok, want[text])
		}
	}
	// No data: a node never detected, a window past the arrivals, a
	// window that starts at the detection of a node never detected.
	for _, text := range []string{"node:n000 detection_ms", "window:10s-20s late", "window:detected(n002)-20s late"} {
		c, err := s.parseCheck(text + " == 0")
		if err != nil {
			t.Fatal(err)
		}
		if x, ok := c.observe(s, rep); ok {
			t.Errorf("%s: observed %v, want no data", text, x)
		}
	}
	// A failed check names the scenario, the file, the line and the value.
	s.checks = nil
	for i, e := range []string{"lost == 0", "p99_ms < 200"} {
		c, _ := s.parseCheck(e)
		c.Line = 10 + i
		s.checks = append(s.checks, c)
	}
	res := s.Evaluate(rep)
	if res[0].Passed || res[0].Message != `scenario "m" (test.yaml:10): expect "lost == 0": observed 6` || !res[1].Passed {
		t.Errorf("results: %+v", res)
	}
}
