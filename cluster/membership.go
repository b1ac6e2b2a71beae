package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/batchd/batchd/actors/member"
)

// Limits.
const (
	// MetaMax is memberlist's limit on a node's metadata.
	MetaMax = memberlist.MetaMaxSize
	// JoinMax bounds the addresses a node is given to join.
	JoinMax = 64
)

// Config is one node's membership.
type Config struct {
	// Name is the node's name in the cluster, unique, stable across its
	// restarts.
	Name string
	// Incarnation names this life of the node: it must grow across its
	// restarts (the start time in milliseconds does).
	Incarnation uint64
	// BindAddr and BindPort are where memberlist listens (UDP and TCP);
	// port 0 picks a free one.
	BindAddr string
	BindPort int
	// Join lists members to join: IP:port, name:port (each of the name's
	// A and AAAA addresses: a Kubernetes headless service), or SRVPrefix
	// and a name (each SRV target at its port); without a port, BindPort
	// (or memberlist's 7946); see ResolveJoin. Empty: a cluster of one
	// until others join it.
	Join []string
	// JoinEvery, when set, resolves Join again every period and joins the
	// addresses that are not members yet; a Join that reaches no one at
	// start is then not an error (the node waits as a cluster of one).
	JoinEvery time.Duration
	// Resolver resolves Join's names; nil: net.DefaultResolver.
	Resolver Resolver
	// OnPeer, when set, is called with each update and the node's
	// metadata, just before onUpdate: the data plane follows membership
	// with it (transport.Apply(u, meta.DataAddr)). Like onUpdate it must
	// not block, and neither may call Membership's methods (memberlist
	// holds its lock while it reports).
	OnPeer func(u member.Update, meta Meta)
	// Meta is what the node tells the others of itself.
	Meta Meta
	// SecretKey, 16, 24 or 32 bytes, encrypts and authenticates gossip
	// (memberlist's keyring): a node without it cannot join or inject.
	SecretKey []byte
	// ProbeInterval, ProbeTimeout, SuspicionMult and GossipInterval are
	// memberlist's failure detector (DefaultConfig: its LAN settings).
	ProbeInterval, ProbeTimeout, GossipInterval time.Duration
	SuspicionMult                               int
	// PushPullInterval is how often the node syncs its whole state with a
	// random member (memberlist's; 0: its 30 s). It bounds how long a node
	// that came back under its name from a new address, before the others
	// declared its old life dead, stays unknown to them: they refuse its
	// join while the old address is alive to them, and only a sync tells
	// them again once it is dead (DefaultConfig: 10 probe intervals).
	PushPullInterval time.Duration
	// DeadNodeReclaim is how long after a node's death its name may come
	// back from another address (memberlist's DeadNodeReclaimTime): 0,
	// at once, as a restarted pod comes back with a new IP under its
	// stable name (names are unique, and the incarnation tells lives
	// apart); negative, never (memberlist's default, which keeps a node
	// that restarted elsewhere out).
	DeadNodeReclaim time.Duration
	// Log receives memberlist's own log lines; nil discards them.
	Log io.Writer
	// NextLife picks the incarnation of the node's next life, after last,
	// at now, and how long to wait before it may be published (see
	// Membership: a node the others declared dead takes a new life);
	// nil: the wall clock in milliseconds, at least last+1, at once. It
	// must return more than last.
	NextLife func(now time.Time, last uint64) (inc uint64, wait time.Duration)
	// wrap, when set (tests), wraps memberlist's network transport.
	wrap func(memberlist.Transport) memberlist.Transport
}

// Incarnations of a node with a data plane count IncarnationUnit steps
// since IncarnationEpoch, in 31 bits (device incarnations carry them:
// actors.NewClusterDevice): 2^31 quarter seconds run out in January 2042.
// NextIncarnation makes them grow strictly across restarts and lives.
const (
	IncarnationUnit = 250 * time.Millisecond
	IncarnationMax  = 1<<31 - 1
)

// IncarnationEpoch is where incarnations count from.
var IncarnationEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// NextIncarnation is the incarnation a node takes at now after last (0:
// its first life): the IncarnationUnit steps since IncarnationEpoch, or
// last+1 if that is not more; and how long to wait before publishing it:
// until now has passed the end of its step. A node that waits so holds
// an incarnation only once the clock has left it behind, so a later
// start, even within the same step, reads a higher one (on one clock that
// does not step back). The wait is at most one step, or more while lives
// come faster than one a step (they come once per failure detection).
// Past IncarnationMax it returns IncarnationMax (the engine refuses it).
func NextIncarnation(now time.Time, last uint64) (inc uint64, wait time.Duration) {
	inc = uint64(max(now.Sub(IncarnationEpoch)/IncarnationUnit, 1))
	if inc <= last {
		inc = last + 1
	}
	if inc > IncarnationMax {
		return IncarnationMax, 0
	}
	end := IncarnationEpoch.Add(time.Duration(inc+1) * IncarnationUnit)
	return inc, max(end.Sub(now), 0)
}

// nextMilli is Config.NextLife's default: the clock in milliseconds.
func nextMilli(now time.Time, last uint64) (uint64, time.Duration) {
	return max(uint64(now.UnixMilli()), last+1), 0
}

// DefaultConfig is memberlist's LAN settings for name: a 1 s probe
// interval, 500 ms probe timeout, suspicion 4 × log10(N+1) probe intervals,
// gossip every 200 ms; a dead node is declared in about 5 to 6 s in a
// small cluster. The state sync is every 10 s (PushPullFor), not the LAN's
// 30 s.
func DefaultConfig(name string) Config {
	lan := memberlist.DefaultLANConfig()
	return Config{
		Name: name, Incarnation: uint64(time.Now().UnixMilli()), BindAddr: "0.0.0.0", BindPort: 7946,
		ProbeInterval: lan.ProbeInterval, ProbeTimeout: lan.ProbeTimeout,
		GossipInterval: lan.GossipInterval, SuspicionMult: lan.SuspicionMult,
		PushPullInterval: PushPullFor(lan.ProbeInterval),
	}
}

// PushPullFor is the state sync interval that goes with a probe interval:
// ten of them, between 1 s and memberlist's 30 s. A node restarted from a
// new address before its old life was declared dead is known again within
// about this long after the declaration (Config.PushPullInterval).
func PushPullFor(probe time.Duration) time.Duration {
	return min(max(10*probe, time.Second), 30*time.Second)
}

// Meta is a node's metadata, as it travels (EncodeMeta).
type Meta struct {
	Incarnation uint64
	// DataAddr is where the node's actors take messages from other nodes
	// (its data plane). A host of 0.0.0.0 or :: (or none) reaches the
	// others, through OnPeer, as the node's gossip address.
	DataAddr string
	Devices  int
	// Models are the models the node's devices hold warm; none: any
	// model. Ownership of a model goes to a live member that holds it
	// (member.View.Owner).
	Models []string
	// Leaving: the node is leaving gracefully (Membership.Leave sets it
	// before it goes: memberlist v0.5.4 tells its event delegate of a
	// leave and a death alike).
	Leaving bool
}

const metaVersion = 1

// EncodeMeta writes m in at most MetaMax bytes: a version byte, a flags
// byte (1: leaving), the incarnation and device count as uvarints, then the
// address and the models as uvarint-length strings.
func EncodeMeta(m Meta) ([]byte, error) {
	var flags byte
	if m.Leaving {
		flags = 1
	}
	b := []byte{metaVersion, flags}
	b = binary.AppendUvarint(b, m.Incarnation)
	b = binary.AppendUvarint(b, uint64(m.Devices))
	b = appendString(b, m.DataAddr)
	b = binary.AppendUvarint(b, uint64(len(m.Models)))
	for _, s := range m.Models {
		b = appendString(b, s)
	}
	if len(b) > MetaMax {
		return nil, fmt.Errorf("cluster: node metadata of %d bytes, memberlist takes %d: fewer or shorter model names", len(b), MetaMax)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// DecodeMeta reads what EncodeMeta wrote; anything else is an error.
func DecodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) < 2 || b[0] != metaVersion || b[1] > 1 {
		return m, errors.New("cluster: metadata: unknown version or flags")
	}
	m.Leaving = b[1] == 1
	b = b[2:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	str := func() (string, bool) {
		l, ok := next()
		if !ok || l > uint64(len(b)) {
			return "", false
		}
		s := string(b[:l])
		b = b[l:]
		return s, true
	}
	var ok bool
	var devices, models uint64
	if m.Incarnation, ok = next(); !ok {
		return m, errors.New("cluster: metadata: bad incarnation")
	}
	if devices, ok = next(); !ok || devices > 1<<16 {
		return m, errors.New("cluster: metadata: bad device count")
	}
	m.Devices = int(devices)
	if m.DataAddr, ok = str(); !ok {
		return m, errors.New("cluster: metadata: bad address")
	}
	if models, ok = next(); !ok || models > MetaMax {
		return m, errors.New("cluster: metadata: bad model count")
	}
	for range models {
		s, ok := str()
		if !ok {
			return m, errors.New("cluster: metadata: bad model name")
		}
		m.Models = append(m.Models, s)
	}
	if len(b) != 0 {
		return m, errors.New("cluster: metadata: trailing bytes")
	}
	return m, nil
}

// Membership is one node's membership in a live cluster.
//
// A node the others declared dead (a partition, a paused process) comes
// back alive in memberlist by refuting its death, at the incarnation
// they hold dead: their views would keep it dead for the rest of its
// process. So it takes a new life: a higher incarnation (Config.NextLife),
// published with its metadata, which the others see alive. memberlist
// tells the refuting node nothing of it (no delegate hears a refutation;
// the merge delegate hears joins only), but every other node sees the
// node come back alive at an incarnation it reported dead: it tells the
// node so in a user message (a notice, retried for a while), and the
// node takes its new life when a notice names its current incarnation.
type Membership struct {
	ml   *memberlist.Memberlist
	name string
	cfg  Meta   // guarded by mu: its Incarnation is the node's now
	meta []byte // guarded by mu: memberlist reads it from its goroutines
	// onUpdate is called, one at a time, with each change memberlist
	// reports, as the actors' message.
	onUpdate func(member.Update)
	onPeer   func(member.Update, Meta)
	mu       sync.Mutex
	bad      int // metadata that did not decode (counted, not applied)
	// live are the live members as the updates told them (Members):
	// memberlist's own Members hands out nodes it goes on changing.
	// Guarded by mu; bounded by memberlist's members.
	live map[string]Node
	// stop ends the rejoin loop (JoinEvery); closed once by halt.
	stop     chan struct{}
	stopOnce sync.Once
	// rejoined closes when the rejoin loop has ended (nil: none runs).
	rejoined chan struct{}

	// Lives (see Membership). All guarded by mu.
	nextLife func(time.Time, uint64) (uint64, time.Duration)
	leaving  bool
	lives    int
	deathSeq uint64
	// dead are the nodes last reported dead, with the incarnation
	// (bounded by member.DefaultLimit, the oldest death forgotten first).
	dead map[string]deadAt
	// tell are the notices to send: nodes alive again at an incarnation
	// reported dead (bounded as dead).
	tell map[string]*notice
	// life takes the incarnation a notice named to the lives loop;
	// telling wakes the notice loop. Capacity 1 each.
	life, telling chan uint64
	// loops are the lives and notice loops (halt waits for them).
	loops sync.WaitGroup
}

type deadAt struct {
	inc uint64
	seq uint64 // order of the deaths, to forget the oldest
}

// notice is a node to tell it was reported dead at inc.
type notice struct {
	node  memberlist.Node // name, address and port only
	inc   uint64
	tries int
}

// Notices: a node that comes back alive at an incarnation reported dead
// is told every noticeEvery, at most noticeTries times (until it comes
// back at a higher one).
const (
	noticeEvery = 500 * time.Millisecond
	noticeTries = 20
	// lifeTimeout bounds the wait for a new life's announcement to go out.
	lifeTimeout = 5 * time.Second
)

// Start joins (or starts) the cluster. onUpdate receives the node's own
// Alive first, then every join, update, death and departure, one at a time
// and in order; it must not block.
func Start(cfg Config, onUpdate func(member.Update)) (*Membership, error) {
	switch {
	case cfg.Name == "" || len(cfg.Name) > member.MaxNameLen:
		return nil, fmt.Errorf("cluster: node name %q: want 1 to %d bytes", cfg.Name, member.MaxNameLen)
	case cfg.Incarnation == 0:
		return nil, errors.New("cluster: incarnation must not be 0")
	case len(cfg.Join) > JoinMax:
		return nil, fmt.Errorf("cluster: %d join addresses, at most %d", len(cfg.Join), JoinMax)
	case onUpdate == nil:
		return nil, errors.New("cluster: no update handler")
	}
	cfg.Meta.Incarnation = cfg.Incarnation
	meta, err := EncodeMeta(cfg.Meta)
	if err != nil {
		return nil, err
	}
	m := &Membership{name: cfg.Name, cfg: cfg.Meta, meta: meta, onUpdate: onUpdate, onPeer: cfg.OnPeer, live: map[string]Node{},
		nextLife: cfg.NextLife, dead: map[string]deadAt{}, tell: map[string]*notice{},
		life: make(chan uint64, 1), telling: make(chan uint64, 1)}
	if m.nextLife == nil {
		m.nextLife = nextMilli
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = cfg.Name, cfg.BindAddr, cfg.BindPort, cfg.BindPort
	if cfg.ProbeInterval > 0 {
		mc.ProbeInterval = cfg.ProbeInterval
	}
	if cfg.ProbeTimeout > 0 {
		mc.ProbeTimeout = cfg.ProbeTimeout
	}
	if cfg.GossipInterval > 0 {
		mc.GossipInterval = cfg.GossipInterval
	}
	if cfg.SuspicionMult > 0 {
		mc.SuspicionMult = cfg.SuspicionMult
	}
	if cfg.PushPullInterval > 0 {
		mc.PushPullInterval = cfg.PushPullInterval
	}
	if len(cfg.SecretKey) > 0 {
		mc.SecretKey = cfg.SecretKey
	}
	switch {
	case cfg.DeadNodeReclaim == 0:
		mc.DeadNodeReclaimTime = time.Nanosecond
	case cfg.DeadNodeReclaim > 0:
		mc.DeadNodeReclaimTime = cfg.DeadNodeReclaim
	}
	out := cfg.Log
	if out == nil {
		out = io.Discard
	}
	mc.Logger = log.New(out, "memberlist: ", 0)
	mc.Delegate = delegate{m}
	mc.Events = events{m}
	if cfg.wrap != nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger})
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if mc.BindPort == 0 {
			mc.BindPort = nt.GetAutoBindPort()
			mc.AdvertisePort = mc.BindPort
		}
		mc.Transport = cfg.wrap(nt)
	}
	if m.ml, err = memberlist.Create(mc); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	m.stop = make(chan struct{})
	m.loops.Add(2)
	go func() {
		defer m.loops.Done()
		m.livesLoop(m.stop)
	}()
	go func() {
		defer m.loops.Done()
		m.noticeLoop(m.stop)
	}()
	var r Resolver = net.DefaultResolver
	if cfg.Resolver != nil {
		r = cfg.Resolver
	}
	if len(cfg.Join) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		addrs, err := ResolveJoin(ctx, r, cfg.Join, joinPort(cfg.BindPort))
		cancel()
		if err == nil {
			_, err = m.ml.Join(addrs)
		}
		if err != nil && cfg.JoinEvery <= 0 {
			m.halt()
			m.ml.Shutdown()
			return nil, fmt.Errorf("cluster: join %v: %w", cfg.Join, err)
		}
	}
	if len(cfg.Join) > 0 && cfg.JoinEvery > 0 {
		m.rejoined = make(chan struct{})
		go func() {
			defer close(m.rejoined)
			m.rejoin(r, cfg.Join, joinPort(cfg.BindPort), cfg.JoinEvery, m.stop)
		}()
	}
	return m, nil
}

// Addr is where the node's memberlist listens (the port it picked if it
// was given 0): what another node joins.
func (m *Membership) Addr() string {
	n := m.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Node is a member as memberlist holds it: its name, gossip address and
// metadata.
type Node struct {
	Name, Addr string
	Meta
}

// Members returns the live members as memberlist last reported them,
// with their metadata (those whose metadata does not decode are left
// out), in name order. It reads a copy taken when memberlist reported
// each: the nodes memberlist's own Members returns are the ones it goes
// on changing, a data race.
func (m *Membership) Members() []Node {
	m.mu.Lock()
	out := make([]Node, 0, len(m.live))
	for _, n := range m.live {
		out = append(out, n)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// BadMeta counts the nodes whose metadata did not decode (their updates
// are dropped).
func (m *Membership) BadMeta() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bad
}

// Leave tells the cluster the node is leaving (Left, not Dead), waits up to
// timeout for it to spread, and stops.
func (m *Membership) Leave(timeout time.Duration) error {
	if err := m.Announce(timeout); err != nil {
		return err
	}
	m.halt()
	err := m.ml.Leave(timeout)
	if serr := m.ml.Shutdown(); err == nil {
		err = serr
	}
	return err
}

// Announce tells the cluster the node is leaving (the others see it Left
// and move its models) while it stays a member that can finish its work;
// it waits up to timeout for the news to go out. Leave announces too, if
// Announce was not called; calling it twice is harmless.
func (m *Membership) Announce(timeout time.Duration) error {
	m.mu.Lock()
	leaving := m.cfg
	leaving.Leaving = true
	meta, err := EncodeMeta(leaving)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	m.meta, m.leaving = meta, true
	m.mu.Unlock()
	if err := m.ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	return nil
}

// Stop stops the node without a word, as a crash would: the others
// declare it dead when their probes fail.
func (m *Membership) Stop() error {
	m.halt()
	return m.ml.Shutdown()
}

// joinPort is the port of a Join entry that names none: the node's own,
// as memberlist does, or memberlist's default when it picks a free one.
func joinPort(bind int) int {
	if bind > 0 {
		return bind
	}
	return 7946
}

// halt ends the rejoin, lives and notice loops and waits for them.
func (m *Membership) halt() {
	m.stopOnce.Do(func() { close(m.stop) })
	if m.rejoined != nil {
		<-m.rejoined
	}
	m.loops.Wait()
}

// Incarnation is the node's incarnation now: Config.Incarnation, or its
// last new life's.
func (m *Membership) Incarnation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg.Incarnation
}

// Lives counts the new lives the node took (see Membership).
func (m *Membership) Lives() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lives
}

// livesLoop takes a new life for each incarnation a notice names that is
// still the node's, until stop closes.
func (m *Membership) livesLoop(stop <-chan struct{}) {
	for {
		var inc uint64
		select {
		case <-stop:
			return
		case inc = <-m.life:
		}
		m.mu.Lock()
		cur, leaving := m.cfg.Incarnation, m.leaving
		m.mu.Unlock()
		if inc != cur || leaving {
			continue
		}
		next, wait := m.nextLife(time.Now(), cur)
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		m.mu.Lock()
		meta := m.cfg
		meta.Incarnation = next
		b, err := EncodeMeta(meta)
		if m.leaving || err != nil || next <= cur {
			m.mu.Unlock()
			continue
		}
		m.cfg, m.meta = meta, b
		m.lives++
		m.mu.Unlock()
		// memberlist tells the node's own event delegate of its new
		// metadata (NotifyUpdate), as it tells the others.
		_ = m.ml.UpdateNode(lifeTimeout) // times out only waiting for the broadcast to go out
	}
}

// declared takes a notice that the cluster holds the node dead at inc.
func (m *Membership) declared(inc uint64) {
	m.mu.Lock()
	cur, leaving := m.cfg.Incarnation, m.leaving
	m.mu.Unlock()
	if inc != cur || leaving {
		return
	}
	select {
	case m.life <- inc:
	default: // one is on its way
	}
}

// noticeLoop sends the notices due (m.tell), when one is added and every
// noticeEvery, until stop closes.
func (m *Membership) noticeLoop(stop <-chan struct{}) {
	t := time.NewTicker(noticeEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-m.telling:
		case <-t.C:
		}
		var due []notice
		m.mu.Lock()
		for name, n := range m.tell {
			if n.tries++; n.tries > noticeTries {
				delete(m.tell, name)
				continue
			}
			due = append(due, *n)
		}
		m.mu.Unlock()
		for _, n := range due {
			// A failed send is tried again on the next tick.
			_ = m.ml.SendReliable(&n.node, encodeNotice(n.node.Name, n.inc))
		}
	}
}

// A notice is a user message: noticeTag, the incarnation as a uvarint,
// and the node's name.
const noticeTag = 'D'

func encodeNotice(node string, inc uint64) []byte {
	return append(binary.AppendUvarint([]byte{noticeTag}, inc), node...)
}

func decodeNotice(b []byte) (node string, inc uint64, ok bool) {
	if len(b) < 2 || b[0] != noticeTag {
		return "", 0, false
	}
	inc, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return "", 0, false
	}
	return string(b[1+n:]), inc, true
}

// track keeps the deaths of the other nodes and, for one that comes
// back alive at an incarnation reported dead, the notice to send it.
// Called with mu held.
func (m *Membership) track(n *memberlist.Node, inc uint64, kind member.Kind) {
	if n.Name == m.name {
		return
	}
	switch kind {
	case member.Dead:
		delete(m.tell, n.Name)
		if _, known := m.dead[n.Name]; !known && len(m.dead) >= member.DefaultLimit {
			oldest, seq := "", uint64(1<<64-1)
			for name, d := range m.dead {
				if d.seq < seq {
					oldest, seq = name, d.seq
				}
			}
			delete(m.dead, oldest)
			delete(m.tell, oldest)
		}
		m.deathSeq++
		m.dead[n.Name] = deadAt{inc: inc, seq: m.deathSeq}
	case member.Alive:
		d, ok := m.dead[n.Name]
		switch {
		case !ok:
		case inc > d.inc:
			delete(m.dead, n.Name)
			delete(m.tell, n.Name)
		default:
			m.tell[n.Name] = &notice{node: memberlist.Node{Name: n.Name, Addr: slices.Clone(n.Addr), Port: n.Port}, inc: inc}
			select {
			case m.telling <- inc:
			default:
			}
		}
	case member.Left:
		delete(m.dead, n.Name)
		delete(m.tell, n.Name)
	}
}

func (m *Membership) update(n *memberlist.Node, kind member.Kind) {
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		m.mu.Lock()
		m.bad++
		m.mu.Unlock()
		return
	}
	if meta.Leaving {
		kind = member.Left
	}
	m.mu.Lock()
	m.track(n, meta.Incarnation, kind)
	if kind == member.Alive {
		// Read while memberlist holds its lock for this report.
		m.live[n.Name] = Node{Name: n.Name, Addr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))), Meta: meta}
	} else {
		delete(m.live, n.Name)
	}
	m.mu.Unlock()
	meta.DataAddr = dataAddrAt(meta.DataAddr, n.Addr)
	u := member.Update{Node: n.Name, Inc: meta.Incarnation, Kind: kind, Models: member.JoinModels(meta.Models)}
	if m.onPeer != nil {
		m.onPeer(u, meta)
	}
	m.onUpdate(u)
}

type delegate struct{ m *Membership }

func (d delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if len(d.m.meta) > limit {
		return nil
	}
	return d.m.meta
}
func (d delegate) NotifyMsg(b []byte) {
	if node, inc, ok := decodeNotice(b); ok && node == d.m.name {
		d.m.declared(inc)
	}
}
func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (delegate) LocalState(join bool) []byte                { return nil }
func (delegate) MergeRemoteState(buf []byte, join bool)     {}

// events maps memberlist's notifications to membership messages (called
// one at a time, in order).
type events struct{ m *Membership }

func (e events) NotifyJoin(n *memberlist.Node)   { e.m.update(n, member.Alive) }
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.update(n, member.Alive) }
func (e events) NotifyLeave(n *memberlist.Node) {
	kind := member.Dead
	if n.State == memberlist.StateLeft {
		kind = member.Left
	}
	e.m.update(n, kind)
}

// dataAddrAt is a node's data-plane address as its peers dial it: one
// whose host is empty or unspecified (0.0.0.0, ::: the node listens on
// every interface) takes the node's gossip address.
func dataAddrAt(addr string, gossip net.IP) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || gossip == nil {
		return addr
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return addr
	}
	return net.JoinHostPort(gossip.String(), port)
}
