package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
)

// Runtime is what the engine needs of a live actor runtime. LinkedRuntime
// is this build's (runtime.go); the conformance suite (engine/enginetest)
// takes any.
type Runtime interface {
	// Spawn starts an actor at addr and delivers it actors.Start. newActor
	// makes its value: once, and again each time supervision restarts the
	// actor after a panic (the fresh value gets Start again). When backend
	// is not nil, the actor's Exec jobs run on it, on a worker goroutine of
	// the actor's own, one job at a time.
	Spawn(addr actors.Address, newActor func() actors.Actor, backend Backend) error
	// Listen makes fn the endpoint at addr, outside the actors: every
	// message sent there is handed to fn on the sender's goroutine. fn must
	// not block and must be safe for concurrent use.
	Listen(addr actors.Address, fn func(actors.Message)) error
	// Send delivers msg to addr from outside any actor. It does not block.
	// Messages sent from one goroutine arrive in the order sent.
	Send(to actors.Address, msg actors.Message)
	// Now is the runtime clock: time since the runtime started, monotonic.
	Now() time.Duration
	// Close stops the actors, their timers and workers, and waits until ctx
	// is done for every goroutine the runtime started to end.
	Close(ctx context.Context) error
}

// RuntimeOptions is what an adapter is made with.
type RuntimeOptions struct {
	// Seed seeds every actor's random stream (with its address).
	Seed uint64
	// Logger receives the actor library's own logs. Nil discards them.
	Logger *slog.Logger
	// Node and Remote make the runtime one node of a cluster: a message
	// an actor sends to an address of another node (Address.Node not
	// Node) goes to Remote, with the sender's address (the zero Address
	// when sent from outside the actors). Remote must not block. Nil:
	// such messages are dead letters, as on a single node.
	Node   string
	Remote func(from, to actors.Address, msg actors.Message)
	// ClockEpoch, when set, is what the runtime's clock counts from: a
	// wall-clock instant every node of a cluster shares (ClusterEpoch),
	// so the times messages carry (arrivals, deadlines) compare across
	// nodes, to within their clocks' skew. Zero: the clock counts from
	// the runtime's start. Either way it reads the monotonic clock once
	// started, so it never goes back.
	ClockEpoch time.Time
}

// ClusterEpoch is the clock epoch of every node of a cluster (2025-01-01
// UTC): a node that started later must not see another's deadlines in its
// own past.
var ClusterEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// NewRuntime makes a Runtime: one adapter's constructor.
type NewRuntime func(opts RuntimeOptions) (Runtime, error)

var (
	// ErrClosed is returned by an Engine after Close.
	ErrClosed = errors.New("engine closed")
	// ErrInFlightMax is returned by Do when InFlightMax requests are
	// already in flight: the caller should shed the request (HTTP 503).
	ErrInFlightMax = errors.New("too many requests in flight")
	// ErrNotReady is returned by New when the devices did not all announce
	// themselves to the batcher before its ctx ended.
	ErrNotReady = errors.New("devices not ready")
)

// Config configures an Engine.
type Config struct {
	// Batcher configures the node's Batcher actor; in a split (a cluster
	// whose registry names its models), each model's accumulator, with a
	// registry of that one model.
	Batcher actors.BatcherConfig
	// Device configures every Device actor.
	Device actors.DeviceConfig
	// Devices is how many devices, each with a Device actor and a Backend
	// of its own. Default 4, the seeds' setup.
	Devices int
	// Backend makes device i's backend (0 <= i < Devices); each device
	// needs one of its own, since a backend runs one batch at a time. Nil
	// gives every device the emulated seeds' batchstring
	// (DefaultEmulatedConfig, with the Device latency model and a seed per
	// device).
	Backend func(i int) Backend
	// Runtime makes the actor runtime. Nil means LinkedRuntime, the
	// actor library linked into this build.
	Runtime NewRuntime
	// Node names this node in actor addresses and in its fronts'
	// membership view. Empty: "local".
	Node string
	// Seed seeds the actors' random streams and the emulated backends.
	Seed uint64
	// Logger receives the runtime library's logs. Nil discards them.
	Logger *slog.Logger
	// InFlightMax bounds the requests in flight (submitted and not yet
	// answered, including those whose caller gave up): Do refuses more with
	// ErrInFlightMax. It bounds the waiters and, with them, every mailbox
	// between the front door and the devices. Default 200,000: the
	// batcher's default QueueTotalMax twice over, so the batcher, not this
	// bound, is what normally sheds load.
	InFlightMax int
	// JobTimeoutMultiple bounds every backend call at this multiple of its
	// predicted latency (at least JobTimeoutMin): past it the call's context
	// ends and the run counts as a device fault. The device's watchdog
	// gives up far sooner (DeviceConfig.WatchdogMultiple); this only frees a
	// worker stuck in a call nobody waits for. Default 10.
	JobTimeoutMultiple int
	// JobTimeoutMin is the least bound of a backend call, so that a
	// near-zero predicted latency does not cut off a healthy call.
	// Default 1 s.
	JobTimeoutMin time.Duration
	// ReplyGrace bounds every Do: a request still unanswered this long
	// past its deadline (req.Deadline, at most Arrival plus the batcher's
	// TimeoutMax) is answered Expired by its front actor
	// (actors.FrontConfig.Grace). The batcher and devices answer by the
	// deadline; this guards the callers against a reply that is lost all
	// the same. Default 5 s.
	ReplyGrace time.Duration
	// Cluster, when set, runs the engine as one node of a cluster (see
	// ClusterConfig); Node must then name it. Nil: a single node.
	Cluster *ClusterConfig
}

// Remote carries actor messages to the other nodes of a cluster: the
// data plane (cluster/transport's Transport implements it). Send must not
// block; a message it cannot deliver comes back to from as
// actors.Undeliverable through Engine.Deliver.
type Remote interface {
	Send(from, to actors.Address, msg actors.Message)
}

// ClusterConfig makes an engine one node of a cluster, as the cluster
// simulator (sim/cluster) assembles one: its fronts send each request to
// the accumulator of its model on the node that owns the model
// (rendezvous over the live members holding it, member.View.Owner; an
// accumulator per model when the registry names its models, the split),
// its devices announce themselves to the accumulators of the models they
// hold on their owners (actors.NewSplitClusterDevice, NewClusterDevice),
// and replies go from a device straight to the request's front, wherever
// each is. Membership reaches the actors through Engine.Member; messages
// from other nodes through Engine.Deliver.
type ClusterConfig struct {
	// Incarnation is this life of the node, as membership announces it
	// (member.Update.Inc for the node itself): it must grow across the
	// node's restarts, and be below 2^31 (device incarnations carry it).
	// A node the others declared dead takes a new life within its
	// process: membership tells the engine of the node itself alive at a
	// higher incarnation (Engine.Member), which it takes from then on.
	Incarnation uint64
	// Remote sends what the actors address to other nodes.
	Remote Remote
	// Forwarded, when set, is told of every request a front of this node
	// sent to another node's batcher, when the first reply to that
	// submission comes back to the front: total is from the send to the
	// reply's arrival at the front, atOwner the part between the owner's
	// batcher taking the request and its device finishing it (Reply.Done
	// less Reply.Enqueue; zero when the owner did not enqueue it, a
	// rejection). total less atOwner is the request's transit: its two
	// hops, the mailboxes on the way, and the clocks' skew between the
	// owner and the device's node. Called on the front's goroutine: it
	// must not block.
	Forwarded func(total, atOwner time.Duration)
}

// incarnationMax bounds ClusterConfig.Incarnation (actors.NewClusterDevice).
const incarnationMax = 1<<31 - 1

// DefaultConfig returns the seeds' service: 4 emulated devices at 100 ms
// per batch of up to 100, with the batcher learning its overrun. Runtime
// must still be set.
//
// The batcher learns how much longer than its cost model batches run
// (BatcherConfig.LearnOverrun), on top of the simulator's 5 ms margin. The
// simulator's batches take exactly their predicted time; live, a loaded CPU
// adds timer, hand-over and scheduling delays (a 100 ms emulated batch took
// up to 107 ms at p99 under 3x overload on the development VM). A fixed
// 15 ms margin was tuned for that VM; the learnt overrun follows the
// machine. At 12,000 req/s against 4,000/s of devices (six alternating
// pairs against the fixed 15 ms; RESULTS.md), it had fewer completions
// over their SLO in 5 of 6 pairs, the server's slowest completion under
// the 200 ms SLO in 6 of 6 runs (the fixed margin: 1 of 6), and goodput
// from 1.8% lower to 3.2% higher.
func DefaultConfig() Config {
	dev := actors.DefaultDeviceConfig()
	// Real time is not exact: on a starved CPU a 5 ms batch can take well
	// over 3x5 ms without being hung, and a false watchdog costs a restart.
	dev.WatchdogMin = 250 * time.Millisecond
	b := actors.DefaultBatcherConfig()
	b.LearnOverrun = true
	return Config{
		Batcher:            b,
		Device:             dev,
		Devices:            4,
		InFlightMax:        200_000,
		JobTimeoutMultiple: 10,
		JobTimeoutMin:      time.Second,
		ReplyGrace:         5 * time.Second,
	}
}

// Validate reports the first field that makes the configuration unusable.
func (c Config) Validate() error {
	if err := c.Batcher.Validate(); err != nil {
		return fmt.Errorf("engine config: %w", err)
	}
	if err := c.Device.Validate(); err != nil {
		return fmt.Errorf("engine config: %w", err)
	}
	switch {
	case c.Devices < 1 || c.Devices > c.Batcher.DevicesMax:
		return fmt.Errorf("engine config: Devices %d: want 1 to DevicesMax (%d)", c.Devices, c.Batcher.DevicesMax)
	case c.InFlightMax < 1:
		return fmt.Errorf("engine config: InFlightMax %d: must be at least 1", c.InFlightMax)
	case c.JobTimeoutMultiple < 1 || c.JobTimeoutMin <= 0:
		return fmt.Errorf("engine config: JobTimeoutMultiple and JobTimeoutMin must be positive")
	case c.ReplyGrace <= 0:
		return fmt.Errorf("engine config: ReplyGrace %v: must be positive", c.ReplyGrace)
	}
	if cl := c.Cluster; cl != nil {
		switch {
		case c.Node == "" || len(c.Node) > member.MaxNameLen:
			return fmt.Errorf("engine config: Node %q: a cluster node needs a name of 1 to %d bytes", c.Node, member.MaxNameLen)
		case cl.Incarnation < 1 || cl.Incarnation > incarnationMax:
			return fmt.Errorf("engine config: Cluster.Incarnation %d: want 1 to %d", cl.Incarnation, incarnationMax)
		case cl.Remote == nil:
			return fmt.Errorf("engine config: Cluster.Remote: a cluster node needs a data plane")
		}
	}
	return nil
}

// Addresses of the engine's actors on its node. The fronts follow
// frontID0, the devices deviceID0, in order.
const (
	batcherID uint64 = 1
	waiterID  uint64 = 2
	frontID0  uint64 = 8
	deviceID0 uint64 = 16
	// splitBase: in a cluster whose registry names its models, model i's
	// accumulator is splitBase+1+i on every node
	// (actors.SplitAccumulatorID), above every device's ID.
	splitBase uint64 = 1 << 20
)

// localNode is the node name of an engine configured with none.
const localNode = "local"

// statsInFlightMax bounds concurrent Stats calls.
const statsInFlightMax = 64

// waiterShards spreads the waiter table over locks: every request takes
// one twice (register, answer), from many goroutines at once.
const waiterShards = 64

// Engine is the front door: it runs its Fronts (front.go), one Batcher and
// Devices Device actors on a Runtime, and turns a Request into its one
// Reply. Its methods are safe for concurrent use.
type Engine struct {
	cfg     Config
	node    string
	rt      Runtime
	batcher actors.Address
	// accs are the node's accumulators: its batcher, or in a cluster whose
	// registry names its models one per model (the split; accs[0] is then
	// batcher, the first model's). split names the models, in order.
	accs    []actors.Address
	split   []string
	waiter  actors.Address
	fronts  []actors.Address
	devices []actors.Address
	// announced is the batcher's incarnation the fronts were told of.
	announced atomic.Uint64
	// inc is the node's incarnation now (cluster mode): Cluster.Incarnation,
	// or a new life's (Engine.Member).
	inc atomic.Uint64

	nextID   atomic.Uint64
	inFlight atomic.Int64
	shards   [waiterShards]waiterShard

	draining atomic.Bool
	idle     chan struct{} // capacity 1: in-flight count reached zero
	closing  chan struct{} // closed by Close
	// registerHook, set by tests only, runs in submit right before
	// (false) and after (true) the request's waiter entry goes in: a
	// Shutdown there is the race submit's second look at closing covers.
	registerHook func(after bool)
	closeMu      sync.Mutex
	closed       bool

	statsMu      sync.Mutex
	statsSeq     uint64
	statsWaiters map[uint64]chan statsAnswer

	counters counters
	door     *door
	replies  *replyQueue

	// members is the last membership update of each node (cluster mode):
	// what an actor that supervision restarts is told again, its view
	// being new. Bounded by member.DefaultLimit nodes.
	membersMu sync.Mutex
	members   map[string]member.Update
	// lives is the last batcher life each node told of (see lifeBits),
	// bounded as members.
	lives map[string]batcherLife
	// foreign counts messages Deliver got for another node.
	foreign atomic.Int64
}

type waiterShard struct {
	mu sync.Mutex
	// m maps a request in flight to what waits for its one reply.
	m map[uint64]*waiting
	_ [40]byte // keep shards on separate cache lines
}

// waiting is the door's part of a request in flight: whom to hand its
// reply to. Everything else about the request is its front's.
type waiting struct {
	// ch is where a Do waits, done what a Submit is answered with; both
	// are nil once the caller gave up (Do's ctx ended, Cancel): the
	// request is still in flight until its front answers it (by its
	// deadline plus ReplyGrace at the latest).
	ch   chan actors.Reply
	done func(actors.Reply, error)
	// door is the request's tenant count at the door, to leave by.
	door *atomic.Int64
}

// counters are the door's. What happens to a request between the door and
// its reply (resubmissions, duplicates, expiry) is its front's to count.
type counters struct {
	submitted, replied, late, duplicate, abandoned, refused, shed atomic.Int64
}

// Stats is a snapshot of the engine's counters and its batcher's.
type Stats struct {
	Batcher actors.BatcherStats
	// InFlight is the number of requests submitted and not yet answered.
	InFlight int64
	// Submitted counts requests handed to the fronts; Replied the replies
	// that reached a waiting Do.
	Submitted, Replied int64
	// Abandoned counts Do calls that returned because their ctx ended
	// before the reply; Late counts the replies that came after.
	Abandoned, Late int64
	// Unanswered counts requests the fronts answered themselves, Expired,
	// at their deadline plus Config.ReplyGrace: a reply the batcher and
	// devices never sent.
	Unanswered int64
	// Duplicate counts replies for a request already answered (dropped),
	// by its front at its deadline plus grace included.
	Duplicate int64
	// Refused counts Do calls turned away by InFlightMax.
	Refused int64
	// Shed counts requests rejected at the door (see door): past the
	// admission window, or with no healthy device; the batcher never
	// saw them.
	Shed int64
	// Resubmitted counts requests their front handed again to a batcher
	// that was restarted by supervision (and had forgotten them).
	Resubmitted int64
}

// New starts an engine: the runtime, the batcher, the devices. It returns
// once every device has announced itself to the batcher, or fails with
// ErrNotReady when ctx ends first.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	newRuntime := cfg.Runtime
	if newRuntime == nil {
		newRuntime = LinkedRuntime
	}
	node := cmp.Or(cfg.Node, localNode)
	opts := RuntimeOptions{Seed: cfg.Seed, Logger: cfg.Logger}
	if cfg.Cluster != nil {
		opts.Node, opts.Remote, opts.ClockEpoch = node, cfg.Cluster.Remote.Send, ClusterEpoch
	}
	rt, err := newRuntime(opts)
	if err != nil {
		return nil, fmt.Errorf("engine: runtime: %w", err)
	}
	e := &Engine{
		cfg:          cfg,
		node:         node,
		rt:           rt,
		batcher:      actors.Address{Node: node, ID: batcherID},
		waiter:       actors.Address{Node: node, ID: waiterID},
		idle:         make(chan struct{}, 1),
		closing:      make(chan struct{}),
		statsWaiters: make(map[uint64]chan statsAnswer),
		members:      map[string]member.Update{},
		lives:        map[string]batcherLife{},
	}
	if cfg.Cluster != nil && len(cfg.Batcher.Models) > 0 && len(cfg.Batcher.Models) <= actors.SplitModelsMax {
		// The split: an accumulator per model, as sim/cluster runs a
		// node, and as every node of the cluster must (a front addresses
		// a model's accumulator by its ID on the owner).
		for _, m := range cfg.Batcher.Models {
			e.split = append(e.split, m.Name)
		}
		for _, m := range e.split {
			id, _ := actors.SplitAccumulatorID(splitBase, e.split, m)
			e.accs = append(e.accs, actors.Address{Node: node, ID: id})
		}
		e.batcher = e.accs[0]
	} else {
		e.accs = []actors.Address{e.batcher}
	}
	e.door = newDoor(cfg.Batcher, len(e.accs))
	if cfg.Cluster != nil {
		e.inc.Store(cfg.Cluster.Incarnation)
		// The node's own view starts with itself, so its devices announce
		// themselves to its own batcher (what New waits for) until
		// membership tells of the others.
		e.members[node] = e.self()
	}
	for i := range e.shards {
		e.shards[i].m = make(map[uint64]*waiting)
	}
	e.replies = newReplyQueue()
	go labelled("replies", func() { e.replies.run(e.deliver) })
	if err := e.start(ctx); err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), closeWaitMax)
		defer cancel()
		err = errors.Join(err, rt.Close(closeCtx))
		e.replies.close()
		return nil, err
	}
	return e, nil
}

func (e *Engine) start(ctx context.Context) error {
	cfg := e.cfg
	if err := e.rt.Listen(e.waiter, e.receive); err != nil {
		return fmt.Errorf("engine: waiter: %w", err)
	}
	// A batcher that restarts asks these to announce themselves again
	// (actors.Reannounce), or it would know no device.
	addrs := make([]actors.Address, cfg.Devices)
	for i := range addrs {
		addrs[i] = actors.Address{Node: e.node, ID: deviceID0 + uint64(i)}
	}
	cfg.Batcher.Devices = addrs
	for i := range frontsCount {
		e.fronts = append(e.fronts, actors.Address{Node: e.node, ID: frontID0 + uint64(i)})
	}
	// The lives of the node's accumulators: each starts at the first, and
	// each restart by supervision takes the next of them all, so that a
	// front sees a higher life of the node whichever accumulator
	// restarted (see lifeBits). The fronts start knowing the first.
	var lives atomic.Uint64
	lives.Store(1)
	e.announced.Store(1)
	for i, addr := range e.accs {
		bc := cfg.Batcher
		if e.split != nil {
			bc.Models = slices.Clone(cfg.Batcher.Models[i : i+1])
		}
		// Validated above, so NewBatcher cannot fail, and a restart can
		// make a fresh value the same way.
		if _, err := actors.NewBatcher(bc); err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		var spawned atomic.Bool
		// newBatcher is called once per incarnation: the first, and one
		// per restart.
		newBatcher := func() actors.Actor {
			b, err := actors.NewBatcher(bc)
			if err != nil {
				panic("batchd: engine: batcher config went bad: " + err.Error())
			}
			inc := uint64(1)
			if spawned.Swap(true) {
				inc = lives.Add(1)
			}
			h := &batcherHost{b: b, inc: inc, restarted: inc > 1, node: e.node, fronts: e.fronts, announced: &e.announced, door: e.door, slot: i}
			if cfg.Cluster != nil {
				// The node's incarnation is membership's; the
				// accumulator's life is told to the fronts of every node
				// (see lifeBits).
				h.replay, h.devices, h.tell = e.membersNow, cfg.Devices, e.tellRestart
				h.watch = newRemoteWatch(e.node, e.remoteBatchBound)
			}
			return h
		}
		if err := e.rt.Spawn(addr, newBatcher, nil); err != nil {
			return fmt.Errorf("engine: batcher: %w", err)
		}
	}
	for i, addr := range e.fronts {
		newFront, err := e.newFront(i)
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		if err := e.rt.Spawn(addr, newFront, nil); err != nil {
			return fmt.Errorf("engine: front %d: %w", i, err)
		}
	}
	for i, addr := range addrs {
		b, err := e.backend(i)
		if err != nil {
			return err
		}
		newDevice := func() actors.Actor {
			if cl := cfg.Cluster; cl != nil {
				var d *actors.Device
				var err error
				if e.split != nil {
					d, err = actors.NewSplitClusterDevice(cfg.Device, splitBase, e.split, e.inc.Load())
				} else {
					d, err = actors.NewClusterDevice(cfg.Device, batcherID, e.inc.Load())
				}
				if err != nil {
					panic("batchd: engine: device config went bad: " + err.Error())
				}
				return &memberHost{a: d, replay: e.membersNow}
			}
			d, err := actors.NewDevice(cfg.Device, e.batcher)
			if err != nil {
				panic("batchd: engine: device config went bad: " + err.Error())
			}
			return d
		}
		if err := e.rt.Spawn(addr, newDevice, b); err != nil {
			return fmt.Errorf("engine: device %d: %w", i, err)
		}
		e.devices = append(e.devices, addr)
	}
	// Wait for the devices to register, so the first requests are not
	// turned away for want of a device.
	for {
		s, err := e.batcherStats(ctx)
		if err != nil {
			return fmt.Errorf("engine: %w: %w", ErrNotReady, err)
		}
		if s.Devices >= cfg.Devices {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("engine: %w: %d of %d devices: %w", ErrNotReady, s.Devices, cfg.Devices, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func (e *Engine) backend(i int) (Backend, error) {
	var b Backend
	if e.cfg.Backend != nil {
		b = e.cfg.Backend(i)
		if b == nil {
			return nil, fmt.Errorf("engine: Backend(%d) returned nil", i)
		}
	} else {
		ec := DefaultEmulatedConfig()
		ec.Latency = e.cfg.Device.Latency
		ec.BatchMax = e.cfg.Batcher.BatchMax
		ec.Seed = e.cfg.Seed ^ uint64(i+1)*0x9e3779b97f4a7c15
		em, err := NewEmulated(ec)
		if err != nil {
			return nil, fmt.Errorf("engine: device %d: %w", i, err)
		}
		b = em
	}
	return boundedBackend{b: b, latency: e.cfg.Device.Latency, multiple: e.cfg.JobTimeoutMultiple, floor: e.cfg.JobTimeoutMin}, nil
}

// Now is the engine clock, the one request timelines are on.
func (e *Engine) Now() time.Duration { return e.rt.Now() }

// Devices returns the addresses of the device actors.
func (e *Engine) Devices() []actors.Address { return append([]actors.Address(nil), e.devices...) }

// Do submits req and waits for its one Reply. The engine sets req.ID (unique
// in this engine), req.Arrival (now, on the engine clock) and req.ReplyTo.
// req.Deadline is the caller's, on the engine clock (see Now); zero means
// the batcher's SLO. ctx's deadline is not copied into it: a transport's
// own timeout is usually far beyond the SLO the batcher plans with.
//
// Every outcome the batcher or a device decides (completed, failed,
// rejected, expired, cancelled) is a Reply with a nil error. The error is
// for the engine: ctx.Err() when ctx ends first (the request is withdrawn
// with actors.Cancel; its late reply is dropped), ErrClosed, ErrInFlightMax.
//
// Do returns by the request's deadline (at most Arrival plus the batcher's
// TimeoutMax) plus Config.ReplyGrace whatever ctx does: a request the
// batcher and devices have not answered by then is answered Expired by
// its front.
func (e *Engine) Do(ctx context.Context, req actors.Request) (actors.Reply, error) {
	if err := ctx.Err(); err != nil {
		return actors.Reply{}, err // nothing submitted, nothing to withdraw
	}
	ch := replyChans.Get().(chan actors.Reply)
	id, sh, now, answered, err := e.submit(req, ch, nil)
	if answered || err != nil {
		replyChans.Put(ch) // never registered: no one sends on it
		return now, err
	}
	// No case for the engine's closing: Shutdown answers every waiter
	// itself (closeWaiters). A channel every Do selects on is locked
	// twice a request from every core: on an H200 host's 8 server cores,
	// select's channel locks took 2.4% of the server's CPU, and Do's
	// selects were nearly half of the selects' time (a profile; this
	// change was not measured there, and on the development VM's one
	// server core it makes no difference).
	select {
	case r := <-ch:
		replyChans.Put(ch) // emptied, and its one send is done
		return replyOf(r)
	case <-ctx.Done():
		if r, ok := e.abandon(sh, id, ch); ok {
			return replyOf(r)
		}
		e.rt.Send(e.front(id), actors.Cancel{ID: id})
		return actors.Reply{}, ctx.Err()
	}
}

// replyOf is what Do returns for what came on its channel: a reply, or
// closeWaiters' zero Reply (no request's ID is 0), which says the engine
// closed.
func replyOf(r actors.Reply) (actors.Reply, error) {
	if r.ID == 0 {
		return actors.Reply{}, ErrClosed
	}
	return r, nil
}

// Submit hands req to its front and returns at once, with the id the
// engine gave it (see Do for what the engine sets in req). done is called
// exactly once with the request's one Reply, or with an engine error
// (ErrClosed, ErrInFlightMax) and no reply, unless Cancel withdrew the
// request first. It needs no goroutine per request: done runs on an
// engine goroutine (the one that hands replies over), or on the caller's
// before Submit returns when the engine answers at once (shed at the door,
// closed, too many in flight). done must not block, and must not call
// Submit or Cancel itself.
//
// Every request submitted is answered by its deadline plus ReplyGrace at
// the latest, as with Do.
func (e *Engine) Submit(req actors.Request, done func(actors.Reply, error)) uint64 {
	id, _, now, answered, err := e.submit(req, nil, done)
	if answered || err != nil {
		done(now, err)
	}
	return id
}

// Cancel withdraws the request Submit returned id for. It reports true if
// the request was withdrawn before its answer was taken: done will not be
// called. False means done has been or is being called with its answer.
func (e *Engine) Cancel(id uint64) bool {
	sh := &e.shards[id%waiterShards]
	sh.mu.Lock()
	w, waits := sh.m[id]
	if waits {
		w.done = nil // no one waits: the late reply is dropped
	}
	sh.mu.Unlock()
	if waits {
		e.counters.abandoned.Add(1)
		e.rt.Send(e.front(id), actors.Cancel{ID: id})
	}
	return waits
}

// submit is the front door of Do and Submit: the door's admission window,
// the in-flight bound, the waiter table, the message to the front. It
// answers itself, with now (answered) or err, when the door sheds the
// request, the engine is closed or InFlightMax requests are in flight;
// otherwise the request's answer goes to ch (Do's) or done (Submit's).
func (e *Engine) submit(req actors.Request, ch chan actors.Reply, done func(actors.Reply, error)) (id uint64, sh *waiterShard, now actors.Reply, answered bool, err error) {
	if e.isClosed() {
		return 0, nil, actors.Reply{}, false, ErrClosed
	}
	dc, why, retryAfter := e.door.enter(req.Tenant)
	if dc == nil {
		// Shed at the door: answered here, in O(1), without a waiter or
		// a message, which is what keeps shedding cheap when the CPU is
		// the scarce thing.
		e.counters.shed.Add(1)
		t := e.rt.Now()
		id = e.nextID.Add(1)
		return id, nil, actors.Reply{
			ID: id, Outcome: actors.Rejected, Version: req.Version, Reason: why,
			Err:        "overloaded: more requests in flight than the devices can answer within the SLO",
			RetryAfter: retryAfter, Arrival: t, Done: t,
		}, true, nil
	}
	if n := e.inFlight.Add(1); n > int64(e.cfg.InFlightMax) {
		e.inFlight.Add(-1)
		e.door.leave(dc)
		e.counters.refused.Add(1)
		return 0, nil, actors.Reply{}, false, fmt.Errorf("engine: %d in flight: %w", n-1, ErrInFlightMax)
	}
	id = e.nextID.Add(1)
	req.ID = id
	req.Arrival = e.rt.Now()
	req.ReplyTo = e.waiter
	sh = &e.shards[id%waiterShards]
	w := &waiting{ch: ch, done: done, door: dc}
	if e.registerHook != nil {
		e.registerHook(false)
	}
	sh.mu.Lock()
	sh.m[id] = w
	sh.mu.Unlock()
	if e.registerHook != nil {
		e.registerHook(true)
	}
	if e.isClosed() {
		// Shutdown may have swept the waiter table before this entry
		// went in: take it back, unless the sweep has it (then the sweep
		// answers it).
		sh.mu.Lock()
		_, mine := sh.m[id]
		delete(sh.m, id)
		sh.mu.Unlock()
		if mine {
			e.release(w)
			return 0, nil, actors.Reply{}, false, ErrClosed
		}
		return id, sh, actors.Reply{}, false, nil
	}

	e.rt.Send(e.front(id), actors.Submit{Req: req})
	// Counted once sent, so a Submitted count seen elsewhere means those
	// requests are in their front's mailbox, ahead of anything sent later
	// (a Drain included: it goes through the fronts).
	e.counters.submitted.Add(1)
	return id, sh, actors.Reply{}, false, nil
}

// replyChans holds the channels Do waits on. A channel gets one send, from
// whoever took its entry out of the waiter table, so once Do has received
// it no one else holds it; a channel whose Do gave up is never put back.
var replyChans = sync.Pool{New: func() any { return make(chan actors.Reply, 1) }}

// abandon marks a request's waiter as gone. If the reply was already taken
// for it, it is on its way into ch, and abandon returns it instead.
func (e *Engine) abandon(sh *waiterShard, id uint64, ch chan actors.Reply) (actors.Reply, bool) {
	sh.mu.Lock()
	w, waits := sh.m[id]
	if waits {
		w.ch = nil // no one waits: its front's one answer is dropped
	}
	sh.mu.Unlock()
	if !waits {
		r := <-ch // deliver sends right after taking the entry
		replyChans.Put(ch)
		return r, true
	}
	e.counters.abandoned.Add(1)
	return actors.Reply{}, false
}

// receive is the waiter endpoint: every Reply of the engine's requests
// (one per request, from its front), and the actors' stats answers, arrive
// here on the sender's goroutine. Replies are queued for deliver, but for
// rejections; the rest is handled here.
func (e *Engine) receive(msg actors.Message) {
	switch m := msg.(type) {
	case actors.Reply:
		if m.Outcome == actors.Rejected {
			// Admission answers one request at a time, and fast, so it is
			// handed over here: queued, it waited behind the replies of a
			// whole batch and their handlers (replyQueue.run yields to
			// each), milliseconds under overload. The fronts send one
			// reply per request, so it overtakes none of its own.
			e.deliver(m)
			return
		}
		e.replies.put(m) // handed over by deliver (see replyQueue)
	case frontRestarted:
		e.frontLost(m.Front)
	case statsAnswer:
		e.statsMu.Lock()
		ch := e.statsWaiters[m.ID]
		delete(e.statsWaiters, m.ID)
		e.statsMu.Unlock()
		if ch != nil {
			ch <- m // capacity 1
		}
	}
}

// deliver hands a reply to the Do that waits for it, on the reply queue's
// goroutine (or, for a rejection, the sender's).
func (e *Engine) deliver(m actors.Reply) {
	sh := &e.shards[m.ID%waiterShards]
	sh.mu.Lock()
	w := sh.m[m.ID]
	delete(sh.m, m.ID)
	sh.mu.Unlock()
	if w == nil {
		// Not in flight: the fronts answer each request once, so this is
		// a reply that did not come from them.
		e.counters.duplicate.Add(1)
		return
	}
	e.hand(w, m)
}

// hand gives m to whoever waits for w, which its caller took out of the
// waiter table (so no one changes w any more).
func (e *Engine) hand(w *waiting, m actors.Reply) {
	// Released before the reply is handed over, so a caller that has
	// its reply sees it out of the in-flight count.
	e.release(w)
	switch {
	case w.ch != nil:
		e.counters.replied.Add(1)
		w.ch <- m // capacity 1, and only this send: never blocks
	case w.done != nil:
		e.counters.replied.Add(1)
		w.done(m, nil)
	default:
		e.counters.late.Add(1)
	}
}

// takeAll takes the requests that match out of the waiter table.
func (e *Engine) takeAll(match func(id uint64, w *waiting) bool) map[uint64]*waiting {
	out := map[uint64]*waiting{}
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for id, w := range sh.m {
			if match(id, w) {
				delete(sh.m, id)
				out[id] = w
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// frontLost answers Failed every request of front i, which supervision
// restarted after a panic: the fresh Front knows nothing of them, and
// nothing else would answer them. A request handed to the fresh one
// before this ran is answered too; its own later answer is a duplicate.
func (e *Engine) frontLost(i int) {
	lost := e.takeAll(func(id uint64, _ *waiting) bool { return e.front(id) == e.fronts[i] })
	for id, w := range lost {
		e.hand(w, actors.Reply{ID: id, Outcome: actors.Failed, Reason: actors.ReasonAttempts,
			Err: "the request's front actor restarted and lost it", Done: e.rt.Now()})
	}
}

// release takes an answered (or given up) request out of the in-flight
// count and out through the door.
func (e *Engine) release(w *waiting) {
	e.door.leave(w.door)
	if e.inFlight.Add(-1) == 0 && e.draining.Load() {
		select {
		case e.idle <- struct{}{}:
		default:
		}
	}
}

// Drain tells the batcher to stop admitting and to flush its queues without
// lingering, and waits until every request in flight is answered or ctx
// ends. Requests submitted after Drain are rejected by the batcher.
func (e *Engine) Drain(ctx context.Context) error {
	if e.isClosed() {
		return ErrClosed
	}
	e.draining.Store(true)
	for _, f := range e.fronts {
		e.rt.Send(f, actors.Drain{}) // each passes it on behind its Submits
	}
	for e.inFlight.Load() > 0 {
		select {
		case <-e.idle:
		case <-ctx.Done():
			return fmt.Errorf("engine: drain: %d in flight: %w", e.inFlight.Load(), ctx.Err())
		case <-e.closing:
			return ErrClosed
		}
	}
	return nil
}

// closeWaitMax bounds how long Close waits for the runtime's goroutines.
const closeWaitMax = 10 * time.Second

// Close stops the engine at once: Do calls still waiting return ErrClosed,
// and the runtime stops its actors, timers and workers. Drain first to
// answer what is in flight. It waits up to 10 s for the runtime's
// goroutines; use Shutdown to choose.
func (e *Engine) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeWaitMax)
	defer cancel()
	return e.Shutdown(ctx)
}

// Shutdown is Close, waiting for the runtime's goroutines until ctx ends.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.closeMu.Lock()
	if e.closed {
		e.closeMu.Unlock()
		return nil
	}
	e.closed = true
	close(e.closing)
	e.closeMu.Unlock()
	e.closeWaiters()
	err := e.rt.Close(ctx)
	// The runtime has stopped: no reply comes any more.
	e.replies.close()
	if err != nil {
		return fmt.Errorf("engine: close: %w", err)
	}
	return nil
}

// closeWaiters answers every request still awaited: a Do returns
// ErrClosed (its channel gets the zero Reply, see replyOf), a Submit's
// done is called with ErrClosed. (A reply that comes after is a
// duplicate.) A request submitted while it sweeps is answered by its
// submit, which looks at the engine's closing once its entry is in.
func (e *Engine) closeWaiters() {
	for _, w := range e.takeAll(func(uint64, *waiting) bool { return true }) {
		e.release(w)
		switch {
		case w.ch != nil:
			w.ch <- actors.Reply{} // capacity 1, and only this send
		case w.done != nil:
			w.done(actors.Reply{}, ErrClosed)
		}
	}
}

func (e *Engine) isClosed() bool {
	select {
	case <-e.closing:
		return true
	default:
		return false
	}
}

// Ready reports whether a request for model can be served now: the
// engine is not draining or closed, and a device that holds the model is
// up (registered and not quarantined, as the batcher last published). An
// empty model asks about any model. It reads two atomics: cheap enough for
// a readiness probe under load.
func (e *Engine) Ready(model string) bool {
	if e.isClosed() || e.draining.Load() || e.door.healthy.Load() == 0 {
		return false
	}
	// Every device of this engine holds the same models.
	return model == "" || len(e.cfg.Device.Models) == 0 || slices.Contains(e.cfg.Device.Models, model)
}

// Requests is how many requests came to the front door: submitted, shed
// at the door, or refused by InFlightMax. Two atomic loads and an add.
func (e *Engine) Requests() int64 {
	c := &e.counters
	return c.submitted.Load() + c.shed.Load() + c.refused.Load()
}

// Batcher is the address of the engine's batcher actor: in a split (a
// cluster whose registry names its models), the first model's
// accumulator.
func (e *Engine) Batcher() actors.Address { return e.batcher }

// Accumulators are the addresses of the node's accumulators: its batcher,
// or in a split one per model of the registry, in its order.
func (e *Engine) Accumulators() []actors.Address { return slices.Clone(e.accs) }

// Stats returns the door's counters, the fronts' and the batcher's, the
// actors' asked of each actor itself (a message round trip), so no actor
// state is read from outside its goroutine. When an actor cannot answer
// (ctx ended, engine closed) the door's counters come back with the error.
func (e *Engine) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var err error
	s.Batcher, err = e.batcherStats(ctx)
	for _, f := range e.fronts {
		if err != nil {
			break
		}
		var a statsAnswer
		a, err = e.query(ctx, f, false)
		s.Resubmitted += a.Front.Resubmitted
		s.Unanswered += a.Front.Expired
		s.Duplicate += a.Front.Duplicates
	}
	c := &e.counters
	s.InFlight = e.inFlight.Load()
	s.Submitted, s.Replied = c.submitted.Load(), c.replied.Load()
	s.Abandoned, s.Late = c.abandoned.Load(), c.late.Load()
	s.Duplicate += c.duplicate.Load()
	s.Refused, s.Shed = c.refused.Load(), c.shed.Load()
	return s, err
}

// batcherStats is the node's accumulators' stats together
// (actors.BatcherStats.Add).
func (e *Engine) batcherStats(ctx context.Context) (actors.BatcherStats, error) {
	var s actors.BatcherStats
	err := e.queryAccs(ctx, false, func(a statsAnswer) { s = s.Add(a.Stats) })
	return s, err
}

// Signals returns the batcher's signals and autoscaling recommendation
// (actors.Batcher.Signals), asked of the batcher actor like Stats; in a
// split, the accumulators' together (actors.Signals.Add).
func (e *Engine) Signals(ctx context.Context) (actors.Signals, error) {
	var s actors.Signals
	err := e.queryAccs(ctx, true, func(a statsAnswer) { s = s.Add(a.Signals, e.cfg.Batcher.TargetUtilization) })
	return s, err
}

// queryAccs asks each of the node's accumulators in turn (query) and
// hands fold each answer, up to the first that fails.
func (e *Engine) queryAccs(ctx context.Context, signals bool, fold func(statsAnswer)) error {
	for _, acc := range e.accs {
		a, err := e.query(ctx, acc, signals)
		if err != nil {
			return err
		}
		fold(a)
	}
	return nil
}

// query asks the batcher host or a front host, at to, for its actor's
// stats, and the batcher's signals too if asked: a message round trip,
// bounded by statsInFlightMax queries at once.
func (e *Engine) query(ctx context.Context, to actors.Address, signals bool) (statsAnswer, error) {
	if e.isClosed() {
		return statsAnswer{}, ErrClosed
	}
	ch := make(chan statsAnswer, 1)
	e.statsMu.Lock()
	if len(e.statsWaiters) >= statsInFlightMax {
		e.statsMu.Unlock()
		return statsAnswer{}, fmt.Errorf("engine: stats: %w", ErrInFlightMax)
	}
	e.statsSeq++
	id := e.statsSeq
	e.statsWaiters[id] = ch
	e.statsMu.Unlock()
	e.rt.Send(to, statsQuery{ID: id, ReplyTo: e.waiter, Signals: signals})
	forget := func() {
		e.statsMu.Lock()
		delete(e.statsWaiters, id)
		e.statsMu.Unlock()
	}
	select {
	case a := <-ch:
		return a, nil
	case <-ctx.Done():
		forget()
		return statsAnswer{}, fmt.Errorf("engine: stats: %w", ctx.Err())
	case <-e.closing:
		forget()
		return statsAnswer{}, ErrClosed
	}
}
