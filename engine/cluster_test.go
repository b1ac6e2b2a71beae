package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/engine"
)

// loopRemote is a data plane in one process: it hands every message to
// the engine of its node, and bounces one to an unknown node as the
// transport does. It counts what it carried.
type loopRemote struct {
	mu    sync.Mutex
	nodes map[string]*engine.Engine
	sent  atomic.Int64
}

func (r *loopRemote) Send(from, to actors.Address, msg actors.Message) {
	r.sent.Add(1)
	r.mu.Lock()
	dst, src := r.nodes[to.Node], r.nodes[from.Node]
	r.mu.Unlock()
	switch {
	case dst != nil:
		dst.Deliver(from, to, msg)
	case src != nil:
		if _, nested := msg.(actors.Undeliverable); !nested {
			src.Deliver(actors.Address{}, from, actors.Undeliverable{To: to, Msg: msg})
		}
	}
}

func (r *loopRemote) add(e *engine.Engine, node string) {
	r.mu.Lock()
	r.nodes[node] = e
	r.mu.Unlock()
}

func clusterConfig(node string, r *loopRemote) engine.Config {
	c := fastConfig()
	c.Node, c.Devices = node, 1
	c.Device.Models = []string{"m"}
	c.Cluster = &engine.ClusterConfig{Incarnation: 1, Remote: r}
	return c
}

func TestClusterConfigValidate(t *testing.T) {
	r := &loopRemote{nodes: map[string]*engine.Engine{}}
	for name, bad := range map[string]func(*engine.Config){
		"no node":          func(c *engine.Config) { c.Node = "" },
		"no incarnation":   func(c *engine.Config) { c.Cluster.Incarnation = 0 },
		"incarnation 2^31": func(c *engine.Config) { c.Cluster.Incarnation = 1 << 31 },
		"no remote":        func(c *engine.Config) { c.Cluster.Remote = nil },
	} {
		c := clusterConfig("a", r)
		if err := c.Validate(); err != nil {
			t.Fatalf("the good config: %v", err)
		}
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

// TestClusterLocalOwner: a cluster node that owns the model batches its
// own requests without the data plane: the hop is only for other nodes.
func TestClusterLocalOwner(t *testing.T) {
	r := &loopRemote{nodes: map[string]*engine.Engine{}}
	e := start(t, clusterConfig("a", r))
	r.add(e, "a")
	for i, rep := range doMany(t, e, 200, 8) {
		if rep.Outcome != actors.Completed || rep.Output != actors.EmulatedOutput("m", rep.Version, request(i).Input) {
			t.Fatalf("request %d: %v %q (%s)", i, rep.Outcome, rep.Output, rep.Err)
		}
	}
	if n := r.sent.Load(); n != 0 {
		t.Errorf("%d messages went to the data plane, want none: the node owns the model", n)
	}
}

// TestClusterTwoNodes: two engines joined by an in-process data plane
// (the real one, over loopback, is engine/server's test): a's requests
// for a model b owns run on b's batcher, their answers come back to a;
// when b dies, a owns the model and answers every request.
func TestClusterTwoNodes(t *testing.T) {
	model := ""
	for i := 0; model == ""; i++ {
		m := fmt.Sprintf("m%d", i)
		if o, _ := member.Owner(m, []string{"a", "b"}); o == "b" {
			model = m
		}
	}
	r := &loopRemote{nodes: map[string]*engine.Engine{}}
	ca, cb := clusterConfig("a", r), clusterConfig("b", r)
	ca.Device.Models, cb.Device.Models = []string{model}, []string{model}
	a, b := start(t, ca), start(t, cb)
	r.add(a, "a")
	r.add(b, "b")
	ua := member.Update{Node: "a", Inc: 1, Kind: member.Alive, Models: model}
	ub := member.Update{Node: "b", Inc: 1, Kind: member.Alive, Models: model}
	a.Member(ub)
	b.Member(ua)

	ctx := context.Background()
	for i := range 20 {
		in := fmt.Sprintf("in-%d", i)
		rep, err := a.Do(ctx, actors.Request{Model: model, Version: "v1", Tenant: "t", Input: in})
		if err != nil || rep.Outcome != actors.Completed || rep.Output != actors.EmulatedOutput(model, rep.Version, in) {
			t.Fatalf("request %d at a: %v %q (%s), err %v", i, rep.Outcome, rep.Output, rep.Err, err)
		}
	}
	sa, err := a.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sa.Batcher.Batches != 0 || sb.Batcher.Batches == 0 {
		t.Errorf("batches: a %d, b %d: want all at b, the model's owner", sa.Batcher.Batches, sb.Batcher.Batches)
	}

	// b dies: the model is a's.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	delete(r.nodes, "b")
	r.mu.Unlock()
	a.Member(member.Update{Node: "b", Inc: 1, Kind: member.Dead})
	rep, err := a.Do(ctx, actors.Request{Model: model, Version: "v1", Tenant: "t", Input: "after"})
	if err != nil || rep.Outcome != actors.Completed || rep.Device.Node != "a" {
		t.Errorf("after b died: %v on %v (%s), err %v: want completed on a", rep.Outcome, rep.Device, rep.Err, err)
	}
}
