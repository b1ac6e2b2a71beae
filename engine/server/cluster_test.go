package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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
