package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	// cut, when set, loses every message without a word: a data plane
	// cut while membership still sees every node alive.
	cut atomic.Bool
	// tap, when set, sees every message before it is carried.
	tap func(from, to actors.Address, msg actors.Message)
}

func (r *loopRemote) Send(from, to actors.Address, msg actors.Message) {
	r.sent.Add(1)
	if r.tap != nil {
		r.tap(from, to, msg)
	}
	if r.cut.Load() {
		return
	}
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
	model := ownedBy("b", "a", "b")
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

// TestClusterRestartedFrontIDs: a node restarted under its name (a new
// process, at a higher incarnation) submits under IDs its previous
// process never used: the owner's batcher may still hold the old
// process's requests, and a reply to one of them (which the data plane
// may deliver to the new process) must not answer a new request. Seen
// to fail with the fronts' IDs drawn from their life in the process
// alone: both processes' first Submits carried the same IDs.
func TestClusterRestartedFrontIDs(t *testing.T) {
	model := ownedBy("a", "a", "b")
	r := &loopRemote{nodes: map[string]*engine.Engine{}}
	var mu sync.Mutex
	ids := map[uint64]uint64{} // submission ID → b's incarnation
	var inc atomic.Uint64
	r.tap = func(from, to actors.Address, msg actors.Message) {
		if m, ok := msg.(actors.Submit); ok && from.Node == "b" {
			mu.Lock()
			defer mu.Unlock()
			if prev, seen := ids[m.Req.ID]; seen && prev != inc.Load() {
				t.Errorf("submission ID %d used by b at incarnation %d and again at %d", m.Req.ID, prev, inc.Load())
			}
			ids[m.Req.ID] = inc.Load()
		}
	}
	ca := clusterConfig("a", r)
	ca.Device.Models = []string{model}
	a := start(t, ca)
	r.add(a, "a")
	ctx := context.Background()
	for life := uint64(1); life <= 2; life++ {
		inc.Store(life)
		cb := clusterConfig("b", r)
		cb.Device.Models = []string{model}
		cb.Cluster.Incarnation = life
		b := start(t, cb)
		r.add(b, "b")
		ub := member.Update{Node: "b", Inc: life, Kind: member.Alive, Models: model}
		a.Member(ub)
		b.Member(member.Update{Node: "a", Inc: 1, Kind: member.Alive, Models: model})
		for i := range 10 {
			in := fmt.Sprintf("life-%d-%d", life, i)
			rep, err := b.Do(ctx, actors.Request{Model: model, Version: "v1", Tenant: "t", Input: in})
			if err != nil || rep.Outcome != actors.Completed || rep.Output != actors.EmulatedOutput(model, rep.Version, in) {
				t.Fatalf("life %d, request %d: %v %q (%s), err %v", life, i, rep.Outcome, rep.Output, rep.Err, err)
			}
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		a.Member(member.Update{Node: "b", Inc: life, Kind: member.Dead})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) < 20 {
		t.Fatalf("%d Submits from b seen: want its 20 requests at a, the owner", len(ids))
	}
}

// TestClusterBatcherRestart: the owner's batcher panics while it queues
// requests from its own front and another node's; supervision restarts it
// empty. Every request is resubmitted to the fresh batcher (the fronts,
// here and on the other node, learn of its new life) and completes, once,
// with its own output; none waits for its deadline. One device at 100 ms
// and batches of one keep requests queued. Seen to fail without the
// batcher's notice to the fronts: the queued requests are answered
// Expired at their deadline plus grace.
func TestClusterBatcherRestart(t *testing.T) {
	model := ownedBy("b", "a", "b")
	a, b := slowPair(t, model)

	restartQueued(t, a, b, model)
	sa, sb := stats(t, a), stats(t, b)
	if sa.Resubmitted == 0 || sb.Resubmitted == 0 || sa.Unanswered+sb.Unanswered != 0 {
		t.Errorf("a resubmitted %d, b %d, expired %d: want both fronts to resubmit, none expired", sa.Resubmitted, sb.Resubmitted, sa.Unanswered+sb.Unanswered)
	}
}

// TestClusterForwarded: ClusterConfig.Forwarded times each request a
// front sends to another node's batcher once, when its reply comes back,
// and none that the node batches itself; the whole trip includes the
// owner's part.
func TestClusterForwarded(t *testing.T) {
	models := map[string]string{} // owner → a model it owns
	for i := 0; len(models) < 2; i++ {
		m := fmt.Sprintf("m%d", i)
		if o, _ := member.Owner(m, []string{"a", "b"}); models[o] == "" {
			models[o] = m
		}
	}
	type obs struct{ total, atOwner time.Duration }
	var mu sync.Mutex
	var seen []obs
	r := &loopRemote{nodes: map[string]*engine.Engine{}}
	ca, cb := clusterConfig("a", r), clusterConfig("b", r)
	ca.Device.Models, cb.Device.Models = nil, nil // every node holds every model
	ca.Cluster.Forwarded = func(total, atOwner time.Duration) {
		mu.Lock()
		seen = append(seen, obs{total, atOwner})
		mu.Unlock()
	}
	a, b := start(t, ca), start(t, cb)
	r.add(a, "a")
	r.add(b, "b")
	a.Member(member.Update{Node: "b", Inc: 1, Kind: member.Alive})
	b.Member(member.Update{Node: "a", Inc: 1, Kind: member.Alive})
	const n = 20
	ctx := context.Background()
	for i := range n {
		for _, owner := range []string{"a", "b"} {
			in := fmt.Sprintf("in-%d", i)
			rep, err := a.Do(ctx, actors.Request{Model: models[owner], Version: "v1", Tenant: "t", Input: in})
			if err != nil || rep.Outcome != actors.Completed {
				t.Fatalf("%s at a: %v (%s), err %v", models[owner], rep.Outcome, rep.Err, err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("%d forwarded requests timed, want %d (those for b's model only)", len(seen), n)
	}
	for i, o := range seen {
		if o.atOwner <= 0 || o.total < o.atOwner {
			t.Errorf("timing %d: total %v, at the owner %v: want 0 < at the owner <= total", i, o.total, o.atOwner)
		}
	}
}

// ownedBy is a model name the rendezvous of nodes gives to node.
func ownedBy(node string, nodes ...string) string {
	for i := 0; ; i++ {
		m := fmt.Sprintf("m%d", i)
		if o, _ := member.Owner(m, nodes); o == node {
			return m
		}
	}
}

// doAll runs n requests for model at e at once, each bounded by 10 s, and
// returns their replies and errors.
func doAll(e *engine.Engine, model string, n int) ([]actors.Reply, []error) {
	reps, errs := make([]actors.Reply, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			reps[i], errs[i] = e.Do(ctx, actors.Request{Model: model, Version: "v1", Tenant: "t", Input: fmt.Sprintf("in-%d", i)})
		})
	}
	wg.Wait()
	return reps, errs
}

// TestClusterRemoteBatchLost: the data plane loses, without a word, a
// batch the owner sent to the other node's device (and anything that
// device would send back) while membership sees both alive. The owner's
// batcher takes the batch as undeliverable once it is well past the
// device's watchdog and runs it on its own device: every request
// completes. Seen to fail without the bound (remoteBatchCheck): the
// requests on the lost batch wait past their callers' 10 s.
func TestClusterRemoteBatchLost(t *testing.T) {
	model := ownedBy("a", "a", "b")
	r := &loopRemote{nodes: map[string]*engine.Engine{}}
	config := func(node string) engine.Config {
		c := clusterConfig(node, r)
		c.Device.Models = []string{model}
		c.Batcher.BatchMax = 1
		c.Batcher.Latency = actors.FixedLatency(100 * time.Millisecond)
		c.Device.Latency = c.Batcher.Latency
		return c
	}
	a, b := start(t, config("a")), start(t, config("b"))
	r.add(a, "a")
	r.add(b, "b")
	a.Member(member.Update{Node: "b", Inc: 1, Kind: member.Alive, Models: model})
	b.Member(member.Update{Node: "a", Inc: 1, Kind: member.Alive, Models: model})
	for end := time.Now().Add(waitMax); stats(t, a).Batcher.Devices < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("b's device never announced itself to a")
		}
	}
	r.cut.Store(true)
	reps, errs := doAll(a, model, 6)
	for i := range reps {
		if errs[i] != nil || reps[i].Outcome != actors.Completed {
			t.Errorf("request %d: %v (%s), err %v: want completed", i, reps[i].Outcome, reps[i].Err, errs[i])
		}
	}
}

// TestClusterPeerDown: the data plane loses every message to and from b,
// the owner, while membership sees it alive; when the data plane reports
// its stream to b broken (Engine.PeerDown), a's front resubmits what it
// had placed at b to the next owner, itself, and every request completes.
// Seen to fail without PeerDown: they wait past their callers' 10 s.
func TestClusterPeerDown(t *testing.T) {
	model := ownedBy("b", "a", "b")
	r := &loopRemote{nodes: map[string]*engine.Engine{}}
	ca, cb := clusterConfig("a", r), clusterConfig("b", r)
	ca.Device.Models, cb.Device.Models = []string{model}, []string{model}
	a, b := start(t, ca), start(t, cb)
	r.add(a, "a")
	r.add(b, "b")
	a.Member(member.Update{Node: "b", Inc: 1, Kind: member.Alive, Models: model})
	b.Member(member.Update{Node: "a", Inc: 1, Kind: member.Alive, Models: model})
	r.cut.Store(true)
	go func() {
		// Once the requests are in flight: the stream breaks.
		for end := time.Now().Add(waitMax); time.Now().Before(end); time.Sleep(time.Millisecond) {
			if s, err := a.Stats(context.Background()); err == nil && s.InFlight >= 6 {
				break
			}
		}
		a.PeerDown("b")
	}()
	reps, errs := doAll(a, model, 6)
	for i := range reps {
		if errs[i] != nil || reps[i].Outcome != actors.Completed || reps[i].Device.Node != "a" {
			t.Errorf("request %d: %v on %v (%s), err %v: want completed on a", i, reps[i].Outcome, reps[i].Device, reps[i].Err, errs[i])
		}
	}
}

// restartQueued sends 6 requests for model through each of a's and b's
// fronts, waits until b's batcher (the owner's) queues 6 of them, makes it
// panic (supervision restarts it), and checks that every request
// completed, once, with its own output.
func restartQueued(t *testing.T, a, b *engine.Engine, model string) {
	t.Helper()
	const n = 6 // per front
	type answer struct {
		rep actors.Reply
		err error
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[string]*answer{}
	for _, e := range []struct {
		name string
		eng  *engine.Engine
	}{{"a", a}, {"b", b}} {
		for i := range n {
			in := fmt.Sprintf("%s-%d", e.name, i)
			ans := &answer{}
			answers[in] = ans
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				rep, err := e.eng.Do(ctx, actors.Request{Model: model, Version: "v1", Tenant: "t", Input: in})
				mu.Lock()
				ans.rep, ans.err = rep, err
				mu.Unlock()
			})
		}
	}
	for end := time.Now().Add(waitMax); stats(t, b).Batcher.Queued < n; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("gave up waiting for requests queued at b")
		}
	}
	b.Deliver(actors.Address{}, b.Batcher(), poison{})
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for in, ans := range answers {
		if ans.err != nil || ans.rep.Outcome != actors.Completed || ans.rep.Output != actors.EmulatedOutput(model, ans.rep.Version, in) {
			t.Errorf("%s: %v %q (%s), err %v: want completed with its own output", in, ans.rep.Outcome, ans.rep.Output, ans.rep.Err, ans.err)
		}
	}
}

// slowPair is nodes a and b, each of one device for model at 100 ms a
// batch of one, alive to each other at incarnation 1: requests queue at
// the owner, and a restart or a death finds them there. The SLO is 6 s
// and the reply grace 1 s.
func slowPair(t *testing.T, model string) (a, b *engine.Engine) {
	t.Helper()
	r := &loopRemote{nodes: map[string]*engine.Engine{}}
	config := func(node string) engine.Config {
		c := clusterConfig(node, r)
		c.Device.Models = []string{model}
		c.Batcher.BatchMax = 1
		c.Batcher.SLO = 6 * time.Second
		c.Batcher.Latency = actors.FixedLatency(100 * time.Millisecond)
		c.Device.Latency = c.Batcher.Latency
		c.ReplyGrace = time.Second
		return c
	}
	a, b = start(t, config("a")), start(t, config("b"))
	r.add(a, "a")
	r.add(b, "b")
	a.Member(member.Update{Node: "b", Inc: 1, Kind: member.Alive, Models: model})
	b.Member(member.Update{Node: "a", Inc: 1, Kind: member.Alive, Models: model})
	return a, b
}

// TestClusterSplit: in a cluster whose registry names its models, each
// node runs an accumulator per model (the split, as sim/cluster runs a
// node), and a model's requests, from every node's front, batch at that
// model's accumulator on its owner: here ma at a's and mb at b's, while
// each node's accumulator of the model it does not own batches nothing.
// Every request completes once with its own output. Seen to fail with one
// accumulator per node: a has one accumulator, not two.
func TestClusterSplit(t *testing.T) {
	ma, mb := ownedBy("a", "a", "b"), ownedBy("b", "a", "b")
	r := &loopRemote{nodes: map[string]*engine.Engine{}}
	ca, cb := clusterConfig("a", r), clusterConfig("b", r)
	for _, c := range []*engine.Config{&ca, &cb} {
		c.Device.Models = []string{ma, mb}
		c.Batcher.Models = []actors.ModelConfig{
			{Name: ma, Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}},
			{Name: mb, Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}},
		}
	}
	a, b := start(t, ca), start(t, cb)
	r.add(a, "a")
	r.add(b, "b")
	models := member.JoinModels([]string{ma, mb})
	a.Member(member.Update{Node: "b", Inc: 1, Kind: member.Alive, Models: models})
	b.Member(member.Update{Node: "a", Inc: 1, Kind: member.Alive, Models: models})
	if n := len(a.Accumulators()); n != 2 {
		t.Fatalf("a runs %d accumulators, want one per model (2)", n)
	}

	for _, e := range []*engine.Engine{a, b} {
		for _, m := range []string{ma, mb} {
			reps, errs := doAll(e, m, 20)
			for i, rep := range reps {
				in := fmt.Sprintf("in-%d", i)
				if errs[i] != nil || rep.Outcome != actors.Completed || rep.Output != actors.EmulatedOutput(m, rep.Version, in) {
					t.Fatalf("%s at a front: %v %q (%s), err %v", m, rep.Outcome, rep.Output, rep.Err, errs[i])
				}
			}
		}
	}
	ctx := context.Background()
	for _, c := range []struct {
		e          *engine.Engine
		node       string
		own, other int // the accumulators (in the registry's order) of the model the node owns and the other
	}{{a, "a", 0, 1}, {b, "b", 1, 0}} {
		own, err := engine.AccumulatorStats(ctx, c.e, c.own)
		if err != nil {
			t.Fatal(err)
		}
		other, err := engine.AccumulatorStats(ctx, c.e, c.other)
		if err != nil {
			t.Fatal(err)
		}
		if own.Batches == 0 || other.Batches != 0 {
			t.Errorf("%s: %d batches at the accumulator of the model it owns, %d at the other's: want some and none", c.node, own.Batches, other.Batches)
		}
	}
}
