package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/server"
)

// The cluster's process tests: real `batchd serve` processes (the test
// binary re-run as TestJobsServeHelper, as TestJobsCrashRestart does) on
// loopback, joined with a gossip key, each with its data plane, under
// load through every front. They check invariants, not timings: on a
// loaded machine a request may be slow, but it is answered once, with its
// own output, or with a clear error, within its deadline plus the reply
// grace.

// Settings of the process tests' nodes.
const (
	procSLO        = 5 * time.Second
	procReplyGrace = 2 * time.Second
	// procSlack is what the machine may add to a request's bound: the
	// HTTP exchange, and a loaded 2-core box scheduling three servers.
	procSlack = 5 * time.Second
	// procWait bounds every wait for the cluster to reach a state.
	procWait = 30 * time.Second
)

// procNode is one node of a process test.
type procNode struct {
	name, cfg string
	s         *serveChild
}

// procSettings are what a process test's nodes are made with.
type procSettings struct {
	devices   int
	latency   time.Duration
	batchMax  int
	slo       time.Duration
	probe     time.Duration
	timeout   time.Duration
	suspicion int
	// jobWindow, when set, bounds a job's items in the engine at once.
	jobWindow int
}

// procDefaults are the invariant tests' nodes: fast devices, a long SLO
// (a request resubmitted after a death still meets it) and serve's
// failure detector (300 ms probes: 10 minutes at full load on a 2-core
// box without a false death, RESULTS.md), memberlist's LAN settings under
// the race detector, whose servers run several times slower: a false
// death heals (the node takes a new life) but moves the model, which the
// tests' counts do not expect.
var procDefaults = procSettings{devices: 2, latency: 20 * time.Millisecond, batchMax: 100, slo: procSLO,
	probe: 300 * time.Millisecond, timeout: 150 * time.Millisecond, suspicion: 3}

func init() {
	if raceOn {
		procDefaults.probe, procDefaults.timeout, procDefaults.suspicion = time.Second, 500*time.Millisecond, 4
	}
}

// writeNodeConfig writes node name's serve config under dir, joining join
// (a gossip address) when it is not empty. Its job store is dir/name, so
// a node restarted under its name keeps it.
func writeNodeConfig(t *testing.T, dir, name, join string, ps procSettings) string {
	t.Helper()
	joins := "[]"
	if join != "" {
		joins = "[" + join + "]"
	}
	window := ""
	if ps.jobWindow > 0 {
		window = fmt.Sprintf("\n  window_job: %d\n  window_total: %d", ps.jobWindow, ps.jobWindow)
	}
	yaml := fmt.Sprintf(`http:
  addr: 127.0.0.1:0
  reply_grace: %s
devices:
  count: %d
  latency: %s
policy:
  slo: %s
  batch_max: %d
models:
  - name: echo
    versions: [{name: v1}]
jobs:
  dir: %s%s
cluster:
  node: %s
  bind: 127.0.0.1:0
  join: %s
  secret_key_env: BATCHD_TEST_GOSSIP_KEY
  data_addr: 127.0.0.1:0
  probe_interval: %s
  probe_timeout: %s
  suspicion_mult: %d
  handover_grace: 0s
`, procReplyGrace, ps.devices, ps.latency, ps.slo, ps.batchMax, filepath.Join(dir, name), window, name, joins, ps.probe, ps.timeout, ps.suspicion)
	cfg := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// clusterStatus is GET /v1/cluster of the node at base.
func clusterStatus(t *testing.T, base string) server.ClusterStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := server.FetchClusterStatus(ctx, base, "")
	if err != nil {
		t.Fatalf("GET %s/v1/cluster: %v", base, err)
	}
	return st
}

// memberOf is node's entry in st.
func memberOf(st server.ClusterStatus, node string) (server.ClusterMember, bool) {
	for _, m := range st.Members {
		if m.Node == node {
			return m, true
		}
	}
	return server.ClusterMember{}, false
}

// waitStatus polls base's /v1/cluster until ok holds, for at most
// procWait.
func waitStatus(t *testing.T, base, what string, ok func(server.ClusterStatus) bool) server.ClusterStatus {
	t.Helper()
	deadline := time.Now().Add(procWait)
	for {
		st := clusterStatus(t, base)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; /v1/cluster of %s: %+v", what, procWait, st.Node, st)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, bounded
	}
}

// startProcCluster starts n nodes n0, n1, ... in dir with the gossip key set
// (and env, if any, in their environment), the others joining n0, and
// waits until each sees every one alive and all name the same owner of
// echo.
func startProcCluster(t *testing.T, dir string, n int, ps procSettings, env ...string) []*procNode {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BATCHD_TEST_GOSSIP_KEY", base64.StdEncoding.EncodeToString(key))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	nodes := make([]*procNode, n)
	join := ""
	for i := range nodes {
		name := fmt.Sprintf("n%d", i)
		cfg := writeNodeConfig(t, dir, name, join, ps)
		nodes[i] = &procNode{name: name, cfg: cfg, s: startServer(t, cfg)}
		if i == 0 {
			m, _ := memberOf(clusterStatus(t, nodes[0].s.base), "n0")
			join = m.Gossip
		}
	}
	for _, nd := range nodes {
		waitStatus(t, nd.s.base, nd.name+" sees every node alive", func(st server.ClusterStatus) bool {
			for _, other := range nodes {
				if m, ok := memberOf(st, other.name); !ok || m.State != "alive" {
					return false
				}
			}
			return st.Owners["echo"] != ""
		})
	}
	return nodes
}

// owner is the owner of echo as node nd sees it.
func owner(t *testing.T, nd *procNode) string {
	return clusterStatus(t, nd.s.base).Owners["echo"]
}

// procResult is one request of a process test's load.
type procResult struct {
	front   string
	input   string
	status  int    // 0: no HTTP answer
	output  string // 200's
	version string
	errMsg  string // the error's message, for any other status
	netErr  error
	start   time.Time
	elapsed time.Duration
}

// procLoad sends requests for echo to fronts, workers at a time each,
// until stop; each input is unique.
type procLoad struct {
	mu      sync.Mutex
	results []procResult
	seq     atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
	client  *http.Client
}

func newProcLoad() *procLoad {
	return &procLoad{stop: make(chan struct{}),
		// Past this the request counts as lost: the server's own bound
		// and the machine's slack.
		client: &http.Client{Timeout: procSLO + procReplyGrace + procSlack}}
}

// run starts workers clients on front, at base, until stop or until
// the front is gone (alive says so).
func (l *procLoad) run(front, base string, workers int, alive *atomic.Bool) {
	for range workers {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				if alive != nil && !alive.Load() {
					return
				}
				in := fmt.Sprintf("%s-%d", front, l.seq.Add(1))
				r := l.one(front, base, in)
				if alive != nil && !alive.Load() {
					return // its front died: not counted
				}
				l.mu.Lock()
				l.results = append(l.results, r)
				l.mu.Unlock()
				time.Sleep(2 * time.Millisecond) // a paced client, not a flood
			}
		})
	}
}

func (l *procLoad) one(front, base, in string) procResult {
	start := time.Now()
	r := procResult{front: front, input: in, start: start}
	resp, err := l.client.Post(base+"/v1/models/echo/infer", "application/json", strings.NewReader(fmt.Sprintf(`{"input": %q}`, in)))
	r.elapsed = time.Since(start)
	if err != nil {
		r.netErr = err
		return r
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	r.status = resp.StatusCode
	var out struct {
		Output  string `json:"output"`
		Version string `json:"version"`
		Error   any    `json:"error"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		r.errMsg = "body not JSON: " + string(body)
		return r
	}
	r.output, r.version = out.Output, out.Version
	if out.Error != nil {
		r.errMsg = fmt.Sprint(out.Error)
	}
	return r
}

// end stops the load and returns every result.
func (l *procLoad) end() []procResult {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.results
}

// frontExpiry is the error of a request its front answered itself at its
// deadline plus grace (actors.Front): no batcher or device answered it, so
// it was lost on the way.
const frontExpiry = "no answer by the deadline"

// loadSecond sends a second of closed-loop load, workers at a time,
// through each of nodes' fronts, and returns what came back.
func loadSecond(nodes []*procNode, workers int) []procResult {
	l := newProcLoad()
	for _, nd := range nodes {
		l.run(nd.name, nd.s.base, workers, nil)
	}
	time.Sleep(time.Second)
	return l.end()
}

// okVia counts the results through the node front's front that were 200.
func okVia(results []procResult, front string) int {
	n := 0
	for _, r := range results {
		if r.front == front && r.status == http.StatusOK {
			n++
		}
	}
	return n
}

// checkInvariants checks what every request of a surviving front must
// get: one HTTP answer, 200 with its own input's output, or another status
// with an error message, within its deadline plus the reply grace (and
// the machine's slack); none lost (no answer at all, or only the front's
// guard's). It returns the count of 200s and of errors.
func checkInvariants(t *testing.T, results []procResult) (ok, failed int) {
	t.Helper()
	seen := map[string]bool{}
	bad := 0
	for _, r := range results {
		if seen[r.input] {
			t.Errorf("%s: answered twice", r.input)
		}
		seen[r.input] = true
		var why string
		switch {
		case r.netErr != nil:
			why = fmt.Sprintf("lost: no answer (%v)", r.netErr)
		case r.elapsed > procSLO+procReplyGrace+procSlack:
			why = fmt.Sprintf("answered after %v, past its deadline and grace", r.elapsed)
		case r.status == http.StatusOK && r.output != actors.EmulatedOutput("echo", r.version, r.input):
			why = fmt.Sprintf("200 with output %q, not its input's", r.output)
		case r.status == http.StatusOK:
			ok++
		case strings.Contains(r.errMsg, frontExpiry):
			why = "lost in the cluster: answered by its front's guard at its deadline plus grace"
		case r.errMsg == "":
			why = fmt.Sprintf("status %d without an error message", r.status)
		default:
			failed++
		}
		if why != "" {
			if bad++; bad <= 10 {
				t.Errorf("%s via %s, sent at %s: %s", r.input, r.front, r.start.Format("15:04:05.000"), why)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d requests broke an invariant in all", bad)
	}
	return ok, failed
}

// TestClusterProcessKill: three real nodes under load through every
// front; the owner of echo is killed with SIGKILL mid-load, and restarted
// under its name while the load goes on. Every request through a front
// that survived is answered once: 200 with its own output or a clear
// error, within its deadline and grace; the others see the owner dead,
// and the restarted node alive again at a higher incarnation, serving.
func TestClusterProcessKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills server processes")
	}
	dir := t.TempDir()
	nodes := startProcCluster(t, dir, 3, procDefaults)
	victimName := owner(t, nodes[0])
	var victim *procNode
	var survivors []*procNode
	for _, nd := range nodes {
		if nd.name == victimName {
			victim = nd
		} else {
			survivors = append(survivors, nd)
		}
	}
	before, _ := memberOf(clusterStatus(t, survivors[0].s.base), victimName)

	load := newProcLoad()
	var victimUp atomic.Bool
	victimUp.Store(true)
	for _, nd := range survivors {
		load.run(nd.name, nd.s.base, 4, nil)
	}
	victimLoad := newProcLoad() // its front dies: not checked
	victimLoad.run(victim.name, victim.s.base, 2, &victimUp)
	time.Sleep(time.Second) // load before the kill
	victimUp.Store(false)
	victim.s.kill(t)
	for _, nd := range survivors {
		waitStatus(t, nd.s.base, nd.name+" sees "+victimName+" dead and echo moved", func(st server.ClusterStatus) bool {
			m, _ := memberOf(st, victimName)
			return m.State == "dead" && st.Owners["echo"] != victimName && st.Owners["echo"] != ""
		})
	}
	time.Sleep(time.Second) // load with the owner gone
	// Every request sent so far is answered before the node comes back:
	// its return (a higher incarnation) would make the fronts resubmit
	// what they lost, and hide a loss.
	results := load.end()
	victimLoad.end()
	ok, failed := checkInvariants(t, results)
	var slowest time.Duration
	for _, r := range results {
		slowest = max(slowest, r.elapsed)
	}
	t.Logf("%d requests through the surviving fronts across the kill: %d 200, %d errors, slowest %v", len(results), ok, failed, slowest)
	if ok == 0 {
		t.Error("no request answered 200")
	}

	// The node comes back under its name, joining a survivor.
	survivorGossip, _ := memberOf(clusterStatus(t, survivors[0].s.base), survivors[0].name)
	victim.cfg = writeNodeConfig(t, dir, victimName, survivorGossip.Gossip, procDefaults)
	victim.s = startServer(t, victim.cfg)
	for _, nd := range append([]*procNode{victim}, survivors...) {
		waitStatus(t, nd.s.base, nd.name+" sees "+victimName+" alive at a new incarnation", func(st server.ClusterStatus) bool {
			m, _ := memberOf(st, victimName)
			return m.State == "alive" && m.Incarnation > before.Incarnation
		})
	}
	results = loadSecond(append([]*procNode{victim}, survivors...), 2)
	ok, failed = checkInvariants(t, results)
	restarted := okVia(results, victimName)
	t.Logf("%d requests through every front after the return: %d 200, %d errors, %d 200 through the restarted front; incarnation %d → %d",
		len(results), ok, failed, restarted, before.Incarnation, memberIncarnation(t, survivors[0], victimName))
	if failed != 0 || restarted == 0 {
		t.Errorf("after the return: %d errors, %d 200 through the restarted front: want none and some", failed, restarted)
	}
}

// memberIncarnation is node's incarnation as nd sees it.
func memberIncarnation(t *testing.T, nd *procNode, node string) uint64 {
	m, _ := memberOf(clusterStatus(t, nd.s.base), node)
	return m.Incarnation
}

// TestClusterProcessPartition: three real nodes under load through every
// front; the owner of echo's data plane is cut from the others (the fault
// knob: SIGUSR1, BATCHD_FAULT_SIGNALS) while membership still sees it
// alive, then healed (SIGUSR2). Every request through every front is
// answered once: 200 with its own output or a clear error, within its
// deadline and grace; after the heal every front answers 200.
func TestClusterProcessPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	nodes := startProcCluster(t, t.TempDir(), 3, procDefaults, server.FaultSignalsEnv+"=1")
	victimName := owner(t, nodes[0])
	var victim *procNode
	for _, nd := range nodes {
		if nd.name == victimName {
			victim = nd
		}
	}
	load := newProcLoad()
	for _, nd := range nodes {
		load.run(nd.name, nd.s.base, 3, nil)
	}
	time.Sleep(time.Second)
	if err := victim.s.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // load across the partition
	if err := victim.s.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	during := load.end()
	ok, failed := checkInvariants(t, during)
	t.Logf("%d requests across the partition: %d 200, %d errors", len(during), ok, failed)

	// Healed: every front answers 200 again.
	healed := loadSecond(nodes, 2)
	ok, failed = checkInvariants(t, healed)
	t.Logf("%d requests after the heal: %d 200, %d errors", len(healed), ok, failed)
	if failed != 0 || ok == 0 {
		t.Errorf("after the heal: %d 200, %d errors: want every one 200", ok, failed)
	}
	if log := victim.s.stderr.String(); !strings.Contains(log, "partitioned=true") || !strings.Contains(log, "partitioned=false") {
		t.Errorf("%s's log does not show the cut and the heal:\n%s", victim.name, log)
	}
}

// logNodesOnFailure logs, if the test fails, the end of each node's log
// and its series of requests in flight and of the data plane's messages
// (a reply that came back Undeliverable shows there), for the failure to
// be traced.
func logNodesOnFailure(t *testing.T, nodes []*procNode) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, nd := range nodes {
			log := nd.s.stderr.String()
			t.Logf("%s's log (its end):\n%s", nd.name, log[max(0, len(log)-4000):])
			resp, err := http.Get(nd.s.base + "/metrics")
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(body), "\n") {
				if !strings.HasPrefix(line, "#") && (strings.Contains(line, "flight") || strings.Contains(line, "front") || strings.Contains(line, "cluster_messages") || strings.Contains(line, "unanswered") || strings.Contains(line, "requests_total")) {
					t.Logf("%s: %s", nd.name, line)
				}
			}
		}
	})
}

// TestClusterProcessJobs: an async job accepted by a node that does not
// own its model is kept in that node's store and its items are batched at
// the owner like any request; the node is killed (SIGKILL) mid-job and
// restarted under its name with its store: the job resumes, and every
// item is completed once (at most a retry for those in flight at the
// kill), with its own input's output, in input order.
func TestClusterProcessJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills server processes")
	}
	const items = 3000
	dir := t.TempDir()
	ps := procDefaults
	ps.jobWindow = 40
	nodes := startProcCluster(t, dir, 3, ps)
	logNodesOnFailure(t, nodes)
	ownerName := owner(t, nodes[0])
	var keeper *procNode // accepts the job: not the owner
	for _, nd := range nodes {
		if nd.name != ownerName {
			keeper = nd
			break
		}
	}
	var body strings.Builder
	body.WriteString(`{"async": true, "items": [`)
	inputs := make([]string, items)
	for i := range inputs {
		inputs[i] = fmt.Sprintf("job-%d-%x", i, i*7919)
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"input": %q}`, inputs[i])
	}
	body.WriteString("]}")
	resp, err := http.Post(keeper.s.base+"/v1/models/echo/batch", "application/json", strings.NewReader(body.String()))
	if err != nil {
		t.Fatal(err)
	}
	var accepted struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&accepted); err != nil || resp.StatusCode != http.StatusAccepted || accepted.ID == "" {
		t.Fatalf("submit: %d %v %+v", resp.StatusCode, err, accepted)
	}
	resp.Body.Close()
	for deadline := time.Now().Add(procWait); ; time.Sleep(2 * time.Millisecond) {
		var st jobStatus
		getJSON(t, keeper.s.base+"/v1/requests/"+accepted.ID+"?limit=0", &st)
		if st.Progress.Completed >= items/5 {
			if st.Progress.Completed == items {
				t.Fatal("the job ended before the kill: make it longer")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job stuck at %+v", st.Progress)
		}
	}
	before, _ := memberOf(clusterStatus(t, nodes[0].s.base), keeper.name)
	keeper.s.kill(t)
	// Restarted once the others hold its old life dead: a node back
	// sooner is refused by them until then (memberlist sees its name at
	// two addresses). Even so a stale report of the old life's death can
	// kill the new one at a peer until it refutes (memberlist's own
	// incarnations start again with the new life): the data plane keeps
	// its streams then (cluster/transport), so no reply is lost.
	for _, nd := range nodes {
		if nd != keeper {
			waitStatus(t, nd.s.base, nd.name+" sees "+keeper.name+" dead", func(st server.ClusterStatus) bool {
				m, _ := memberOf(st, keeper.name)
				return m.State == "dead"
			})
		}
	}
	gossip, _ := memberOf(clusterStatus(t, nodes[0].s.base), ownerName)
	keeper.cfg = writeNodeConfig(t, dir, keeper.name, gossip.Gossip, ps)
	keeper.s = startServer(t, keeper.cfg)
	for _, nd := range nodes {
		waitStatus(t, nd.s.base, nd.name+" sees "+keeper.name+" back", func(st server.ClusterStatus) bool {
			m, _ := memberOf(st, keeper.name)
			return m.State == "alive" && m.Incarnation > before.Incarnation
		})
	}
	var st jobStatus
	for deadline := time.Now().Add(procWait); ; time.Sleep(20 * time.Millisecond) {
		getJSON(t, keeper.s.base+"/v1/requests/"+accepted.ID+"?limit=0", &st)
		p := st.Progress
		if p.Completed+p.Failed+p.Cancelled+p.Expired == p.Total {
			break
		}
		if time.Now().After(deadline) {
			for _, nd := range nodes {
				t.Logf("%s's log:\n%s", nd.name, nd.s.stderr.String())
			}
			t.Fatalf("job did not finish after the restart: %+v", p)
		}
	}
	if st.Status != "completed" || st.Progress.Completed != items {
		t.Fatalf("job %s: %+v", st.Status, st.Progress)
	}
	// Only the items in flight at the kill (at most the job's window) run
	// twice. A reply lost after the restart shows as a third run, or a
	// second of an item the kill did not catch: its front's guard
	// answered it Expired and the job ran it again.
	retried := checkJobItems(t, keeper.s.base, accepted.ID, inputs, 2)
	if retried > ps.jobWindow {
		t.Errorf("%d items run again: more than the %d the kill can have caught in flight (replies lost after the restart)", retried, ps.jobWindow)
	}
	t.Logf("job of %d items kept by %s (owner of echo: %s), killed mid-job and restarted: every item completed, %d run again (in flight at the kill)", items, keeper.name, ownerName, retried)
}
