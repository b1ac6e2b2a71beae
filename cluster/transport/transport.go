package transport

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/cluster/wire"
)

// Defaults and limits.
const (
	QueueDefault     = 4096
	BatchDefault     = 256
	BackoffMinimum   = 20 * time.Millisecond
	BackoffMaximum   = 2 * time.Second
	DialTimeoutMax   = 2 * time.Second
	HandshakeDefault = 2 * time.Second
	// HoldDefault is Config.Hold's default: how long a message waits for
	// a stream to a node whose own stream into this node is up (see
	// Send). Membership spreads a node's new life across a small cluster
	// in well under a second, and a stream being re-established comes up
	// within its backoff and dial (BackoffMaximum, DialTimeoutMax).
	HoldDefault = 2 * time.Second
	// HoldMaximum bounds Config.Hold.
	HoldMaximum = 10 * time.Second
	// PeersMax bounds the peers a transport holds (member.DefaultLimit).
	PeersMax = member.DefaultLimit
	// QueueMax bounds Config.Queue.
	QueueMax = 1 << 20
	// streamsMax bounds the streams one client connection may open.
	streamsMax = 4
)

// Config is one node's data plane.
type Config struct {
	// Node is this node's name: what it tells peers, and the Node of the
	// addresses it takes messages for.
	Node string
	// Listen is where peers reach this node (host:port; port 0 picks a
	// free one, see Addr): the data-plane address in its memberlist Meta.
	Listen string
	// Key is the cluster's gossip key (16, 24 or 32 bytes): the streams'
	// handshake proves both sides hold it, and every frame carries an HMAC
	// under a key derived from it and the handshake's nonces.
	Key []byte
	// TLS, when set, encrypts the streams (and, with a CA, makes them
	// mutual TLS).
	TLS *TLSFiles
	// Queue bounds each peer's send queue, in messages (QueueDefault).
	Queue int
	// Batch bounds the messages written in one frame (BatchDefault).
	Batch int
	// BackoffMin and BackoffMax bound the wait between a peer's
	// connection attempts: it doubles from BackoffMin after each failure,
	// up to BackoffMax, each wait drawn in [d/2, d).
	BackoffMin, BackoffMax time.Duration
	// DialTimeout bounds a connection attempt, handshake included
	// (DialTimeoutMax).
	DialTimeout time.Duration
	// HandshakeTimeout bounds how long an inbound stream may take to
	// prove the key before it is closed (HandshakeDefault).
	HandshakeTimeout time.Duration
	// Hold bounds how long Send holds a message for a node that has no
	// stream from this node up (membership has not yet told its address,
	// or the stream to it is being re-established) while one of its own
	// streams into this node is up: it is alive, and the message goes
	// out once the stream from here is up, or comes back Undeliverable
	// after Hold (HoldDefault; at most HoldMaximum). At most Queue
	// messages a node are held; Submits are never held.
	Hold time.Duration
	// OnDown, when set, is called with a peer's name when its stream,
	// once up, broke (the peer died, restarted, or the link was cut):
	// what was written to it and not yet read may be lost, so the actors
	// should not wait for answers from it (the engine's fronts resubmit
	// what they placed there). It must not block; it runs on the peer's
	// writer goroutine.
	OnDown func(node string)
	// OnUp, when set, is called with a peer's name each time the node
	// reaches it both ways again: its stream to the peer and the peer's
	// stream into it are both up (handshakes done), so a message sent
	// there can be answered, and the actors may stop routing around it.
	// It must not block; it runs on a stream's goroutine.
	OnUp func(node string)
}

// Deliver takes a message for a local actor: one that came from a peer,
// or an Undeliverable for a local sender (from is then the zero Address:
// the transport). It is called from the transport's goroutines and from
// Send, concurrently: it must be safe for that and must not block. It may
// call Send (no lock of the transport is held while it runs).
type Deliver func(from, to actors.Address, msg actors.Message)

// Stats counts what a transport did.
type Stats struct {
	// Sent counts messages written to a peer's stream; Received, messages
	// from peers handed to Deliver.
	Sent, Received uint64
	// Undeliverable counts messages that came back to their senders.
	Undeliverable uint64
	// Dropped counts messages from peers that did not decode or were not
	// for this node.
	Dropped uint64
	// Refused counts inbound streams refused at the handshake; Connects,
	// outbound streams established.
	Refused, Connects uint64
}

// Transport is one node's end of the data plane: it sends actor messages
// to peers over one gRPC stream each and hands what peers send to Deliver.
type Transport struct {
	cfg     Config
	key     []byte
	deliver Deliver
	srv     *grpc.Server
	lis     net.Listener
	client  []grpc.DialOption

	mu     sync.Mutex
	peers  map[string]*peer
	closed bool
	wg     sync.WaitGroup
	// cut is the fault knob (Cut): nil, or the peers this node is
	// partitioned from. Read on every Send: an atomic load when nothing is
	// cut.
	cut atomic.Pointer[cutSet]
	// inbound ends each peer's inbound streams (Cut breaks them), by
	// stream; guarded by mu, bounded by the server's streams.
	inbound map[*inboundStream]struct{}
	// held are the messages Send holds for a node whose stream into this
	// node is up while none from here is, and the Replies it holds for a
	// node with no stream up from here (Config.Hold; see hold), by node;
	// guarded by mu, at most PeersMax nodes and Queue messages each.
	held map[string]*holding

	sent, received, undeliverable, dropped, refused, connects atomic.Uint64
}

type item struct {
	from, to actors.Address
	msg      actors.Message
	env      *wire.Envelope
}

// peer is one peer's send side: a bounded queue and the goroutine that
// keeps a stream to it.
type peer struct {
	node, addr string
	q          chan item
	cancel     context.CancelFunc
	mu         sync.Mutex
	// down: the last connection attempt failed or the stream broke;
	// Send answers Undeliverable at once until a stream is up again.
	down bool
	// breakConn ends the stream now up, if any (Cut).
	breakConn context.CancelFunc
	// dead: membership declared the node dead (or departed) while its
	// streams were up both ways (RemovePeer): the peer is kept, and what
	// is sent goes out, Submits excepted, until the stream breaks (then
	// it is forgotten) or membership says the node is alive again.
	dead bool
	done chan struct{}
}

// holding is what Send holds for one node (Config.Hold): the messages in
// the order sent, when each is due back (Hold after it came: a message
// held late is not sent back with the first ones), and the timer that
// sends them back Undeliverable as they fall due.
type holding struct {
	items []item
	due   []time.Time
	timer *time.Timer
}

// New starts a node's transport: it listens on cfg.Listen at once.
func New(cfg Config, deliver Deliver) (*Transport, error) {
	switch {
	case cfg.Node == "" || len(cfg.Node) > member.MaxNameLen:
		return nil, fmt.Errorf("transport: node name %q: want 1 to %d bytes", cfg.Node, member.MaxNameLen)
	case len(cfg.Key) != 16 && len(cfg.Key) != 24 && len(cfg.Key) != 32:
		return nil, fmt.Errorf("transport: a key of %d bytes: want the cluster's gossip key, 16, 24 or 32", len(cfg.Key))
	case deliver == nil:
		return nil, errors.New("transport: no Deliver")
	case cfg.Queue < 0 || cfg.Queue > QueueMax:
		return nil, fmt.Errorf("transport: queue of %d: want 0 (default) to %d", cfg.Queue, QueueMax)
	}
	if cfg.Queue == 0 {
		cfg.Queue = QueueDefault
	}
	if cfg.Batch <= 0 {
		cfg.Batch = BatchDefault
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = BackoffMinimum
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(cfg.BackoffMin, BackoffMaximum)
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = HandshakeDefault
	}
	if cfg.Hold <= 0 || cfg.Hold > HoldMaximum {
		cfg.Hold = HoldDefault
	}
	if cfg.DialTimeout <= 0 || cfg.DialTimeout > DialTimeoutMax {
		cfg.DialTimeout = DialTimeoutMax
	}
	srvCreds, cliCreds, err := credentialsFor(cfg.TLS)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	t := &Transport{cfg: cfg, key: dataKey(cfg.Key), deliver: deliver, lis: lis, peers: map[string]*peer{}, inbound: map[*inboundStream]struct{}{}, held: map[string]*holding{}}
	frameMax := wire.FrameMax + 64<<10 // the frame's own fields
	t.client = []grpc.DialOption{
		grpc.WithTransportCredentials(cliCreds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(frameMax), grpc.MaxCallRecvMsgSize(4<<10)),
		// A peer whose host vanished without a reset is found by the
		// keepalive; membership usually declares it dead first.
		// (10 s is gRPC's least keepalive time.)
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}),
	}
	t.srv = grpc.NewServer(grpc.Creds(srvCreds), grpc.MaxRecvMsgSize(frameMax), grpc.MaxConcurrentStreams(streamsMax),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}))
	wire.RegisterDataPlaneServer(t.srv, &server{t: t})
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		_ = t.srv.Serve(lis) // ends at Close
	}()
	return t, nil
}

// Addr is where the transport listens: the data-plane address to
// advertise.
func (t *Transport) Addr() string { return t.lis.Addr().String() }

// Stats returns the counts so far.
func (t *Transport) Stats() Stats {
	return Stats{Sent: t.sent.Load(), Received: t.received.Load(), Undeliverable: t.undeliverable.Load(),
		Dropped: t.dropped.Load(), Refused: t.refused.Load(), Connects: t.connects.Load()}
}

// SetPeer tells the transport where node's data plane listens (its
// memberlist Meta.DataAddr): messages for it go there from now on. A new
// address replaces the old one; what was queued for the old one comes
// back Undeliverable.
func (t *Transport) SetPeer(node, addr string) error {
	if node == t.cfg.Node {
		return nil
	}
	if addr == "" {
		return fmt.Errorf("transport: node %q has no data-plane address", node)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("transport: closed")
	}
	old := t.peers[node]
	if old != nil && old.addr == addr {
		old.mu.Lock()
		old.dead = false // alive again (a death that was false, refuted)
		old.mu.Unlock()
		return nil
	}
	if old == nil && len(t.peers) >= PeersMax {
		return fmt.Errorf("transport: %d peers already", PeersMax)
	}
	if old != nil {
		old.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{node: node, addr: addr, q: make(chan item, t.cfg.Queue), cancel: cancel, done: make(chan struct{})}
	t.peers[node] = p
	// What was held for the node goes first (the queue has room: it is
	// new, and at most Queue are held).
	if h := t.held[node]; h != nil {
		h.timer.Stop()
		delete(t.held, node)
		for _, it := range h.items {
			p.q <- it
		}
	}
	t.wg.Add(1)
	go t.run(ctx, p)
	return nil
}

// RemovePeer forgets node (membership says it died or left): what was
// queued or held for it, and anything sent to it from now on, comes back
// Undeliverable. But while the node's streams are up both ways (its
// stream from here and one of its own into this node: its process lives,
// and membership's death is false or not yet its own, as when a stale
// report of its previous life's death kills its new one until it
// refutes), the peer is kept: what is sent to it goes out, Submits
// excepted (they come back Undeliverable, so the fronts re-route), until
// that stream breaks or membership says the node is alive again. A reply
// to its fronts is not lost for a death that was not one.
func (t *Transport) RemovePeer(node string) {
	t.mu.Lock()
	p := t.peers[node]
	keep := false
	if p != nil && t.inboundFrom(node) {
		p.mu.Lock()
		if !p.down && p.breakConn != nil {
			p.dead, keep = true, true
		}
		p.mu.Unlock()
	}
	if !keep {
		delete(t.peers, node)
	}
	// Streams into this node up now are of the life declared dead: they
	// do not make it a node to hold messages for.
	for in := range t.inbound {
		if in.peer == node {
			in.stale = true
		}
	}
	// What was held goes back, but Replies: held on, in case the death
	// is refuted within their Hold (see hold).
	var back []item
	if h := t.held[node]; h != nil {
		replies, due := h.items[:0:0], h.due[:0:0]
		for i, it := range h.items {
			if _, isReply := it.msg.(actors.Reply); isReply {
				replies, due = append(replies, it), append(due, h.due[i])
			} else {
				back = append(back, it)
			}
		}
		h.items, h.due = replies, due
	}
	t.mu.Unlock()
	for _, it := range back {
		t.bounce(it)
	}
	if p != nil && !keep {
		p.cancel()
	}
}

// inboundFrom reports whether a stream from node into this node is up,
// opened since membership last declared node dead. t.mu must be held.
func (t *Transport) inboundFrom(node string) bool {
	for in := range t.inbound {
		if in.peer == node && !in.stale {
			return true
		}
	}
	return false
}

// hold keeps it for its node, if the node has a stream into this node up
// and none from here (no peer, or its peer is down), or if it is a Reply
// (whatever the node's state here: its front submitted the request, so
// its node lived lately, and membership here may lag behind its new
// life's address or a refutation of a death): it goes into the peer's
// queue once the peer's stream is up, or comes back Undeliverable after
// Config.Hold. It reports whether it took it (or queued it: the stream
// came up meanwhile).
func (t *Transport) hold(it item) bool {
	if _, isSubmit := it.msg.(actors.Submit); isSubmit {
		return false // a Submit must come back at once: the front re-routes
	}
	node := it.to.Node
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, isReply := it.msg.(actors.Reply); t.closed || !isReply && !t.inboundFrom(node) {
		return false
	}
	if p := t.peers[node]; p != nil {
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if !down {
			return p.enqueue(it) // up since Send tried: queue it now
		}
	}
	h := t.held[node]
	switch {
	case h == nil && len(t.held) >= PeersMax:
		return false
	case h == nil:
		h = &holding{}
		h.timer = time.AfterFunc(t.cfg.Hold, func() { t.expireHeld(node, h) })
		t.held[node] = h
	case len(h.items) >= t.cfg.Queue:
		return false
	}
	h.items, h.due = append(h.items, it), append(h.due, time.Now().Add(t.cfg.Hold))
	return true
}

// expireHeld sends back what is held in h, for node, and due; the timer
// is set again for the rest.
func (t *Transport) expireHeld(node string, h *holding) {
	t.mu.Lock()
	if t.held[node] != h {
		t.mu.Unlock()
		return // flushed to the peer, or released already
	}
	now := time.Now()
	n := 0
	for n < len(h.due) && !h.due[n].After(now) {
		n++
	}
	back := h.items[:n:n]
	h.items, h.due = h.items[n:], h.due[n:]
	if len(h.items) == 0 {
		delete(t.held, node)
	} else {
		h.timer.Reset(h.due[0].Sub(now))
	}
	t.mu.Unlock()
	for _, it := range back {
		t.bounce(it)
	}
}

// release sends back what h held Undeliverable. No lock may be held.
func (t *Transport) release(h *holding) {
	if h == nil {
		return
	}
	h.timer.Stop()
	for _, it := range h.items {
		t.bounce(it)
	}
}

// flushHeld marks p up and queues what was held for its node before
// anything sent from now on.
func (t *Transport) flushHeld(p *peer) {
	t.mu.Lock()
	h := t.held[p.node]
	if t.peers[p.node] != p {
		h = nil // a peer replaced: the new one took them
	} else if h != nil {
		h.timer.Stop()
		delete(t.held, p.node)
	}
	p.mu.Lock()
	p.down = false
	var over []item
	if h != nil {
		for _, it := range h.items {
			select {
			case p.q <- it:
			default:
				over = append(over, it)
			}
		}
	}
	p.mu.Unlock()
	t.mu.Unlock()
	for _, it := range over {
		t.bounce(it)
	}
}

// Apply follows membership: an alive node at addr becomes (or stays) a
// peer, a dead or departed one is removed; a suspect keeps its stream.
func (t *Transport) Apply(u member.Update, addr string) error {
	switch u.Kind {
	case member.Alive:
		return t.SetPeer(u.Node, addr)
	case member.Dead, member.Left:
		t.RemovePeer(u.Node)
	}
	return nil
}

// Send queues msg from the local actor from for the actor to on another
// node, and never blocks. A message to an unknown node, to a peer that is
// unreachable (its last connection attempt failed or its stream broke),
// past its peer's queue bound, or that the schema cannot carry, comes back
// at once as Undeliverable{To: to, Msg: msg} to from; but a message, not a
// Submit, for a node with a stream into this node up (alive, while no
// stream from here is up yet) is held for up to Config.Hold instead, and
// one for a node membership holds dead while its streams are up both ways
// goes out (RemovePeer). A message to this node is handed to Deliver
// directly (the runtime should keep those).
//
// What was written to a stream that then broke may be lost without a
// word, as the simulator's lossy links lose messages: the actors'
// re-announcements, retries and deadlines cover it.
func (t *Transport) Send(from, to actors.Address, msg actors.Message) {
	if to.Node == t.cfg.Node {
		t.deliver(from, to, msg)
		return
	}
	env, err := wire.Encode(from, to, msg)
	if err != nil {
		t.bounce(item{from: from, to: to, msg: msg})
		return
	}
	t.mu.Lock()
	p := t.peers[to.Node]
	t.mu.Unlock()
	it := item{from: from, to: to, msg: msg, env: env}
	if t.isCut(to.Node) || (p == nil || !p.enqueue(it)) && !t.hold(it) {
		t.bounce(item{from: from, to: to, msg: msg})
	}
}

func (p *peer) enqueue(it item) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	if _, isSubmit := it.msg.(actors.Submit); isSubmit && p.dead {
		return false
	}
	select {
	case p.q <- it:
		return true
	default:
		return false
	}
}

// upBothWays calls OnUp for node when this node's stream to it is up and
// one of its streams into this node is: called as either comes up, it
// fires once the second does.
func (t *Transport) upBothWays(node string) {
	if t.cfg.OnUp == nil || t.isCut(node) {
		return
	}
	t.mu.Lock()
	p, in := t.peers[node], false
	for s := range t.inbound {
		if s.peer == node {
			in = true
			break
		}
	}
	t.mu.Unlock()
	if p == nil || !in {
		return
	}
	p.mu.Lock()
	out := !p.down
	p.mu.Unlock()
	if out {
		t.cfg.OnUp(node)
	}
}

func (p *peer) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// giveBack answers it, which did not go out to its peer, Undeliverable;
// but a Reply is held for its node (hold) when it can be: a peer's
// stream that broke or was still being set up when membership declared
// the node dead (a death it may refute at once) does not lose it.
func (t *Transport) giveBack(it item) {
	if _, isReply := it.msg.(actors.Reply); isReply && t.hold(it) {
		return
	}
	t.bounce(it)
}

func (t *Transport) bounce(it item) {
	t.undeliverable.Add(1)
	if _, nested := it.msg.(actors.Undeliverable); nested {
		return // an Undeliverable's own sender is the transport
	}
	t.deliver(actors.Address{}, it.from, actors.Undeliverable{To: it.to, Msg: it.msg})
}

// forgetDead removes p, kept after membership declared its node dead
// (RemovePeer), once its stream has broken, and reports whether it did.
func (t *Transport) forgetDead(p *peer) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.mu.Lock()
	dead := p.dead
	p.mu.Unlock()
	if !dead {
		return false
	}
	if t.peers[p.node] == p {
		delete(t.peers, p.node)
	}
	p.cancel()
	return true
}

// drain answers everything queued for p Undeliverable, Replies excepted
// (giveBack). Once p is down or stopped nothing new is queued, so the
// queue ends empty.
func (t *Transport) drain(p *peer) {
	for {
		select {
		case it := <-p.q:
			t.giveBack(it)
		default:
			return
		}
	}
}

// Close stops the transport: every peer's queue comes back Undeliverable,
// streams close, the listener closes.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	for _, p := range t.peers {
		p.cancel()
	}
	t.peers = map[string]*peer{}
	held := t.held
	t.held = map[string]*holding{}
	t.mu.Unlock()
	for _, h := range held {
		t.release(h)
	}
	t.srv.Stop()
	t.wg.Wait()
	return nil
}

// run keeps a stream to p until p is removed: connect, pump, and after a
// failure mark p down, answer its queue Undeliverable, and wait a
// jittered, doubling, bounded backoff before the next attempt.
func (t *Transport) run(ctx context.Context, p *peer) {
	defer t.wg.Done()
	defer close(p.done)
	backoff := t.cfg.BackoffMin
	for {
		connected := t.connect(ctx, p)
		p.setDown(true)
		t.drain(p)
		if ctx.Err() != nil {
			return
		}
		if connected && t.cfg.OnDown != nil {
			t.cfg.OnDown(p.node)
		}
		if t.forgetDead(p) {
			t.drain(p) // what came in before it was forgotten
			return
		}
		if connected {
			backoff = t.cfg.BackoffMin
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, t.cfg.BackoffMax)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// connect makes one connection attempt and, once it is up, pumps p's
// queue into it until it fails or ctx ends. It says whether the stream
// came up.
func (t *Transport) connect(ctx context.Context, p *peer) bool {
	if t.isCut(p.node) {
		return false // partitioned (Cut): as a peer that cannot be reached
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := grpc.NewClient(p.addr, t.client...)
	if err != nil {
		return false
	}
	defer conn.Close()
	// The dial and the handshake must end within DialTimeout.
	timer := time.AfterFunc(t.cfg.DialTimeout, cancel)
	// Not WaitForReady: a refused connection fails the attempt at once.
	stream, err := wire.NewDataPlaneClient(conn).Stream(ctx)
	if err != nil {
		return false
	}
	session, err := t.clientHandshake(stream, p.node)
	if !timer.Stop() || err != nil {
		return false
	}
	t.connects.Add(1)
	p.mu.Lock()
	p.breakConn = cancel
	p.mu.Unlock()
	t.flushHeld(p)
	defer func() {
		p.mu.Lock()
		p.breakConn = nil
		p.mu.Unlock()
	}()
	if t.isCut(p.node) {
		return true // cut while connecting: the stream breaks at once
	}
	t.upBothWays(p.node)
	// The server sends nothing after the handshake: a Recv that returns
	// means the stream is gone (the peer died, or closed it).
	go func() {
		_, _ = stream.Recv()
		cancel()
	}()
	t.pump(ctx, stream, p, session)
	return true
}

func (t *Transport) clientHandshake(stream wire.DataPlane_StreamClient, peer string) ([]byte, error) {
	cn, err := nonce()
	if err != nil {
		return nil, err
	}
	self := t.cfg.Node
	if err := stream.Send(&wire.Frame{Body: &wire.Frame_Hello{Hello: &wire.Hello{Version: wire.Version, Node: []byte(self), Peer: []byte(peer), Nonce: cn}}}); err != nil {
		return nil, err
	}
	f, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	h := f.GetHello()
	if h == nil || h.Version != wire.Version || string(h.Node) != peer || len(h.Nonce) != nonceLen ||
		!hmac.Equal(h.Proof, proof(t.key, "server", cn, h.Nonce, self, peer)) {
		return nil, errors.New("transport: the peer's handshake does not prove the cluster's key")
	}
	if err := stream.Send(&wire.Frame{Body: &wire.Frame_Hello{Hello: &wire.Hello{Version: wire.Version, Proof: proof(t.key, "client", cn, h.Nonce, self, peer)}}}); err != nil {
		return nil, err
	}
	return proof(t.key, "session", cn, h.Nonce, self, peer), nil
}

// pump writes p's queue to the stream, up to Batch messages and
// wire.FrameMax bytes a frame. A frame that fails to go out comes back
// Undeliverable (its Replies held: giveBack).
func (t *Transport) pump(ctx context.Context, stream wire.DataPlane_StreamClient, p *peer, session []byte) {
	var seq uint64
	batch := make([]item, 0, t.cfg.Batch)
	envs := make([]*wire.Envelope, 0, t.cfg.Batch)
	var held *item // an item that did not fit the last frame
	for {
		batch, envs = batch[:0], envs[:0]
		size := 0
		add := func(it item) bool {
			n := proto.Size(it.env) + 8
			if len(batch) > 0 && size+n > wire.FrameMax {
				return false
			}
			if n > wire.FrameMax {
				t.bounce(it)
				return true
			}
			size += n
			batch, envs = append(batch, it), append(envs, it.env)
			return true
		}
		if held != nil {
			add(*held)
			held = nil
		} else {
			select {
			case <-ctx.Done():
				return
			case it := <-p.q:
				add(it)
			}
		}
	fill:
		for len(batch) < t.cfg.Batch {
			select {
			case it := <-p.q:
				if !add(it) {
					held = &it
					break fill
				}
			default:
				break fill
			}
		}
		if len(batch) == 0 {
			continue
		}
		payload, err := wire.Marshal(envs)
		if err == nil {
			seq++
			err = stream.Send(&wire.Frame{Body: &wire.Frame_Data{Data: &wire.Data{Seq: seq, Envelopes: payload, Mac: frameMAC(session, seq, payload)}}})
		}
		if err != nil {
			for _, it := range batch {
				t.giveBack(it)
			}
			if held != nil {
				t.giveBack(*held)
			}
			return
		}
		t.sent.Add(uint64(len(batch)))
	}
}

// server takes peers' streams.
type server struct {
	wire.UnimplementedDataPlaneServer
	t *Transport
}

var errRefused = status.Error(codes.Unauthenticated, "transport: the handshake does not prove the cluster's key")

func (s *server) Stream(stream wire.DataPlane_StreamServer) error {
	t := s.t
	type result struct {
		peer    string
		session []byte
		err     error
	}
	// The handshake runs beside a timer: a client that opens a stream and
	// says nothing is dropped after HandshakeTimeout (returning ends the
	// stream, which ends the handshake's Recv).
	done := make(chan result, 1)
	go func() {
		peer, session, err := t.serverHandshake(stream)
		done <- result{peer, session, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(t.cfg.HandshakeTimeout):
		t.refused.Add(1)
		return status.Error(codes.DeadlineExceeded, "transport: no handshake")
	}
	if r.err != nil {
		t.refused.Add(1)
		return r.err
	}
	// The frames are read on a goroutine of their own, so that Cut can
	// end the stream (the handler returns; the reader's Recv then fails).
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	in := &inboundStream{peer: r.peer, cancel: cancel}
	t.mu.Lock()
	t.inbound[in] = struct{}{}
	t.mu.Unlock()
	defer func() {
		// The last of the node's streams in gone: what was held for it
		// comes back (nothing says it lives any more).
		t.mu.Lock()
		delete(t.inbound, in)
		var h *holding
		if !t.inboundFrom(r.peer) {
			h = t.held[r.peer]
			delete(t.held, r.peer)
		}
		t.mu.Unlock()
		t.release(h)
	}()
	if t.isCut(r.peer) {
		return errPartitioned
	}
	t.upBothWays(r.peer)
	read := make(chan error, 1)
	go func() { read <- t.readFrames(stream, r.peer, r.session) }()
	select {
	case err := <-read:
		return err
	case <-ctx.Done():
		return errPartitioned
	}
}

// errPartitioned ends a stream to or from a peer this node is cut from.
var errPartitioned = status.Error(codes.Unavailable, "transport: partitioned from the peer")

// inboundStream is a peer's stream into this node, for Cut to end.
type inboundStream struct {
	peer   string
	cancel context.CancelFunc
	// stale: membership declared the node dead while this stream was up
	// (RemovePeer); guarded by Transport.mu.
	stale bool
}

// readFrames reads peer's Data frames and delivers their messages until
// the stream ends or a frame is bad.
func (t *Transport) readFrames(stream wire.DataPlane_StreamServer, peer string, session []byte) error {
	var seq uint64
	for {
		f, err := stream.Recv()
		if err != nil {
			return nil
		}
		d := f.GetData()
		if d == nil || d.Seq != seq+1 || !hmac.Equal(d.Mac, frameMAC(session, d.Seq, d.Envelopes)) {
			t.refused.Add(1)
			return status.Error(codes.Unauthenticated, "transport: a frame out of order or without the session's MAC")
		}
		seq++
		if t.isCut(peer) {
			// Partitioned (Cut): the frame is lost and the stream
			// breaks, as a cut link's would.
			return errPartitioned
		}
		envs, err := wire.Unmarshal(d.Envelopes)
		if err != nil {
			t.dropped.Add(1)
			continue
		}
		for _, e := range envs {
			from, to, msg, err := wire.Decode(e)
			if err != nil || from.Node != peer || to.Node != t.cfg.Node {
				t.dropped.Add(1)
				continue
			}
			t.received.Add(1)
			t.deliver(from, to, msg)
		}
	}
}

func (t *Transport) serverHandshake(stream wire.DataPlane_StreamServer) (string, []byte, error) {
	f, err := stream.Recv()
	if err != nil {
		return "", nil, err
	}
	h := f.GetHello()
	self := t.cfg.Node
	if h == nil || h.Version != wire.Version || string(h.Peer) != self || len(h.Nonce) != nonceLen ||
		len(h.Node) == 0 || len(h.Node) > member.MaxNameLen {
		return "", nil, errRefused
	}
	peer, cn := string(h.Node), h.Nonce
	if t.isCut(peer) {
		return "", nil, errPartitioned
	}
	sn, err := nonce()
	if err != nil {
		return "", nil, err
	}
	if err := stream.Send(&wire.Frame{Body: &wire.Frame_Hello{Hello: &wire.Hello{Version: wire.Version, Node: []byte(self), Nonce: sn,
		Proof: proof(t.key, "server", cn, sn, peer, self)}}}); err != nil {
		return "", nil, err
	}
	if f, err = stream.Recv(); err != nil {
		return "", nil, err
	}
	if h := f.GetHello(); h == nil || !hmac.Equal(h.Proof, proof(t.key, "client", cn, sn, peer, self)) {
		return "", nil, errRefused
	}
	return peer, proof(t.key, "session", cn, sn, peer, self), nil
}

// Cut is a fault knob, for tests of a partition where the loopback cannot
// be cut: it partitions this node's data plane from peers (every peer
// when all is set), replacing the last Cut; Cut(false) with no peers
// heals. A cut peer is as one that cannot be reached: its stream breaks
// now (what was written and not yet read is lost without a word, what was
// queued comes back Undeliverable), Send answers Undeliverable at once,
// connection attempts fail both ways, and a frame that comes from it is
// dropped and breaks its stream. Once healed, the peer's writer reconnects
// after its backoff (at most BackoffMax). Membership is not cut: it
// travels on memberlist's own sockets.
func (t *Transport) Cut(all bool, peers ...string) {
	cut := &cutSet{all: all, peers: map[string]bool{}}
	for _, p := range peers {
		if len(cut.peers) < PeersMax {
			cut.peers[p] = true
		}
	}
	if !all && len(cut.peers) == 0 {
		cut = nil
	}
	t.cut.Store(cut)
	t.mu.Lock()
	var broken []context.CancelFunc
	for name, p := range t.peers {
		if t.isCut(name) {
			p.mu.Lock()
			if p.breakConn != nil {
				broken = append(broken, p.breakConn)
			}
			p.mu.Unlock()
		}
	}
	for in := range t.inbound {
		if t.isCut(in.peer) {
			broken = append(broken, in.cancel)
		}
	}
	t.mu.Unlock()
	for _, b := range broken {
		b()
	}
}

// cutSet is what Cut partitions this node from: every peer, or those.
type cutSet struct {
	all   bool
	peers map[string]bool
}

// isCut reports whether node is partitioned from this one (Cut).
func (t *Transport) isCut(node string) bool {
	c := t.cut.Load()
	return c != nil && (c.all || c.peers[node])
}
