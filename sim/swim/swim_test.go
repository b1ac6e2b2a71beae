package swim

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/batchd/batchd/actors/member"
	"pgregory.net/rapid"
)

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%02d", i)
	}
	return out
}

func mustRun(t testing.TB, cfg Config) *Result {
	t.Helper()
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSameSeedSameOutput(t *testing.T) {
	cfg := DefaultConfig(nodeNames(12))
	cfg.Loss, cfg.Until, cfg.Seed = 0.05, 5*time.Minute, 7
	cfg.Events = []Event{
		{At: 20 * time.Second, Kind: Crash, Node: "n03"},
		{At: 70 * time.Second, Kind: Restart, Node: "n03"},
		{At: 90 * time.Second, Kind: Partition, A: []string{"n00", "n01"}, B: []string{"n05", "n06", "n07"}, Until: 150 * time.Second},
		{At: 100 * time.Second, Kind: Leave, Node: "n09"},
	}
	a, b := mustRun(t, cfg), mustRun(t, cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs of one config differ")
	}
	if a.Stats.FalseSuspicions == 0 || a.Stats.Refutes == 0 {
		t.Errorf("5%% loss for 5 minutes raised no false suspicion or refute: %+v", a.Stats)
	}
	cfg.Seed = 8
	if c := mustRun(t, cfg); reflect.DeepEqual(a.Deliveries, c.Deliveries) {
		t.Error("seeds 7 and 8 gave the same deliveries")
	}
}

// TestQuietCluster: without faults nothing is delivered after the initial
// joins, and every node holds every other alive at incarnation 1.
func TestQuietCluster(t *testing.T) {
	cfg := DefaultConfig(nodeNames(5))
	cfg.Until = 3 * time.Minute
	r := mustRun(t, cfg)
	if len(r.Deliveries) != 25 || r.Stats.ProbeFailures != 0 || r.Stats.Probes < 5*170 {
		t.Errorf("%d deliveries (want 25, the joins), stats %+v", len(r.Deliveries), r.Stats)
	}
	for _, d := range r.Deliveries {
		if d.At != 0 || d.Update.Kind != member.Alive || d.Update.Inc != 1 {
			t.Errorf("delivery %+v", d)
		}
	}
	for _, n := range r.Nodes {
		if !slices.Equal(n.Live, cfg.Nodes) {
			t.Errorf("%s: live %v", n.Name, n.Live)
		}
	}
}

func TestConfigRejects(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"no nodes":       func(c *Config) { c.Nodes = nil },
		"duplicate":      func(c *Config) { c.Nodes = []string{"a", "a"} },
		"loss 1":         func(c *Config) { c.Loss = 1 },
		"zero interval":  func(c *Config) { c.ProbeInterval = 0 },
		"unknown node":   func(c *Config) { c.Events = []Event{{Kind: Crash, Node: "zz"}} },
		"empty side":     func(c *Config) { c.Events = []Event{{Kind: Partition, A: []string{"a"}, Until: time.Second}} },
		"horizon":        func(c *Config) { c.Until = MaxHorizon + 1 },
		"fanout too big": func(c *Config) { c.GossipFanout = MaxFanout + 1 },
	} {
		cfg := DefaultConfig([]string{"a", "b"})
		mut(&cfg)
		if _, err := Run(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	cfg := DefaultConfig(nodeNames(20))
	cfg.MaxDeliveries = 100
	if _, err := Run(cfg); err == nil {
		t.Error("400 initial deliveries under a limit of 100: no error")
	}
}

// truth is the true state of the cluster, rebuilt from the events alone
// (not from the model): each node's up intervals, with the model's no-op
// rules (crash of a down node, restart of an up or leaving one, leave of a
// down or leaving one) and a leave's stop LeaveGrace later.
type truth struct {
	up map[string][][2]time.Duration // [from, to); to = -1 while up at the end
}

func buildTruth(cfg Config) truth {
	type st struct {
		up, leaving bool
		since, stop time.Duration
	}
	evs := slices.Clone(cfg.Events)
	slices.SortStableFunc(evs, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	tr := truth{up: map[string][][2]time.Duration{}}
	s := map[string]*st{}
	for _, n := range cfg.Nodes {
		s[n] = &st{up: true}
	}
	down := func(n string, at time.Duration) {
		tr.up[n] = append(tr.up[n], [2]time.Duration{s[n].since, at})
		*s[n] = st{}
	}
	settle := func(t time.Duration) { // leaves done strictly before t
		for _, n := range cfg.Nodes {
			if x := s[n]; x.leaving && x.stop < t {
				down(n, x.stop)
			}
		}
	}
	for _, e := range evs {
		if e.At >= cfg.Until {
			break
		}
		settle(e.At)
		x := s[e.Node]
		switch e.Kind {
		case Crash:
			if x.up {
				down(e.Node, e.At)
			}
		case Restart:
			if !x.up {
				*x = st{up: true, since: e.At}
			}
		case Leave:
			if x.up && !x.leaving {
				x.leaving, x.stop = true, e.At+cfg.LeaveGrace
			}
		}
	}
	settle(cfg.Until)
	for _, n := range cfg.Nodes {
		if s[n].up {
			tr.up[n] = append(tr.up[n], [2]time.Duration{s[n].since, -1})
		}
	}
	return tr
}

// upThrough reports whether node n is up during all of [a, b].
func (tr truth) upThrough(n string, a, b time.Duration) bool {
	for _, iv := range tr.up[n] {
		if iv[0] <= a && (iv[1] < 0 || iv[1] > b) {
			return true
		}
	}
	return false
}

// downThrough reports whether node n is down during all of [a, b].
func (tr truth) downThrough(n string, a, b time.Duration) bool {
	for _, iv := range tr.up[n] {
		if iv[0] <= b && (iv[1] < 0 || iv[1] > a) {
			return false
		}
	}
	return true
}

// genConfig draws a small cluster and a random fault history: crashes,
// restarts, leaves and partitions (symmetric or one way) in the first
// three minutes, loss until the last fault, and a horizon past SettleBound.
func genConfig(t *rapid.T) Config {
	n := rapid.IntRange(2, 7).Draw(t, "nodes")
	cfg := DefaultConfig(nodeNames(n))
	cfg.Seed = rapid.Uint64().Draw(t, "seed")
	// Shorter anti-entropy than the LAN defaults keeps the runs short.
	cfg.PushPullInterval, cfg.ReconnectInterval = 10*time.Second, 10*time.Second
	cfg.Loss = rapid.SampledFrom([]float64{0, 0.01, 0.05, 0.2}).Draw(t, "loss")
	at := func(label string) time.Duration {
		return time.Duration(rapid.IntRange(0, 180_000).Draw(t, label)) * time.Millisecond
	}
	side := func(label string) []string {
		return rapid.SliceOfNDistinct(rapid.SampledFrom(cfg.Nodes), 1, n, rapid.ID[string]).Draw(t, label)
	}
	nEvents := rapid.IntRange(0, 12).Draw(t, "events")
	for i := range nEvents {
		k := EventKind(rapid.IntRange(int(Crash), int(Partition)).Draw(t, fmt.Sprintf("kind%d", i)))
		e := Event{At: at(fmt.Sprintf("at%d", i)), Kind: k}
		if k == Partition {
			e.A = side(fmt.Sprintf("a%d", i))
			for _, m := range cfg.Nodes {
				if !slices.Contains(e.A, m) {
					e.B = append(e.B, m)
				}
			}
			if len(e.B) == 0 || rapid.Bool().Draw(t, fmt.Sprintf("sides%d", i)) {
				e.B = side(fmt.Sprintf("b%d", i)) // any two sets, not a split
			}
			e.Until = e.At + time.Duration(rapid.IntRange(1, 120_000).Draw(t, fmt.Sprintf("len%d", i)))*time.Millisecond
			e.OneWay = rapid.Bool().Draw(t, fmt.Sprintf("oneway%d", i))
		} else {
			e.Node = rapid.SampledFrom(cfg.Nodes).Draw(t, fmt.Sprintf("node%d", i))
		}
		cfg.Events = append(cfg.Events, e)
	}
	cfg.LossUntil = 1 // set below: loss stops with the last fault
	cfg.LossUntil = max(cfg.QuietAt(), time.Millisecond)
	cfg.Until = cfg.QuietAt() + cfg.SettleBound()
	return cfg
}

// TestPropertyConverges is property (a), liveness: once faults stop
// (events, partitions and loss), every node that is up holds, by
// SettleBound, exactly the up nodes live, each at that node's own
// incarnation, and the down nodes not live.
func TestPropertyConverges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		r, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tr := buildTruth(cfg)
		var upNow []string
		inc := map[string]uint64{}
		for _, n := range r.Nodes {
			if n.Up != tr.upThrough(n.Name, cfg.Until-1, cfg.Until-1) {
				t.Fatalf("node %s: model says up=%v, the events say otherwise", n.Name, n.Up)
			}
			if n.Up {
				upNow = append(upNow, n.Name)
			}
			inc[n.Name] = n.Inc
		}
		for _, n := range r.Nodes {
			if !n.Up {
				continue
			}
			if !slices.Equal(n.Live, upNow) {
				t.Fatalf("at %v (%v after the last fault) %s holds %v live; up: %v", cfg.Until, cfg.Until-cfg.QuietAt(), n.Name, n.Live, upNow)
			}
			for _, u := range n.Members {
				if u.Kind.Live() && u.Inc != inc[u.Node] {
					t.Fatalf("%s holds %v; the node is at incarnation %d", n.Name, u, inc[u.Node])
				}
			}
		}
	})
}

// TestPropertyCrashDetected is property (b): when a node crashes and
// stays down for DetectionBound, every node that held it live and stays up
// (no restart, no leave) from a bound before the crash to a bound after it
// declares it dead (or left) within the bound; and if no partition overlaps the bound before or after the crash,
// it still holds it not live at the bound. (With a partition, an observer
// cut off from the rest may hold the crashed node dead at an old
// incarnation, hear of its last one from anti-entropy after the heal, and
// suspect it once more for a suspicion timeout: SWIM's behaviour, not a
// bug. Property (a) checks that it ends.)
func TestPropertyCrashDetected(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		r, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tr := buildTruth(cfg)
		bound := cfg.DetectionBound()
		for _, e := range cfg.Events {
			end := e.At + bound
			if e.Kind != Crash || end >= cfg.Until || !tr.downThrough(e.Node, e.At, end) {
				continue
			}
			calm := !slices.ContainsFunc(cfg.Events, func(p Event) bool {
				return p.Kind == Partition && p.At <= end && p.Until > e.At-bound
			})
			for _, o := range cfg.Nodes {
				if o == e.Node || !tr.upThrough(o, e.At-bound, end) {
					continue
				}
				if st, ok := stateAt(r, o, e.Node, e.At); ok && st.Kind.Live() && !slices.ContainsFunc(r.Deliveries, func(d Delivery) bool {
					return d.Observer == o && d.Update.Node == e.Node && !d.Update.Kind.Live() && d.At >= e.At && d.At <= end
				}) {
					t.Fatalf("%s crashed at %v; %s held it %v and did not declare it dead within %v", e.Node, e.At, o, st, bound)
				}
				if st, ok := stateAt(r, o, e.Node, end); calm && ok && st.Kind.Live() {
					t.Fatalf("%s crashed at %v; %v later %s still holds %v", e.Node, e.At, bound, o, st)
				}
			}
		}
	})
}

// stateAt replays observer o's deliveries (its life at time at) up to at
// and returns what it holds about node x.
func stateAt(r *Result, o, x string, at time.Duration) (member.Update, bool) {
	var cur member.Update
	var ok bool
	life := -1
	for _, d := range r.Deliveries {
		if d.At > at {
			break
		}
		if d.Observer != o {
			continue
		}
		if d.Life != life {
			life, ok = d.Life, false // a new life starts from an empty view
		}
		if d.Update.Node == x {
			cur, ok = d.Update, true
		}
	}
	return cur, ok
}

// TestPropertyRestartNewIncarnation is property (c): a restarted node
// comes back at an incarnation above every incarnation of it anyone was
// ever told before; no observer's view of a node ever moves back (so an
// old incarnation, once superseded, is never resurrected); and a node up
// at the end is held alive at its new incarnation (property (a) checks
// that every view agrees).
func TestPropertyRestartNewIncarnation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		r, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		type key struct {
			o    string
			life int
			x    string
		}
		last := map[key]member.Update{}
		seenSelf := map[key]bool{}
		maxInc := map[string]uint64{} // greatest incarnation told about x so far
		for _, d := range r.Deliveries {
			u := d.Update
			k := key{d.Observer, d.Life, u.Node}
			if prev, ok := last[k]; ok && !u.Overrides(prev) {
				t.Fatalf("at %v %s (life %d) moved %s back from %v to %v", d.At, d.Observer, d.Life, u.Node, prev, u)
			}
			last[k] = u
			if d.Observer == u.Node && !seenSelf[k] {
				// A node's first word about itself in a life: its start.
				seenSelf[k] = true
				if d.Life > 0 && (u.Kind != member.Alive || u.Inc <= maxInc[u.Node]) {
					t.Fatalf("at %v %s restarted as %v; incarnation %d was told before", d.At, u.Node, u, maxInc[u.Node])
				}
			}
			maxInc[u.Node] = max(maxInc[u.Node], u.Inc)
		}
		for _, n := range r.Nodes {
			if n.Up {
				if st, _ := stateAt(r, n.Name, n.Name, cfg.Until); st != (member.Update{Node: n.Name, Inc: n.Inc, Kind: member.Alive}) {
					t.Fatalf("%s holds itself as %v; its incarnation is %d", n.Name, st, n.Inc)
				}
			}
		}
	})
}
