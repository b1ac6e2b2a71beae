package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/config"
)

// clusterFile is testFile as node name of a cluster, gossiping on a free
// loopback port, joining join.
func clusterFile(t *testing.T, name string, join ...string) *config.File {
	t.Helper()
	f := testFile(t)
	f.Cluster.Node, f.Cluster.Bind, f.Cluster.Join = name, "127.0.0.1:0", join
	// A fast failure detector: the test waits for a death.
	f.Cluster.ProbeInterval, f.Cluster.ProbeTimeout, f.Cluster.SuspicionMult = 100*time.Millisecond, 50*time.Millisecond, 2
	f.Cluster.SecretKeyEnv = "BATCHD_TEST_GOSSIP_KEY"
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

// clusterOf is GET /v1/cluster of s.
func clusterOf(t *testing.T, s *Server) ClusterStatus {
	t.Helper()
	resp, err := http.Get("http://" + s.Addr().String() + "/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st ClusterStatus
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/cluster: %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// states is each member's state in st.
func states(st ClusterStatus) map[string]string {
	m := map[string]string{}
	for _, c := range st.Members {
		m[c.Node] = c.State
	}
	return m
}

// waitCluster polls s's /v1/cluster until ok holds, for at most waitMax.
func waitCluster(t *testing.T, s *Server, what string, ok func(ClusterStatus) bool) ClusterStatus {
	t.Helper()
	deadline := time.Now().Add(waitMax)
	for {
		st := clusterOf(t, s)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; /v1/cluster of %s: %+v", what, waitMax, st.Node, st)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded
	}
}

// twoModels makes f serve echo and big, its devices holding warm.
func twoModels(t *testing.T, f *config.File, warm ...string) *config.File {
	t.Helper()
	big := f.Models[0]
	big.Name = "big"
	f.Models = append(f.Models, big)
	f.Devices.WarmModels = warm
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestClusterServe: two nodes with the same gossip key find each other;
// each shows both alive with their devices and warm models and names the
// same owner for each model, a model's owner among the nodes holding it
// warm (big: b alone); one that stops gracefully is seen Left, and its
// models move; /metrics counts the members; a single node's /v1/cluster
// says it is none.
func TestClusterServe(t *testing.T) {
	t.Setenv("BATCHD_TEST_GOSSIP_KEY", base64.StdEncoding.EncodeToString([]byte("0123456789abcdef")))
	a := newServer(t, twoModels(t, clusterFile(t, "a"), "echo"))
	defer a.Shutdown(context.Background())
	b := newServer(t, twoModels(t, clusterFile(t, "b", a.ClusterAddr()), "echo", "big"))
	for _, s := range []*Server{a, b} {
		go s.Serve(context.Background())
	}
	var owner string
	for _, s := range []*Server{a, b} {
		st := waitCluster(t, s, "both alive", func(st ClusterStatus) bool {
			m := states(st)
			return m["a"] == "alive" && m["b"] == "alive"
		})
		for _, c := range st.Members {
			want := map[string]int{"a": 1, "b": 2}[c.Node]
			if c.Devices != 2 || len(c.Models) != want || c.Models[0] != "echo" || c.Incarnation == 0 {
				t.Errorf("%s sees %+v: want 2 devices, %d warm models from echo, an incarnation", st.Node, c, want)
			}
		}
		if o := st.Owners["echo"]; o == "" || (owner != "" && o != owner) {
			t.Errorf("%s: owner of echo %q, the other node says %q", st.Node, o, owner)
		} else {
			owner = o
		}
		if o := st.Owners["big"]; o != "b" {
			t.Errorf("%s: owner of big %q, want b, the one node holding it warm", st.Node, o)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	st := waitCluster(t, a, "b left", func(st ClusterStatus) bool { return states(st)["b"] == "left" })
	if st.Owners["echo"] != "a" || st.Owners["big"] != "a" {
		t.Errorf("after b left, the owners are %v, want a for both (no live node holds big warm: any may load it)", st.Owners)
	}
	resp, err := http.Get("http://" + a.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	_, _ = io.Copy(&body, resp.Body)
	resp.Body.Close()
	for _, want := range []string{`batchd_cluster_members{state="alive"} 1`, `batchd_cluster_members{state="left"} 1`, `batchd_cluster_events_total{kind="left"} 1`} {
		if !strings.Contains(body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	single := newServer(t, testFile(t))
	defer single.Shutdown(context.Background())
	go single.Serve(context.Background())
	resp, err = http.Get("http://" + single.Addr().String() + "/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a single node's /v1/cluster: %d, want 404", resp.StatusCode)
	}
}

// TestClusterKey: a node with another gossip key cannot join the cluster
// (its start fails, naming the join).
func TestClusterKey(t *testing.T) {
	t.Setenv("BATCHD_TEST_GOSSIP_KEY", base64.StdEncoding.EncodeToString([]byte("0123456789abcdef")))
	a := newServer(t, clusterFile(t, "a"))
	defer a.Shutdown(context.Background())
	t.Setenv("BATCHD_TEST_GOSSIP_KEY", base64.StdEncoding.EncodeToString([]byte("fedcba9876543210")))
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	s, err := New(ctx, clusterFile(t, "intruder", a.ClusterAddr()), Options{})
	if err == nil {
		s.Shutdown(context.Background())
		t.Fatal("a node of another key joined the cluster")
	}
	if !strings.Contains(err.Error(), "join") {
		t.Errorf("error %q does not say the join failed", err)
	}
}

// inferModel sends one synchronous request for model and returns its
// status, output and version.
func inferModel(t *testing.T, s *Server, model, input string) (int, string, string) {
	t.Helper()
	c := &http.Client{Timeout: waitMax}
	resp, err := c.Post("http://"+s.Addr().String()+"/v1/models/"+model+"/infer", "application/json", strings.NewReader(`{"input": "`+input+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Output  string `json:"output"`
		Version string `json:"version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, r.Output, r.Version
}

// TestClusterDataPlane: two nodes with cluster.data_addr join through
// memberlist and reach each other's data plane at the address their
// metadata carries: a request sent to a for big, which only b holds warm
// (so b owns it), is batched at b and answered at a with its own output;
// a's batcher runs nothing.
func TestClusterDataPlane(t *testing.T) {
	t.Setenv("BATCHD_TEST_GOSSIP_KEY", base64.StdEncoding.EncodeToString([]byte("0123456789abcdef")))
	withData := func(f *config.File) *config.File { return withDataPlane(t, f) }
	a := newServer(t, withData(twoModels(t, clusterFile(t, "a"), "echo")))
	defer a.Shutdown(context.Background())
	b := newServer(t, withData(twoModels(t, clusterFile(t, "b", a.ClusterAddr()), "echo", "big")))
	defer b.Shutdown(context.Background())
	for _, s := range []*Server{a, b} {
		go s.Serve(context.Background())
	}
	for _, s := range []*Server{a, b} {
		waitCluster(t, s, "both alive", func(st ClusterStatus) bool {
			m := states(st)
			return m["a"] == "alive" && m["b"] == "alive" && st.Owners["big"] == "b"
		})
	}
	for i := range 10 {
		in := fmt.Sprintf("in-%d", i)
		code, out, version := inferModel(t, a, "big", in)
		if code != http.StatusOK || out != actors.EmulatedOutput("big", version, in) {
			t.Fatalf("big at a: %d %q (version %q): want 200 and its input's output", code, out, version)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	sa, err := a.eng.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.eng.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sa.Batcher.Batches != 0 || sb.Batcher.Batches == 0 {
		t.Errorf("batches: a %d, b %d: want every one at b, big's owner", sa.Batcher.Batches, sb.Batcher.Batches)
	}
	if st := a.dp.tr.Stats(); st.Sent == 0 || st.Received == 0 {
		t.Errorf("a's data plane sent %d and received %d messages: want both", st.Sent, st.Received)
	}
	resp, err := http.Get("http://" + a.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	_, _ = io.Copy(&body, resp.Body)
	resp.Body.Close()
	for _, fate := range []string{"sent", "received"} {
		if !strings.Contains(body.String(), `batchd_cluster_messages_total{fate="`+fate+`"}`) || strings.Contains(body.String(), `batchd_cluster_messages_total{fate="`+fate+`"} 0`+"\n") {
			t.Errorf("/metrics: no %s messages counted", fate)
		}
	}
	// Each of the 10 requests a sent to b timed once, both parts.
	for _, part := range []string{"round_trip", "transit"} {
		if want := `batchd_cluster_forward_seconds_count{part="` + part + `"} 10` + "\n"; !strings.Contains(body.String(), want) {
			t.Errorf("/metrics: no %q", strings.TrimSpace(want))
		}
	}
}

// post sends one infer of model to s and returns the status and output.
func post(s *Server, model, input string) (int, string, error) {
	c := &http.Client{Timeout: waitMax}
	resp, err := c.Post("http://"+s.Addr().String()+"/v1/models/"+model+"/infer", "application/json", strings.NewReader(`{"input": "`+input+`"}`))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var r struct {
		Output string `json:"output"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, "", err
	}
	return resp.StatusCode, r.Output, nil
}

// TestClusterHandover: the owner of a model that stops gracefully while
// another node's clients stream requests for it first hands the model
// over (the others see it leave and move what waits there), then drains:
// every request is answered 200 with its own output, none refused by the
// draining owner, and the model ends up owned by the node that stays.
func TestClusterHandover(t *testing.T) {
	t.Setenv("BATCHD_TEST_GOSSIP_KEY", base64.StdEncoding.EncodeToString([]byte("0123456789abcdef")))
	withData := func(f *config.File) *config.File { return withDataPlane(t, f) }
	a := newServer(t, withData(clusterFile(t, "a")))
	defer a.Shutdown(context.Background())
	b := newServer(t, withData(clusterFile(t, "b", a.ClusterAddr())))
	defer b.Shutdown(context.Background())
	for _, s := range []*Server{a, b} {
		go s.Serve(context.Background())
	}
	st := waitCluster(t, a, "both alive", func(st ClusterStatus) bool {
		m := states(st)
		return m["a"] == "alive" && m["b"] == "alive" && st.Owners["echo"] != ""
	})
	waitCluster(t, b, "both alive", func(st ClusterStatus) bool { return states(st)["a"] == "alive" })
	owner, stays := a, b
	if st.Owners["echo"] == "b" {
		owner, stays = b, a
	}
	type result struct {
		code    int
		in, out string
	}
	results := make(chan result, 1<<14)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				in := fmt.Sprintf("c%d-%d", c, i)
				code, out, err := post(stays, "echo", in)
				if err != nil {
					t.Error(err) // not Fatal: this is not the test's goroutine
					return
				}
				results <- result{code, in, out}
			}
		})
	}
	// Some requests go through the owner before it stops.
	for range 40 {
		if r := <-results; r.code != http.StatusOK {
			t.Fatalf("before the stop: %d for %s", r.code, r.in)
		} else {
			results <- r
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if err := owner.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	close(results)
	n := 0
	for r := range results {
		n++
		if r.code != http.StatusOK || r.out != actors.EmulatedOutput("echo", "v1", r.in) {
			t.Errorf("%s: %d %q: want 200 and its own output", r.in, r.code, r.out)
		}
	}
	if after := clusterOf(t, stays); after.Owners["echo"] != after.Node {
		t.Errorf("after the owner left, echo is owned by %q, want %s", after.Owners["echo"], after.Node)
	}
	t.Logf("%d requests, the owner (%s) stopped among them", n, map[bool]string{true: "a", false: "b"}[owner == a])
}

// TestRejoinEvery: a join list that names a DNS name is resolved again
// (the headless service of a StatefulSet lists no one until the first pod
// is up); one of addresses only is not, so a join that reaches no one
// still fails the start (TestClusterKey).
func TestRejoinEvery(t *testing.T) {
	for _, c := range []struct {
		join []string
		want time.Duration
	}{
		{nil, 0},
		{[]string{"127.0.0.1:7946", "[::1]:7946"}, 0},
		{[]string{"10.0.0.1"}, 0},
		{[]string{"127.0.0.1:7946", "batchd-peers:7946"}, clusterRejoinEvery},
		{[]string{"batchd-peers.default.svc.cluster.local"}, clusterRejoinEvery},
		{[]string{"srv+_gossip._tcp.batchd-peers"}, clusterRejoinEvery},
	} {
		if got := rejoinEvery(c.join); got != c.want {
			t.Errorf("rejoinEvery(%q) = %v, want %v", c.join, got, c.want)
		}
	}
}

// withDataPlane turns f's data plane on, on a free loopback port.
func withDataPlane(t *testing.T, f *config.File) *config.File {
	t.Helper()
	f.Cluster.DataAddr = "127.0.0.1:0"
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestAwaitHandover: a node handing over waits its grace; past it, on
// while other nodes' requests still come, until they have been quiet for
// handoverQuiet; and no longer than its shutdown's bound.
func TestAwaitHandover(t *testing.T) {
	never := func() time.Time { return time.Time{} }
	if waited := awaitHandover(context.Background(), 50*time.Millisecond, never); waited < 50*time.Millisecond {
		t.Errorf("no requests from others: waited %v, want the grace (50ms)", waited)
	}
	// Requests come until 300 ms from now, then stop.
	until := time.Now().Add(300 * time.Millisecond)
	coming := func() time.Time {
		if now := time.Now(); now.Before(until) {
			return now
		}
		return until
	}
	if waited := awaitHandover(context.Background(), 50*time.Millisecond, coming); waited < 300*time.Millisecond+handoverQuiet-10*time.Millisecond || waited >= handoverWaitMax {
		t.Errorf("requests for 300 ms: waited %v, want them quiet for %v first", waited, handoverQuiet)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if waited := awaitHandover(ctx, time.Minute, never); waited >= time.Minute {
		t.Errorf("a shutdown bound of 50ms: waited %v", waited)
	}
}
