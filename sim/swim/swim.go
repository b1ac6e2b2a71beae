package swim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/batchd/batchd/actors/member"
)

// Delivery is one membership message an observer's actors receive: at At,
// the observer's view accepted Update (an update its view ignored is not
// delivered). Life counts the observer's restarts: the actors of a new life
// start from an empty view.
type Delivery struct {
	At       time.Duration
	Observer string
	Life     int
	Update   member.Update
}

// Stats counts what the model did.
type Stats struct {
	Probes        int // probes sent
	ProbeFailures int // probes with no ack (each raises a suspicion)
	// FalseSuspicions are suspicions raised about a node that was up and
	// reachable from its prober both ways: loss alone caused them.
	FalseSuspicions int
	// Deaths are suspicion timeouts that declared a node dead; FalseDeaths
	// the ones about a node that was up.
	Deaths, FalseDeaths int
	Refutes             int // incarnation raises to refute a suspicion or death
	Packets, Lost       int // gossip packets sent, and dropped (loss or partition)
	PushPulls           int // state exchanges done (joins and reconnects included)
}

// NodeState is one node at the horizon.
type NodeState struct {
	Name string
	Up   bool
	Inc  uint64 // its own incarnation (its last life's, if down)
	Life int
	// Members is its view (empty when down), sorted by name; Live its live
	// members.
	Members []member.Update
	Live    []string
}

// Result is a run's output.
type Result struct {
	// Deliveries in the order they happen (time, then cause).
	Deliveries []Delivery
	Nodes      []NodeState
	Stats      Stats
}

// Timeline returns the deliveries to one observer, in order.
func (r *Result) Timeline(observer string) []Delivery {
	var out []Delivery
	for _, d := range r.Deliveries {
		if d.Observer == observer {
			out = append(out, d)
		}
	}
	return out
}

type evKind uint8

const (
	evTruth evKind = iota // Config.Events[arg]
	evPartitionEnd
	evLeaveDone
	evProbe
	evSuspectRaise   // target, inc: the probe's interval ended without an ack
	evSuspectTimeout // target, inc
	evGossip
	evPushPull
	evReconnect
	evRecv // ups arrive at node; arg 1: a push-pull's state
)

type event struct {
	at     time.Duration
	seq    uint64
	kind   evKind
	node   int32
	target int32
	life   int32
	arg    int32
	inc    uint64
	ups    []member.Update
}

type bcast struct {
	u    member.Update
	sent int
}

type node struct {
	name    string
	up      bool
	leaving bool
	life    int32
	inc     uint64
	view    *member.View
	since   []time.Duration // per node index: when this view last changed it
	probes  []int32         // this cycle's probe order
	probeAt int
	queue   []bcast
	rng     *rand.Rand
	cursor  int // reconnect and join round robin over node indices
}

type partition struct {
	id     int32 // its index in Config.Events
	a, b   []bool
	oneWay bool
}

type model struct {
	cfg    Config
	index  map[string]int32
	nodes  []node
	parts  []*partition // active
	heap   []event
	seq    uint64
	now    time.Duration
	net    *rand.Rand
	res    Result
	maxDel int
	err    error
}

// Run runs the model over cfg and returns every observer's timeline.
func Run(cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &model{cfg: cfg, index: make(map[string]int32, len(cfg.Nodes)), maxDel: cfg.MaxDeliveries}
	if m.maxDel == 0 {
		m.maxDel = DefaultMaxDeliveries
	}
	m.net = stream(cfg.Seed, "swim/net")
	m.nodes = make([]node, len(cfg.Nodes))
	for i, name := range cfg.Nodes {
		m.index[name] = int32(i)
		m.nodes[i] = node{name: name, rng: stream(cfg.Seed, "swim/node/"+name)}
	}
	for i := range m.nodes {
		n := &m.nodes[i]
		m.start(int32(i), 1)
		for j := range m.nodes {
			if j != i {
				m.accept(int32(i), member.Update{Node: m.nodes[j].name, Inc: 1, Kind: member.Alive}, false)
			}
		}
		n.queue = n.queue[:0] // a settled cluster: nothing left to gossip
	}
	for i, e := range cfg.Events {
		m.push(event{at: e.At, kind: evTruth, arg: int32(i)})
	}
	for len(m.heap) > 0 && m.err == nil {
		e := m.pop()
		if e.at >= cfg.Until {
			break
		}
		m.now = e.at
		m.handle(e)
	}
	if m.err != nil {
		return nil, m.err
	}
	for i := range m.nodes {
		n := &m.nodes[i]
		st := NodeState{Name: n.name, Up: n.up, Inc: n.inc, Life: int(n.life)}
		if n.up {
			st.Members = n.view.Members()
			st.Live = slices.Clone(n.view.Live())
		}
		m.res.Nodes = append(m.res.Nodes, st)
	}
	return &m.res, nil
}

// start brings node i up at incarnation inc with a view of itself alone and
// arms its periodic timers at random phases.
func (m *model) start(i int32, inc uint64) {
	n := &m.nodes[i]
	n.up, n.leaving, n.inc = true, false, inc
	n.view = member.NewView(len(m.nodes))
	n.since = make([]time.Duration, len(m.nodes))
	n.probes, n.probeAt, n.queue = n.probes[:0], 0, n.queue[:0]
	m.accept(i, member.Update{Node: n.name, Inc: inc, Kind: member.Alive}, true)
	phase := func(d time.Duration) time.Duration { return time.Duration(n.rng.Int64N(int64(d))) }
	m.push(event{at: m.now + phase(m.cfg.ProbeInterval), kind: evProbe, node: i, life: n.life})
	m.push(event{at: m.now + phase(m.cfg.GossipInterval), kind: evGossip, node: i, life: n.life})
	m.push(event{at: m.now + phase(m.cfg.PushPullInterval), kind: evPushPull, node: i, life: n.life})
	m.push(event{at: m.now + phase(m.cfg.ReconnectInterval), kind: evReconnect, node: i, life: n.life})
}

func (m *model) stop(i int32) {
	n := &m.nodes[i]
	n.up, n.leaving = false, false
	n.life++
	n.view, n.since, n.queue, n.probes = nil, nil, nil, nil
}

func (m *model) handle(e event) {
	if e.kind == evTruth {
		m.truth(e.arg)
		return
	}
	if e.kind == evPartitionEnd {
		m.parts = slices.DeleteFunc(m.parts, func(p *partition) bool { return p.id == e.arg })
		return
	}
	n := &m.nodes[e.node]
	if !n.up {
		return
	}
	if e.kind == evRecv {
		for _, u := range e.ups {
			if e.arg == 1 && u.Kind == member.Dead && u.Node != n.name {
				// memberlist's push-pull merge: a node the peer holds dead
				// is only suspected here, so one stale peer cannot kill it.
				u.Kind = member.Suspect
			}
			m.receive(e.node, u)
		}
		return
	}
	if e.life != n.life {
		return // a timer of a previous life
	}
	switch e.kind {
	case evLeaveDone:
		m.stop(e.node)
	case evProbe:
		if !n.leaving {
			m.probe(e.node)
		}
		m.push(event{at: m.now + m.cfg.ProbeInterval, kind: evProbe, node: e.node, life: n.life})
	case evSuspectRaise:
		u := member.Update{Node: m.nodes[e.target].name, Inc: e.inc, Kind: member.Suspect}
		if m.accept(e.node, u, true) && m.nodes[e.target].up && m.reach(e.node, e.target) && m.reach(e.target, e.node) {
			m.res.Stats.FalseSuspicions++
		}
	case evSuspectTimeout:
		t := m.nodes[e.target].name
		if cur, ok := n.view.Get(t); ok && cur == (member.Update{Node: t, Inc: e.inc, Kind: member.Suspect}) {
			m.res.Stats.Deaths++
			if m.nodes[e.target].up {
				m.res.Stats.FalseDeaths++
			}
			m.accept(e.node, member.Update{Node: t, Inc: e.inc, Kind: member.Dead}, true)
		}
	case evGossip:
		m.gossip(e.node)
		m.push(event{at: m.now + m.cfg.GossipInterval, kind: evGossip, node: e.node, life: n.life})
	case evPushPull:
		if !n.leaving {
			peer := m.randomLive(e.node)
			if peer < 0 {
				peer = m.nextPeer(e.node, func(int32) bool { return true }) // not joined yet
			}
			if peer >= 0 {
				m.pushPull(e.node, peer)
			}
		}
		m.push(event{at: m.now + m.cfg.PushPullInterval, kind: evPushPull, node: e.node, life: n.life})
	case evReconnect:
		if !n.leaving {
			peer := m.nextPeer(e.node, func(j int32) bool {
				u, ok := n.view.Get(m.nodes[j].name)
				return ok && u.Kind == member.Dead
			})
			if peer >= 0 {
				m.pushPull(e.node, peer)
			}
		}
		m.push(event{at: m.now + m.cfg.ReconnectInterval, kind: evReconnect, node: e.node, life: n.life})
	}
}

func (m *model) truth(idx int32) {
	e := m.cfg.Events[idx]
	switch e.Kind {
	case Crash:
		if i := m.index[e.Node]; m.nodes[i].up {
			m.stop(i)
		}
	case Restart:
		if i := m.index[e.Node]; !m.nodes[i].up {
			m.start(i, m.nodes[i].inc+1)
			m.join(i)
		}
	case Leave:
		i := m.index[e.Node]
		n := &m.nodes[i]
		if n.up && !n.leaving {
			n.leaving = true
			m.accept(i, member.Update{Node: n.name, Inc: n.inc, Kind: member.Left}, true)
			m.push(event{at: m.now + m.cfg.LeaveGrace, kind: evLeaveDone, node: i, life: n.life})
		}
	case Partition:
		p := &partition{a: make([]bool, len(m.nodes)), b: make([]bool, len(m.nodes)), oneWay: e.OneWay}
		for _, name := range e.A {
			p.a[m.index[name]] = true
		}
		for _, name := range e.B {
			p.b[m.index[name]] = true
		}
		p.id = idx
		m.parts = append(m.parts, p)
		m.push(event{at: e.Until, kind: evPartitionEnd, arg: p.id})
	}
}

// probe is one protocol period of node i: the next live member of its
// round-robin list, directly and then through k helpers. Without an ack the
// suspicion is raised when the period ends.
func (m *model) probe(i int32) {
	n := &m.nodes[i]
	t := int32(-1)
	for range 2 {
		for n.probeAt < len(n.probes) && t < 0 {
			c := n.probes[n.probeAt]
			n.probeAt++
			if n.view.IsLive(m.nodes[c].name) {
				t = c
			}
		}
		if t >= 0 {
			break
		}
		// A new cycle: the live members, shuffled.
		n.probes, n.probeAt = n.probes[:0], 0
		for _, name := range n.view.Live() {
			if j := m.index[name]; j != i {
				n.probes = append(n.probes, j)
			}
		}
		n.rng.Shuffle(len(n.probes), func(a, b int) { n.probes[a], n.probes[b] = n.probes[b], n.probes[a] })
	}
	if t < 0 {
		return
	}
	m.res.Stats.Probes++
	if m.ack(i, t) {
		return
	}
	ok := false
	if k := m.cfg.IndirectProbes; k > 0 {
		helpers := m.sample(i, k, func(j int32) bool {
			return j != i && j != t && n.view.IsLive(m.nodes[j].name)
		})
		for _, h := range helpers {
			// ping-req i→h, ping h→t, ack t→h, ack h→i.
			if m.nodes[h].up && m.deliver(i, h) && m.ack(h, t) && m.deliver(h, i) {
				ok = true
			}
		}
	}
	if ok {
		return
	}
	m.res.Stats.ProbeFailures++
	cur, _ := n.view.Get(m.nodes[t].name)
	m.push(event{at: m.now + m.cfg.ProbeInterval, kind: evSuspectRaise, node: i, target: t, life: n.life, inc: cur.Inc})
}

// ack reports whether a ping from a to b and b's ack both arrive.
func (m *model) ack(a, b int32) bool {
	return m.nodes[b].up && m.deliver(a, b) && m.deliver(b, a)
}

// deliver reports whether one UDP packet from a to b arrives now: no
// partition drops it, and it is not lost.
func (m *model) deliver(a, b int32) bool {
	if !m.reach(a, b) {
		return false
	}
	if m.cfg.Loss > 0 && (m.cfg.LossUntil == 0 || m.now < m.cfg.LossUntil) {
		return m.net.Float64() >= m.cfg.Loss
	}
	return true
}

// reach reports whether no active partition cuts the link from a to b.
func (m *model) reach(a, b int32) bool {
	for _, p := range m.parts {
		if (p.a[a] && p.b[b]) || (!p.oneWay && p.b[a] && p.a[b]) {
			return false
		}
	}
	return true
}

// gossip sends node i's queued updates, one packet to each of up to
// GossipFanout members, and retires the updates sent often enough.
func (m *model) gossip(i int32) {
	n := &m.nodes[i]
	if len(n.queue) == 0 {
		return
	}
	targets := m.sample(i, m.cfg.GossipFanout, func(j int32) bool {
		if j == i {
			return false
		}
		u, ok := n.view.Get(m.nodes[j].name)
		if !ok {
			return false
		}
		return u.Kind.Live() || (u.Kind == member.Dead && m.now-n.since[j] < m.cfg.GossipToTheDead)
	})
	limit := m.cfg.retransmits(len(n.view.Live()))
	for _, t := range targets {
		ups := make([]member.Update, len(n.queue))
		for q := range n.queue {
			ups[q] = n.queue[q].u
			n.queue[q].sent++
		}
		m.res.Stats.Packets++
		if m.deliver(i, t) {
			m.push(event{at: m.now + m.cfg.Latency, kind: evRecv, node: t, ups: ups})
		} else {
			m.res.Stats.Lost++
		}
	}
	n.queue = slices.DeleteFunc(n.queue, func(b bcast) bool { return b.sent >= limit })
}

// pushPull exchanges the whole state of nodes i and j (over TCP: partitions
// apply, loss does not). Each side merges the other's view as it was now.
func (m *model) pushPull(i, j int32) bool {
	if !m.nodes[j].up || !m.reach(i, j) || !m.reach(j, i) {
		return false
	}
	m.res.Stats.PushPulls++
	m.push(event{at: m.now + m.cfg.Latency, kind: evRecv, node: j, arg: 1, ups: m.nodes[i].view.Members()})
	m.push(event{at: m.now + 2*m.cfg.Latency, kind: evRecv, node: i, arg: 1, ups: m.nodes[j].view.Members()})
	return true
}

// join is a restarted node's push-pull with the first configured node that
// answers, in round-robin order; if none does, its push-pull timer retries.
func (m *model) join(i int32) {
	for range len(m.nodes) {
		j := m.nextPeer(i, func(int32) bool { return true })
		if j >= 0 && m.pushPull(i, j) {
			return
		}
	}
}

// nextPeer returns the next node index after node i's cursor (round robin,
// itself excluded) that ok accepts, or -1.
func (m *model) nextPeer(i int32, ok func(int32) bool) int32 {
	n := &m.nodes[i]
	for range len(m.nodes) {
		n.cursor = (n.cursor + 1) % len(m.nodes)
		if j := int32(n.cursor); j != i && ok(j) {
			return j
		}
	}
	return -1
}

// randomLive is a random live member of node i's view other than itself, or
// -1.
func (m *model) randomLive(i int32) int32 {
	n := &m.nodes[i]
	s := m.sample(i, 1, func(j int32) bool { return j != i && n.view.IsLive(m.nodes[j].name) })
	if len(s) == 0 {
		return -1
	}
	return s[0]
}

// sample draws up to k distinct node indices that ok accepts, from node i's
// stream.
func (m *model) sample(i int32, k int, ok func(int32) bool) []int32 {
	var cand []int32
	for j := range m.nodes {
		if ok(int32(j)) {
			cand = append(cand, int32(j))
		}
	}
	rng := m.nodes[i].rng
	k = min(k, len(cand))
	for a := 0; a < k; a++ {
		b := a + rng.IntN(len(cand)-a)
		cand[a], cand[b] = cand[b], cand[a]
	}
	return cand[:k]
}

// receive is node i hearing u (gossip or push-pull). About itself, it
// refutes a suspicion or death at or above its incarnation; about others,
// its view decides.
func (m *model) receive(i int32, u member.Update) {
	n := &m.nodes[i]
	if u.Node != n.name {
		m.accept(i, u, true)
		return
	}
	if n.leaving {
		return
	}
	if u.Inc > n.inc || (u.Inc == n.inc && u.Kind != member.Alive) {
		n.inc = max(n.inc, u.Inc) + 1
		m.res.Stats.Refutes++
		m.accept(i, member.Update{Node: n.name, Inc: n.inc, Kind: member.Alive}, true)
	}
}

// accept applies u to node i's view; if the view takes it, the observer's
// actors receive it (a Delivery), it is queued for gossip (when spread),
// and a suspicion starts the node's own timer. It reports whether the view
// took it.
func (m *model) accept(i int32, u member.Update, spread bool) bool {
	n := &m.nodes[i]
	c, err := n.view.Apply(u)
	if err != nil {
		m.err = fmt.Errorf("swim: node %s: %w", n.name, err)
		return false
	}
	if c == member.Ignored {
		return false
	}
	if len(m.res.Deliveries) >= m.maxDel {
		m.err = fmt.Errorf("swim: more than %d deliveries (Config.MaxDeliveries)", m.maxDel)
		return false
	}
	m.res.Deliveries = append(m.res.Deliveries, Delivery{At: m.now, Observer: n.name, Life: int(n.life), Update: u})
	j := m.index[u.Node]
	n.since[j] = m.now
	if spread {
		n.queue = slices.DeleteFunc(n.queue, func(b bcast) bool { return b.u.Node == u.Node })
		n.queue = append(n.queue, bcast{u: u})
	}
	if u.Kind == member.Suspect && u.Node != n.name {
		d := m.cfg.SuspicionTimeout(len(n.view.Live()))
		m.push(event{at: m.now + d, kind: evSuspectTimeout, node: i, target: j, life: n.life, inc: u.Inc})
	}
	return true
}

func (m *model) push(e event) {
	m.seq++
	e.seq = m.seq
	m.heap = append(m.heap, e)
	for k := len(m.heap) - 1; k > 0; {
		p := (k - 1) / 2
		if !less(&m.heap[k], &m.heap[p]) {
			break
		}
		m.heap[k], m.heap[p] = m.heap[p], m.heap[k]
		k = p
	}
}

func (m *model) pop() event {
	h := m.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{}
	h = h[:last]
	for k := 0; ; {
		l, r, s := 2*k+1, 2*k+2, k
		if l < len(h) && less(&h[l], &h[s]) {
			s = l
		}
		if r < len(h) && less(&h[r], &h[s]) {
			s = r
		}
		if s == k {
			break
		}
		h[k], h[s] = h[s], h[k]
		k = s
	}
	m.heap = h
	return top
}

func less(a, b *event) bool {
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}

// stream derives a random stream from the seed and a name (SplitMix64 of
// the seed, XOR FNV-1a of the name, as package sim's NewStream does; sim is
// not imported so that it can import this package).
func stream(seed uint64, name string) *rand.Rand {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	x := seed
	state := splitmix(&x) ^ h
	a := splitmix(&state)
	return rand.New(rand.NewPCG(a, splitmix(&state)))
}

func splitmix(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
