package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/cluster/transport"
	"github.com/batchd/batchd/engine"
)

// liveNode is one engine of a cluster in this process: an engine in
// cluster mode and its data plane on loopback.
type liveNode struct {
	name string
	eng  *engine.Engine
	tr   *transport.Transport
	up   member.Update
}

// startLiveNode starts node name's transport (key is the cluster's) and
// engine, with devices devices that hold model; tune, if any, changes the
// engine's config last.
func startLiveNode(t testing.TB, name string, key []byte, model string, devices int, tune ...func(*engine.Config)) *liveNode {
	t.Helper()
	var eng atomic.Pointer[engine.Engine]
	tr, err := transport.New(transport.Config{Node: name, Listen: "127.0.0.1:0", Key: key},
		func(from, to actors.Address, msg actors.Message) {
			if e := eng.Load(); e != nil {
				e.Deliver(from, to, msg)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	c := engine.DefaultConfig()
	c.Runtime = engine.LinkedRuntime
	c.Node, c.Devices = name, devices
	c.Batcher.BatchMax = 200
	c.Batcher.SLO = 5 * time.Second
	c.Batcher.Latency = actors.FixedLatency(50 * time.Millisecond)
	c.Device.Latency = actors.FixedLatency(50 * time.Millisecond)
	c.Device.Models = []string{model}
	c.Cluster = &engine.ClusterConfig{Incarnation: 1, Remote: tr}
	for _, f := range tune {
		f(&c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	e, err := engine.New(ctx, c)
	if err != nil {
		_ = tr.Close()
		t.Fatal(err)
	}
	eng.Store(e)
	n := &liveNode{name: name, eng: e, tr: tr,
		up: member.Update{Node: name, Inc: 1, Kind: member.Alive, Models: member.JoinModels(c.Device.Models)}}
	t.Cleanup(func() { n.stop(t) })
	return n
}

// stop closes the node's engine, then its transport; again is a no-op.
func (n *liveNode) stop(t testing.TB) {
	if err := n.eng.Close(); err != nil {
		t.Errorf("%s: close engine: %v", n.name, err)
	}
	if err := n.tr.Close(); err != nil {
		t.Errorf("%s: close transport: %v", n.name, err)
	}
}

// meet tells n of other, as membership would: its data plane first, then
// its actors.
func (n *liveNode) meet(t testing.TB, other *liveNode, u member.Update) {
	t.Helper()
	if err := n.tr.Apply(u, other.tr.Addr()); err != nil {
		t.Fatal(err)
	}
	n.eng.Member(u)
}

// answers collects the one answer of each request submitted.
type answers struct {
	mu    sync.Mutex
	calls map[string]int // by node/id: done calls
	reps  map[string]actors.Reply
	wg    sync.WaitGroup
}

func newAnswers() *answers {
	return &answers{calls: map[string]int{}, reps: map[string]actors.Reply{}}
}

// submit sends a request for model with input to n's front door.
func (a *answers) submit(n *liveNode, model, input string) {
	a.wg.Add(1)
	var once atomic.Bool
	n.eng.Submit(actors.Request{Model: model, Version: "v1", Tenant: "t", Input: input}, func(r actors.Reply, err error) {
		a.mu.Lock()
		a.calls[n.name+"/"+input]++
		if err == nil {
			a.reps[n.name+"/"+input] = r
		}
		a.mu.Unlock()
		if once.CompareAndSwap(false, true) {
			a.wg.Done()
		}
	})
}

// wait waits for every request's answer and checks each was answered once,
// Completed, with its own input's output.
func (a *answers) wait(t *testing.T, model string, inputs map[string]string) {
	t.Helper()
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitMax):
		t.Fatalf("requests unanswered after %v", waitMax)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, input := range inputs {
		if a.calls[key] != 1 {
			t.Errorf("%s: answered %d times, want once", key, a.calls[key])
		}
		r, ok := a.reps[key]
		switch {
		case !ok:
			t.Errorf("%s: answered with an engine error", key)
		case r.Outcome != actors.Completed:
			t.Errorf("%s: %v (%s %s), want completed", key, r.Outcome, r.Reason, r.Err)
		case r.Output != actors.EmulatedOutput(model, r.Version, input):
			t.Errorf("%s: output %q is not its input's", key, r.Output)
		}
	}
}

// TestEngineClusterBatchesAcrossNodes runs two engines in cluster mode in
// one process, each with its own data plane on loopback and the same key:
// requests sent to node a's front door for a model node b owns are
// batched at b together with b's own requests and answered at a with
// their own outputs; when b stops, ownership moves to a and every request
// accepted is answered, once, completed.
func TestEngineClusterBatchesAcrossNodes(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	model := ""
	for i := 0; model == ""; i++ {
		if m := fmt.Sprintf("m%d", i); must(member.Owner(m, []string{"a", "b"})) == "b" {
			model = m
		}
	}
	a := startLiveNode(t, "a", key, model, 1)
	b := startLiveNode(t, "b", key, model, 1)
	a.meet(t, b, b.up)
	b.meet(t, a, a.up)

	// Both front doors at once: b owns the model, so a's requests cross.
	const perFront = 60
	ans := newAnswers()
	inputs := map[string]string{}
	for i := range perFront {
		for _, n := range []*liveNode{a, b} {
			in := fmt.Sprintf("%s-in-%d", n.name, i)
			inputs[n.name+"/"+in] = in
			ans.submit(n, model, in)
		}
	}
	ans.wait(t, model, inputs)

	// A batch (one device, one dispatch time) that holds requests of both
	// fronts, bigger than one front alone sent.
	type batch struct {
		dev      actors.Address
		dispatch time.Duration
	}
	from := map[batch]map[string]bool{}
	largest := 0
	for k, r := range ans.reps {
		bt := batch{r.Device, r.Dispatch}
		if from[bt] == nil {
			from[bt] = map[string]bool{}
		}
		from[bt][k[:1]] = true
		largest = max(largest, r.BatchSize)
	}
	mixed := 0
	for _, f := range from {
		if f["a"] && f["b"] {
			mixed++
		}
	}
	t.Logf("%d requests from two fronts in %d batches, %d of them mixed; the largest of %d", len(ans.reps), len(from), mixed, largest)
	if mixed == 0 || largest <= perFront {
		t.Errorf("%d batches of %d hold requests from both fronts, the largest of %d: want at least one, larger than one front's %d", mixed, len(from), largest, perFront)
	}
	sa, err := a.eng.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sa.Batcher.Batches != 0 {
		t.Errorf("a's batcher ran %d batches of a model b owns, want 0", sa.Batcher.Batches)
	}

	// b stops with a's requests in flight: a is told b died, its front
	// sends what b held to the new owner, a itself.
	ans2 := newAnswers()
	inputs2 := map[string]string{}
	for i := range perFront {
		in := fmt.Sprintf("a-late-%d", i)
		inputs2["a/"+in] = in
		ans2.submit(a, model, in)
	}
	// Stopped once b holds some of them (queued, or in a batch).
	for deadline := time.Now().Add(waitMax); ; {
		sb, err := b.eng.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if sb.Batcher.Held > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never held a's requests")
		}
		time.Sleep(time.Millisecond)
	}
	b.stop(t)
	a.meet(t, b, member.Update{Node: "b", Inc: 1, Kind: member.Dead})
	ans2.wait(t, model, inputs2)
	byNode := map[string]int{}
	for _, r := range ans2.reps {
		byNode[r.Device.Node]++
	}
	sa, err = a.eng.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after b stopped: %d answered by b's device, %d by a's; a's front resubmitted %d, dropped %d duplicates", byNode["b"], byNode["a"], sa.Resubmitted, sa.Duplicate)
	if sa.Resubmitted == 0 {
		t.Errorf("a's front resubmitted nothing when b died: b held none of its requests")
	}

	// The model is a's now: a's device runs what comes after.
	r, err := a.eng.Do(context.Background(), actors.Request{Model: model, Version: "v1", Tenant: "t", Input: "after"})
	if err != nil || r.Outcome != actors.Completed || r.Device.Node != "a" {
		t.Errorf("after b died: %v on %v (%s), err %v: want completed on a", r.Outcome, r.Device, r.Err, err)
	}
}

func must(owner string, ok bool) string {
	if !ok {
		panic("no owner among two members")
	}
	return owner
}
