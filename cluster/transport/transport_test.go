package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/cluster/wire"
)

var key = []byte("0123456789abcdef")

// got is one delivered message.
type got struct {
	from, to actors.Address
	msg      actors.Message
}

// inbox collects what a transport delivers.
type inbox struct {
	mu   sync.Mutex
	msgs []got
	more chan struct{}
}

func newInbox() *inbox { return &inbox{more: make(chan struct{}, 1)} }

func (b *inbox) deliver(from, to actors.Address, msg actors.Message) {
	b.mu.Lock()
	b.msgs = append(b.msgs, got{from, to, msg})
	b.mu.Unlock()
	select {
	case b.more <- struct{}{}:
	default:
	}
}

func (b *inbox) all() []got {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]got(nil), b.msgs...)
}

func (b *inbox) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs)
}

// wait waits until cond holds of what arrived, or fails after 20 s:
// connections and backoffs run on their own timers.
func (b *inbox) wait(t *testing.T, what string, cond func([]got) bool) []got {
	t.Helper()
	end := time.After(20 * time.Second)
	for {
		if g := b.all(); cond(g) {
			return g
		}
		select {
		case <-b.more:
		case <-end:
			t.Fatalf("timed out waiting for %s (%d messages)", what, b.len())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func start(t *testing.T, cfg Config) (*Transport, *inbox) {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Key == nil {
		cfg.Key = key
	}
	in := newInbox()
	tr, err := New(cfg, in.deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, in
}

// every holds one value of each message that crosses nodes, with fields
// set.
func every() []actors.Message {
	dev := actors.Address{Node: "b", ID: 7}
	req := actors.Request{ID: 1, Tenant: "t", Model: "echo", Version: "v1", Params: "p", Priority: -1, Input: "in\xff",
		Arrival: 3, Deadline: 4, ReplyTo: actors.Address{Node: "a", ID: 1}}
	return []actors.Message{
		actors.Submit{Req: req}, actors.Cancel{ID: 9}, actors.Drain{},
		actors.Reply{ID: 1, Outcome: actors.Completed, Output: "out", Version: "v1", Err: "e", RetryAfter: 5, Arrival: 1, Enqueue: 2,
			Dispatch: 3, Done: 4, BatchSize: 8, Attempts: 2, Device: dev},
		actors.RunBatch{Batch: actors.Batch{ID: 3, Key: actors.Key{Model: "echo", Bucket: 2}, Items: []actors.Item{{Req: req, Enqueue: 1, Attempt: 1, Group: 4}}, Dispatch: 6},
			From: actors.Address{Node: "a", ID: 2}},
		actors.BatchDeclined{Device: dev, BatchID: 3}, actors.DeviceReady{Device: dev, Incarnation: 5, Models: []string{"echo"}, Offers: true},
		actors.Offer{Device: dev, From: dev, Level: 1, Slack: -3}, actors.Claim{Device: dev}, actors.Reannounce{},
		actors.BatchDone{Device: dev, BatchID: 3, Isolated: []uint64{1}}, actors.BatchAborted{Device: dev, BatchID: 3, Pending: []uint64{1, 2}, Reason: "crash"},
		actors.DeviceBusy{Device: dev, Incarnation: 5}, actors.DeviceDown{Device: dev, Until: 9, Reason: "q"},
		actors.Undeliverable{To: dev, Msg: actors.Cancel{ID: 2}}, member.Update{Node: "c", Inc: 4, Kind: member.Dead},
	}
}

// Every kind of message crosses both ways intact, and the messages of one
// sender to one peer arrive in the order sent (thousands of them, so that
// many share a frame).
func TestMessagesCrossInOrder(t *testing.T) {
	a, ina := start(t, Config{Node: "a", Queue: 1 << 14})
	b, inb := start(t, Config{Node: "b", Queue: 1 << 14})
	if err := a.SetPeer("b", b.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPeer("a", a.Addr()); err != nil {
		t.Fatal(err)
	}
	var want []got
	const rounds = 500
	for r := range rounds {
		for i, m := range every() {
			g := got{actors.Address{Node: "a", ID: uint64(i)}, actors.Address{Node: "b", ID: uint64(r)}, m}
			want = append(want, g)
			a.Send(g.from, g.to, g.msg)
		}
	}
	gotB := inb.wait(t, "every message at b", func(g []got) bool { return len(g) >= len(want) })
	if !reflect.DeepEqual(gotB, want) {
		for i := range min(len(gotB), len(want)) {
			if !reflect.DeepEqual(gotB[i], want[i]) {
				t.Fatalf("message %d: sent %#v, got %#v", i, want[i], gotB[i])
			}
		}
		t.Fatalf("%d messages sent, %d arrived", len(want), len(gotB))
	}
	b.Send(actors.Address{Node: "b", ID: 1}, actors.Address{Node: "a", ID: 2}, every()[3])
	g := ina.wait(t, "the reply at a", func(g []got) bool { return len(g) == 1 })
	if !reflect.DeepEqual(g[0].msg, every()[3]) {
		t.Fatalf("b to a: %#v", g[0])
	}
	if s := a.Stats(); s.Sent != uint64(len(want)) || s.Undeliverable != 0 || s.Connects != 1 {
		t.Fatalf("a's stats %+v", s)
	}
	if s := b.Stats(); s.Received != uint64(len(want)) || s.Dropped != 0 {
		t.Fatalf("b's stats %+v", s)
	}
}

// undeliverable reports whether g is an Undeliverable of msg to to,
// delivered to from.
func undeliverable(g got, from, to actors.Address, msg actors.Message) bool {
	u, ok := g.msg.(actors.Undeliverable)
	return ok && g.to == from && u.To == to && reflect.DeepEqual(u.Msg, msg)
}

// A message to a node the transport does not know, or no longer knows,
// comes back Undeliverable to its sender before Send returns.
func TestUnknownPeerUndeliverable(t *testing.T) {
	a, ina := start(t, Config{Node: "a"})
	from, to := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "x", ID: 2}
	a.Send(from, to, actors.Cancel{ID: 3})
	if g := ina.all(); len(g) != 1 || !undeliverable(g[0], from, to, actors.Cancel{ID: 3}) {
		t.Fatalf("got %#v", g)
	}
	b, _ := start(t, Config{Node: "b"})
	if err := a.Apply(member.Update{Node: "x", Inc: 1, Kind: member.Alive}, b.Addr()); err != nil {
		t.Fatal(err)
	}
	a.Apply(member.Update{Node: "x", Inc: 1, Kind: member.Dead}, "")
	a.Send(from, to, actors.Cancel{ID: 4})
	if g := ina.all(); len(g) != 2 || !undeliverable(g[1], from, to, actors.Cancel{ID: 4}) {
		t.Fatalf("after the peer died: %#v", g)
	}
	// A message for this node itself is delivered, not sent.
	a.Send(from, actors.Address{Node: "a", ID: 5}, actors.Drain{})
	if g := ina.all(); len(g) != 3 || g[2].msg != (actors.Drain{}) || g[2].to.ID != 5 {
		t.Fatalf("local: %#v", g)
	}
}

// A peer that dies: messages to it come back Undeliverable (at once, in
// Send, once its stream has broken); when it restarts on its address the
// transport reconnects and messages flow again.
func TestPeerDiesAndReturns(t *testing.T) {
	a, ina := start(t, Config{Node: "a", BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	b, inb := start(t, Config{Node: "b"})
	addr := b.Addr()
	a.SetPeer("b", addr)
	from, to := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 2}
	a.Send(from, to, actors.Cancel{ID: 1})
	inb.wait(t, "the first message", func(g []got) bool { return len(g) == 1 })

	b.Close()
	// Until the break is seen a message may still be queued (or lost in
	// the dying connection); after it, Send answers at once.
	id := uint64(100)
	for end := time.Now().Add(20 * time.Second); ; id++ {
		if time.Now().After(end) {
			t.Fatal("no Undeliverable from Send 20 s after the peer died")
		}
		n := ina.len()
		a.Send(from, to, actors.Cancel{ID: id})
		if g := ina.all(); len(g) > n && undeliverable(g[len(g)-1], from, to, actors.Cancel{ID: id}) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}

	b2, inb2 := start(t, Config{Node: "b", Listen: addr})
	_ = b2
	for end := time.Now().Add(20 * time.Second); inb2.len() == 0; id++ {
		if time.Now().After(end) {
			t.Fatal("no reconnect 20 s after the peer restarted")
		}
		a.Send(from, to, actors.Cancel{ID: id})
		time.Sleep(5 * time.Millisecond)
	}
	if s := a.Stats(); s.Connects < 2 || s.Undeliverable == 0 {
		t.Fatalf("a's stats %+v", s)
	}
}

// blackhole accepts connections and never answers: a peer whose stream
// never comes up.
func blackhole(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

// A full queue answers Undeliverable in Send, never blocks; what was
// queued comes back Undeliverable when the connection attempt fails.
func TestFullQueueUndeliverable(t *testing.T) {
	a, ina := start(t, Config{Node: "a", Queue: 4, DialTimeout: 200 * time.Millisecond})
	a.SetPeer("b", blackhole(t))
	from, to := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 2}
	for i := range 4 {
		a.Send(from, to, actors.Cancel{ID: uint64(i)})
	}
	if n := ina.len(); n != 0 {
		t.Fatalf("%d messages came back while the queue had room", n)
	}
	a.Send(from, to, actors.Cancel{ID: 4})
	if g := ina.all(); len(g) != 1 || !undeliverable(g[0], from, to, actors.Cancel{ID: 4}) {
		t.Fatalf("the fifth message: %#v", g)
	}
	g := ina.wait(t, "the queued four back", func(g []got) bool { return len(g) == 5 })
	for i := range 4 {
		if !undeliverable(g[1+i], from, to, actors.Cancel{ID: uint64(i)}) {
			t.Fatalf("message %d: %#v", i, g[1+i])
		}
	}
}

// A node with another key cannot reach a peer (its messages come back
// Undeliverable, the peer delivers nothing), and neither can a client that
// skips the handshake and sends a frame, or one that cannot prove the key;
// a client that says nothing is cut off.
func TestWithoutKeyRefused(t *testing.T) {
	b, inb := start(t, Config{Node: "b", HandshakeTimeout: 100 * time.Millisecond})
	x, inx := start(t, Config{Node: "x", Key: []byte("fedcba9876543210"), DialTimeout: 500 * time.Millisecond})
	x.SetPeer("b", b.Addr())
	from, to := actors.Address{Node: "x", ID: 1}, actors.Address{Node: "b", ID: 2}
	x.Send(from, to, actors.Drain{})
	inx.wait(t, "the message back", func(g []got) bool { return len(g) == 1 && undeliverable(g[0], from, to, actors.Drain{}) })

	conn, err := grpc.NewClient(b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := wire.NewDataPlaneClient(conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := wire.Encode(from, to, actors.Drain{})
	payload, _ := wire.Marshal([]*wire.Envelope{e})
	s.Send(&wire.Frame{Body: &wire.Frame_Data{Data: &wire.Data{Seq: 1, Envelopes: payload}}})
	if _, err := s.Recv(); err == nil {
		t.Fatal("a frame without a handshake was answered")
	}
	// A client that says hello but cannot prove the key: its frames,
	// under a MAC of its own making, are not delivered.
	s, err = wire.NewDataPlaneClient(conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cn := make([]byte, nonceLen)
	s.Send(&wire.Frame{Body: &wire.Frame_Hello{Hello: &wire.Hello{Version: wire.Version, Node: []byte("x"), Peer: []byte("b"), Nonce: cn}}})
	h, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	wrong := []byte("fedcba9876543210")
	sn := h.GetHello().GetNonce()
	s.Send(&wire.Frame{Body: &wire.Frame_Hello{Hello: &wire.Hello{Version: wire.Version, Proof: proof(dataKey(wrong), "client", cn, sn, "x", "b")}}})
	session := proof(dataKey(wrong), "session", cn, sn, "x", "b")
	s.Send(&wire.Frame{Body: &wire.Frame_Data{Data: &wire.Data{Seq: 1, Envelopes: payload, Mac: frameMAC(session, 1, payload)}}})
	if _, err := s.Recv(); err == nil {
		t.Fatal("a client with a wrong proof was answered")
	}
	// A client that opens a stream and says nothing is cut off.
	s, err = wire.NewDataPlaneClient(conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err == nil || ctx.Err() != nil {
		t.Fatalf("a silent stream: %v (the test's deadline: %v)", err, ctx.Err())
	}
	if n := inb.len(); n != 0 || b.Stats().Refused < 4 {
		t.Fatalf("b delivered %d messages, refused %d streams", n, b.Stats().Refused)
	}
}

// certs writes a CA and a node certificate it signed (for 127.0.0.1) into
// dir, and returns the files.
func certs(t testing.TB, dir string) *TLSFiles {
	t.Helper()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "batchd test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	nodeKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "node"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &nodeKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(nodeKey)
	return &TLSFiles{CertFile: write("node.pem", "CERTIFICATE", leafDER), KeyFile: write("node-key.pem", "PRIVATE KEY", keyDER),
		CAFile: write("ca.pem", "CERTIFICATE", caDER)}
}

// With mutual TLS messages cross; a node without TLS, or with a
// certificate of another CA, is refused though it holds the key.
func TestMutualTLS(t *testing.T) {
	files := certs(t, t.TempDir())
	a, _ := start(t, Config{Node: "a", TLS: files})
	b, inb := start(t, Config{Node: "b", TLS: files})
	a.SetPeer("b", b.Addr())
	from, to := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 2}
	a.Send(from, to, actors.Cancel{ID: 1})
	inb.wait(t, "the message over TLS", func(g []got) bool { return len(g) == 1 && g[0].msg == actors.Cancel{ID: 1} })

	for name, tls := range map[string]*TLSFiles{"plain": nil, "other CA": certs(t, t.TempDir())} {
		x, inx := start(t, Config{Node: "x", TLS: tls, DialTimeout: 500 * time.Millisecond})
		x.SetPeer("b", b.Addr())
		x.Send(actors.Address{Node: "x", ID: 1}, to, actors.Drain{})
		inx.wait(t, name+": the message back", func(g []got) bool { return len(g) == 1 })
		if _, ok := inx.all()[0].msg.(actors.Undeliverable); !ok || inb.len() != 1 {
			t.Fatalf("%s: %#v; b has %d messages", name, inx.all(), inb.len())
		}
	}
}

// Cut partitions a node's data plane: a message to a cut peer comes back
// Undeliverable from Send, nothing crosses either way (the peer's stream
// breaks at once: it reports the node down, OnDown, before it sends
// anything, and it cannot reconnect), and once healed both directions
// flow again.
func TestCutAndHeal(t *testing.T) {
	fast := Config{BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
	ca, cb := fast, fast
	ca.Node, cb.Node = "a", "b"
	downs := make(chan string, 16)
	cb.OnDown = func(node string) {
		select {
		case downs <- node:
		default:
		}
	}
	var upsMu sync.Mutex
	ups := 0 // b's streams to a that came up (OnUp)
	cb.OnUp = func(node string) {
		if node != "a" {
			t.Errorf("b reported %q up, want a", node)
		}
		upsMu.Lock()
		ups++
		upsMu.Unlock()
	}
	upsNow := func() int {
		upsMu.Lock()
		defer upsMu.Unlock()
		return ups
	}
	a, ina := start(t, ca)
	b, inb := start(t, cb)
	a.SetPeer("b", b.Addr())
	b.SetPeer("a", a.Addr())
	fa, fb := actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 1}
	a.Send(fa, fb, actors.Cancel{ID: 1})
	b.Send(fb, fa, actors.Cancel{ID: 1})
	inb.wait(t, "a's message", func(g []got) bool { return len(g) == 1 })
	ina.wait(t, "b's message", func(g []got) bool { return len(g) == 1 })

	if upsNow() < 1 {
		t.Fatal("b's stream to a carried a message, and OnUp was not called")
	}
	a.Cut(true)
	select {
	case n := <-downs:
		if n != "a" {
			t.Fatalf("b reported %q down, want a", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("b did not find a down 20 s after the cut")
	}
	a.Send(fa, fb, actors.Cancel{ID: 2})
	if g := ina.all(); len(g) != 2 || !undeliverable(g[1], fa, fb, actors.Cancel{ID: 2}) {
		t.Fatalf("a's message to b while cut: %#v: want it back Undeliverable from Send", g)
	}
	// b's stream to a breaks at its next frame; b then finds a
	// unreachable and answers Undeliverable itself.
	id := uint64(10)
	for end := time.Now().Add(20 * time.Second); ; id++ {
		if time.Now().After(end) {
			t.Fatal("b still sends to a 20 s after the cut")
		}
		n := inb.len()
		b.Send(fb, fa, actors.Cancel{ID: id})
		if g := inb.all(); len(g) > n && undeliverable(g[len(g)-1], fb, fa, actors.Cancel{ID: id}) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, m := range ina.all() {
		if c, ok := m.msg.(actors.Cancel); ok && c.ID >= 10 {
			t.Fatalf("a received %v from b while cut", m.msg)
		}
	}

	upsCut := upsNow()
	a.Cut(false)
	healed := id
	for end := time.Now().Add(20 * time.Second); ; id++ {
		if time.Now().After(end) {
			t.Fatal("no message crossed 20 s after the heal")
		}
		a.Send(fa, fb, actors.Cancel{ID: id})
		b.Send(fb, fa, actors.Cancel{ID: id})
		if reached(ina, healed) && reached(inb, healed) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if upsNow() <= upsCut {
		t.Fatal("b's stream to a is up again after the heal, and OnUp was not called")
	}
}

// reached reports whether in got a Cancel of id or later from the peer
// (not one bounced back).
func reached(in *inbox, id uint64) bool {
	for _, m := range in.all() {
		if c, ok := m.msg.(actors.Cancel); ok && c.ID >= id {
			return true
		}
	}
	return false
}
