package cluster

import (
	"fmt"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/sim"
	"github.com/batchd/batchd/sim/swim"
)

// The actors of every node, by ID.
const (
	AccumulatorID uint64 = 1
	FrontID       uint64 = 2
	WaiterID      uint64 = 3
	DeviceIDBase  uint64 = 100
	// SplitIDBase: with Config.Split, model i's accumulator on every node
	// is SplitIDBase+1+i (actors.SplitAccumulatorID).
	SplitIDBase uint64 = 1000
	// sourceIDBase numbers the traffic sources, on the clients' node "".
	sourceIDBase uint64 = 1 << 20
)

// Limits.
const (
	MaxNodes          = 200
	MaxDevicesPerNode = 64
	MaxDuration       = time.Hour
)

// Config is one cluster run.
type Config struct {
	Seed uint64
	// Nodes is the number of nodes (named n000, n001, ...); each has a
	// front, an accumulator and DevicesPerNode devices.
	Nodes          int
	DevicesPerNode int
	// Devices, when positive, is the fleet's device count instead, dealt
	// round-robin (node i holds devices i, i+Nodes, ...): a fleet smaller
	// than its node count leaves some nodes with fronts and no device.
	Devices int
	// Rate is the total offered load, spread evenly over the fronts (as a
	// load balancer would), each a Poisson source.
	Rate float64
	// Models are the models the traffic asks for, in equal shares, and
	// every device holds.
	Models []string
	// Duration is when arrivals stop; Drain how long after it everything
	// must be answered.
	Duration, Drain time.Duration
	// Batcher is every accumulator's policy; Device every device's.
	Batcher actors.BatcherConfig
	Device  actors.DeviceConfig
	// Grace is the front's wait past a deadline before it answers Expired.
	Grace time.Duration
	// Link is the network between nodes.
	Link LinkConfig
	// Events are the true events: crashes, restarts, leaves, partitions.
	// Membership learns of them through the SWIM model (SWIM).
	Events []swim.Event
	// SWIM is the membership protocol's settings (swim.DefaultConfig's
	// LAN settings by default; its Nodes, Seed, Until, Events, Latency
	// and Loss are the run's).
	SWIM swim.Config
	// PerNode is the per-node batching policy: each front sends to its own
	// node's accumulator and each device serves only its own node, so no
	// request leaves its node.
	PerNode bool
	// Split runs one accumulator per model on every node (actors'
	// split: the front sends a request to its model's accumulator at the
	// model's owner, a device announces itself to the accumulator of each
	// model it holds and claims their offers in the batcher's order)
	// instead of one accumulator per node for every model it owns. On by
	// default.
	Split bool
	// Observers see every delivery, after the run's own checker.
	Observers []sim.Observer
	// LeaveDrainMax bounds a leaving node's drain. A node leaves as a
	// live one does: it announces its leave (the others move what waits
	// there), keeps serving for the hand-over grace (SWIM.LeaveGrace, as
	// long as the live cluster.handover_grace), then takes no new request
	// and stops once its front has answered what it holds and its devices
	// have ended their batches, or LeaveDrainMax after the grace. Default
	// 30 s.
	LeaveDrainMax time.Duration
}

// leaveDrainStep is how often a draining node is checked.
const leaveDrainStep = 10 * time.Millisecond

// LinkConfig is the network model of every link between two nodes.
type LinkConfig struct {
	// Latency is the one-way delay's fixed part; Jitter the mean of an
	// exponential part added to it. A link keeps its messages' order.
	Latency, Jitter time.Duration
	// Loss is each message's chance of being lost, in [0, 1).
	Loss float64
}

// DefaultConfig is a 3-node cluster of 2 devices each at the seeds'
// figures (batches of up to 100 at 100 ms, SLO 200 ms), a LAN link of
// 0.2 ms + 0.05 ms, 600 req/s for 30 s.
func DefaultConfig() Config {
	b := actors.DefaultBatcherConfig()
	b.BatchMax = 100
	sw := swim.DefaultConfig(nil)
	return Config{
		Seed:           1,
		Nodes:          3,
		DevicesPerNode: 2,
		Rate:           600,
		Models:         []string{"m"},
		Duration:       30 * time.Second,
		Drain:          10 * time.Second,
		Batcher:        b,
		Device:         actors.DefaultDeviceConfig(),
		Grace:          100 * time.Millisecond,
		Link:           LinkConfig{Latency: 200 * time.Microsecond, Jitter: 50 * time.Microsecond},
		SWIM:           sw,
		Split:          true,
	}
}

// Validate reports the first unusable setting.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > MaxNodes:
		return fmt.Errorf("cluster config: Nodes %d: want 1 to %d", c.Nodes, MaxNodes)
	case c.DevicesPerNode < 0 || c.DevicesPerNode > MaxDevicesPerNode:
		return fmt.Errorf("cluster config: DevicesPerNode %d: want 0 to %d", c.DevicesPerNode, MaxDevicesPerNode)
	case c.Devices < 0 || c.Devices > c.Nodes*MaxDevicesPerNode:
		return fmt.Errorf("cluster config: Devices %d: want 0 to %d", c.Devices, c.Nodes*MaxDevicesPerNode)
	case c.Rate < 0 || c.Rate > 1e7:
		return fmt.Errorf("cluster config: Rate %v: want 0 to 1e7", c.Rate)
	case len(c.Models) == 0:
		return fmt.Errorf("cluster config: Models: want at least one")
	case c.Duration <= 0 || c.Duration > MaxDuration || c.Drain < 0 || c.Drain > MaxDuration:
		return fmt.Errorf("cluster config: Duration %v, Drain %v: want (0, %v]", c.Duration, c.Drain, MaxDuration)
	case c.Link.Latency < 0 || c.Link.Jitter < 0 || c.Link.Loss < 0 || c.Link.Loss >= 1:
		return fmt.Errorf("cluster config: Link %+v: delays must not be negative, loss in [0, 1)", c.Link)
	case c.Rate*(c.Duration.Seconds()+1) > 0.9*recsMax:
		return fmt.Errorf("cluster config: Rate %v for %v: more requests than the checker holds (%d)", c.Rate, c.Duration, recsMax)
	case c.Grace < 0:
		return fmt.Errorf("cluster config: Grace %v: must not be negative", c.Grace)
	case c.LeaveDrainMax < 0 || c.LeaveDrainMax > MaxDuration:
		return fmt.Errorf("cluster config: LeaveDrainMax %v: want 0 (the default) to %v", c.LeaveDrainMax, MaxDuration)
	case c.Split && len(c.Models) > actors.SplitModelsMax:
		return fmt.Errorf("cluster config: Split of %d models: at most %d", len(c.Models), actors.SplitModelsMax)
	}
	for i, m := range c.Models {
		if m == "" || slices.Index(c.Models, m) != i {
			return fmt.Errorf("cluster config: Models[%d] %q: empty or listed twice", i, m)
		}
	}
	for i, e := range c.Events {
		if e.At < 0 || e.At >= c.Duration+c.Drain {
			return fmt.Errorf("cluster config: Events[%d] at %v: want within the run (%v)", i, e.At, c.Duration+c.Drain)
		}
	}
	if err := c.Batcher.Validate(); err != nil {
		return fmt.Errorf("cluster config: %w", err)
	}
	return c.Device.Validate()
}

// NodeName is the name of node i.
func NodeName(i int) string { return fmt.Sprintf("n%03d", i) }

// run is one Run's state: the world, the truth of each node and the checker.
type run struct {
	cfg   Config
	w     *sim.World
	names []string
	index map[string]int // names[i] → i
	up    []bool
	// serving says whether the load balancer sends node i traffic: from
	// its start in the first life (the cluster is formed), and after a
	// restart once its view holds another member (its join's push-pull
	// came back), as a live node joins before it serves.
	serving []bool
	life    []int // the node's lives so far (0: its first)
	// drainUntil is, for a node that left and drains, when its drain
	// ends at the latest (0: not draining).
	drainUntil []time.Duration
	// fronts, accs and devsOf are node i's actors in its current life,
	// for the drain's check.
	fronts []*actors.Front
	accs   [][]*actors.Batcher
	devsOf [][]*sim.Device
	inc    []uint64 // its incarnation in this life
	lat    actors.LatencyModel
	devs   []*sim.Device
	check  *checker
}

// Run simulates the cluster and checks it (see Report).
func Run(cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	wall := time.Now()
	r := &run{cfg: cfg, lat: cfg.Device.Latency}
	for i := range cfg.Nodes {
		r.names = append(r.names, NodeName(i))
	}
	r.index = map[string]int{}
	for i, n := range r.names {
		r.index[n] = i
	}
	for i, e := range cfg.Events {
		for _, n := range append(append([]string{e.Node}, e.A...), e.B...) {
			if _, ok := r.index[n]; !ok && n != "" {
				return Report{}, fmt.Errorf("cluster config: Events[%d]: unknown node %q", i, n)
			}
		}
	}
	r.up = make([]bool, cfg.Nodes)
	r.serving = make([]bool, cfg.Nodes)
	r.drainUntil = make([]time.Duration, cfg.Nodes)
	r.fronts = make([]*actors.Front, cfg.Nodes)
	r.accs = make([][]*actors.Batcher, cfg.Nodes)
	r.devsOf = make([][]*sim.Device, cfg.Nodes)
	if r.cfg.LeaveDrainMax == 0 {
		r.cfg.LeaveDrainMax = 30 * time.Second
	}
	r.life = make([]int, cfg.Nodes)
	r.inc = make([]uint64, cfg.Nodes)

	end := cfg.Duration + cfg.Drain
	sw := cfg.SWIM
	sw.Nodes, sw.Seed, sw.Until, sw.Events = r.names, cfg.Seed, end, cfg.Events
	sw.Latency, sw.Loss = max(cfg.Link.Latency, time.Microsecond), cfg.Link.Loss
	res, err := swim.Run(sw)
	if err != nil {
		return Report{}, fmt.Errorf("cluster: membership model: %w", err)
	}

	net := newNetwork(cfg, r.index, sim.NewStream(cfg.Seed, "cluster/net"))
	net.down = func(i int) bool { return !r.up[i] }
	net.closed = func(i int) bool { return !r.serving[i] }
	wc := sim.DefaultWorldConfig(cfg.Seed)
	wc.Network = net
	r.w = sim.NewWorld(wc)
	r.check = newChecker(r)
	r.w.Observe(r.check)
	for _, o := range cfg.Observers {
		r.w.Observe(o)
	}

	// The clients: one source per front, on the node that never fails.
	n := uint64(cfg.Nodes)
	var sources []*sim.Traffic
	for i, name := range r.names {
		tc := sim.DefaultTrafficConfig()
		tc.Rate = cfg.Rate / float64(cfg.Nodes)
		tc.Stop = cfg.Duration
		tc.Mix = nil
		for _, m := range cfg.Models {
			tc.Mix = append(tc.Mix, sim.ModelMix{Model: m, Version: "v1", Weight: 1})
		}
		if len(cfg.Batcher.Tenants) > 0 {
			tc.Tenants = nil
			for _, t := range cfg.Batcher.Tenants {
				tc.Tenants = append(tc.Tenants, t.Name)
			}
		}
		tc.Target = actors.Address{Node: name, ID: FrontID}
		tc.ReplyTo = actors.Address{Node: name, ID: WaiterID}
		tc.IDFirst, tc.IDStep = uint64(i)+1, n
		t, err := sim.NewTraffic(tc)
		if err != nil {
			return Report{}, fmt.Errorf("cluster: %w", err)
		}
		sources = append(sources, t)
		r.w.Spawn(actors.Address{ID: sourceIDBase + uint64(i)}, t)
	}
	for i := range r.names {
		if err := r.start(i, 1); err != nil {
			return Report{}, err
		}
	}

	// The run: the world between the moments the harness acts (a node's
	// true crash or restart, a membership delivery), in time order.
	acts := r.acts(res)
	for k := 0; k <= len(acts); {
		at := end
		if k < len(acts) {
			at = acts[k].at
		}
		if r.draining() {
			at = min(at, r.w.Now()+leaveDrainStep)
		}
		if err := r.w.RunUntil(at); err != nil {
			return Report{}, fmt.Errorf("cluster: %w", err)
		}
		r.stopDrained()
		switch {
		case k < len(acts) && at == acts[k].at:
			if err := acts[k].do(); err != nil {
				return Report{}, err
			}
			k++
		case k == len(acts) && at == end:
			k++
		}
	}
	var offered int64
	for _, s := range sources {
		offered += s.Offered()
	}
	return r.check.report(offered, res, time.Since(wall)), nil
}

type act struct {
	at time.Duration
	do func() error
}

// acts lists the harness's actions: the true crashes, restarts and leaves,
// and every membership delivery to a node in the life it was meant for.
func (r *run) acts(res *swim.Result) []act {
	var out []act
	for _, e := range r.cfg.Events {
		i := r.index[e.Node]
		switch e.Kind {
		case swim.Crash:
			out = append(out, act{e.At, func() error { r.crash(i); return nil }})
		case swim.Leave:
			// The others move what waits there when they see it leave;
			// after the hand-over grace it takes nothing new and drains.
			// A node down at the leave does not leave (as in the SWIM
			// model), nor does a later life of it.
			life := -1
			out = append(out, act{e.At, func() error {
				if r.up[i] {
					life = r.life[i]
				}
				return nil
			}})
			out = append(out, act{e.At + r.cfg.SWIM.LeaveGrace, func() error {
				if r.up[i] && r.life[i] == life && r.drainUntil[i] == 0 {
					r.serving[i] = false
					r.drainUntil[i] = r.w.Now() + r.cfg.LeaveDrainMax
				}
				return nil
			}})
		case swim.Restart:
			out = append(out, act{e.At, func() error {
				if r.drainUntil[i] != 0 {
					r.crash(i) // the drain ran past the restart
				}
				if r.up[i] {
					return nil
				}
				return r.start(i, 0)
			}})
		}
	}
	for _, d := range res.Deliveries {
		d := d
		i := r.index[d.Observer]
		out = append(out, act{d.At, func() error {
			if !r.up[i] || r.life[i] != d.Life {
				return nil
			}
			if d.Update.Node == d.Observer && d.Update.Kind == member.Alive {
				r.inc[i] = max(r.inc[i], d.Update.Inc)
			}
			if d.Update.Kind == member.Dead {
				r.check.dead(d.At, d.Update.Node)
			}
			r.tell(i, d.Update)
			if d.Update.Node != d.Observer && d.Update.Kind.Live() {
				// The view has the cluster: the updates of one
				// push-pull come at one instant, and the load
				// balancer's next request comes after them.
				r.serving[i] = true
			}
			return nil
		}})
	}
	// Stable: at one instant, truth before the deliveries it causes.
	slices.SortStableFunc(out, func(a, b act) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	return out
}

// start brings node i up: inc is its incarnation (0: one more than its
// last life's, as the membership model restarts it).
func (r *run) start(i int, inc uint64) error {
	if inc == 0 {
		inc = r.inc[i] + 1
		r.life[i]++
	}
	r.up[i], r.inc[i] = true, inc
	r.accs[i], r.devsOf[i] = nil, nil
	// A first life starts in the formed cluster; a node alone has no one
	// to join.
	r.serving[i] = r.life[i] == 0 || r.cfg.Nodes == 1
	name := r.names[i]
	self := func(id uint64) actors.Address { return actors.Address{Node: name, ID: id} }

	fc := actors.DefaultFrontConfig(name)
	fc.Incarnation, fc.Accumulator, fc.SLO, fc.Grace = inc, AccumulatorID, r.cfg.Batcher.SLO, r.cfg.Grace
	fc.Local = r.cfg.PerNode
	var local []actors.Address // the node's accumulators
	if r.cfg.Split {
		fc.Accumulator, fc.Split = SplitIDBase, r.cfg.Models
		for _, m := range r.cfg.Models {
			bc := r.cfg.Batcher
			if len(bc.Models) > 0 {
				i := slices.IndexFunc(bc.Models, func(c actors.ModelConfig) bool { return c.Name == m })
				if i < 0 {
					return fmt.Errorf("cluster: model %q is not in the batcher's registry", m)
				}
				bc.Models = []actors.ModelConfig{bc.Models[i]}
			}
			acc, err := actors.NewBatcher(bc)
			if err != nil {
				return fmt.Errorf("cluster: %w", err)
			}
			r.accs[i] = append(r.accs[i], acc)
			id, _ := actors.SplitAccumulatorID(SplitIDBase, r.cfg.Models, m)
			r.w.Spawn(self(id), acc)
			local = append(local, self(id))
		}
	} else {
		acc, err := actors.NewBatcher(r.cfg.Batcher)
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		r.accs[i] = append(r.accs[i], acc)
		r.w.Spawn(self(AccumulatorID), acc)
		local = append(local, self(AccumulatorID))
	}
	front, err := actors.NewFront(fc)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	r.fronts[i] = front
	r.w.Spawn(self(FrontID), front)
	r.w.Spawn(self(WaiterID), waiter{})
	for k := range r.devicesOf(i) {
		dc := r.cfg.Device
		dc.Models = r.cfg.Models
		var d *actors.Device
		switch {
		case r.cfg.PerNode:
			d, err = actors.NewSharedDevice(dc, local)
		case r.cfg.Split:
			d, err = actors.NewSplitClusterDevice(dc, SplitIDBase, r.cfg.Models, inc)
		default:
			d, err = actors.NewClusterDevice(dc, AccumulatorID, inc)
		}
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		addr := self(DeviceIDBase + uint64(k))
		ex := sim.NewDevice(r.lat, sim.FaultPlan{}, r.w.Stream(fmt.Sprintf("device/%s/%d/%d", name, k, r.life[i])))
		r.devs = append(r.devs, ex)
		r.devsOf[i] = append(r.devsOf[i], ex)
		r.w.SetExecutor(addr, ex)
		r.w.Spawn(addr, d)
	}
	return nil
}

// draining says whether a node that left is draining.
func (r *run) draining() bool {
	for _, d := range r.drainUntil {
		if d != 0 {
			return true
		}
	}
	return false
}

// stopDrained stops each draining node that is done (see
// Config.LeaveDrainMax), or out of time.
func (r *run) stopDrained() {
	now := r.w.Now()
	for i, until := range r.drainUntil {
		if until != 0 && (now >= until || r.drained(i, now)) {
			r.crash(i)
		}
	}
}

// drained says whether node i holds nothing: its front has answered every
// request it took, its accumulators hold none, its devices run none.
func (r *run) drained(i int, now time.Duration) bool {
	if r.fronts[i].Stats().InFlight > 0 {
		return false
	}
	for _, a := range r.accs[i] {
		if a.Stats().Held > 0 {
			return false
		}
	}
	for _, d := range r.devsOf[i] {
		if d.LastEnd() > now {
			return false
		}
	}
	return true
}

func (r *run) crash(i int) {
	r.drainUntil[i] = 0
	if !r.up[i] {
		return
	}
	r.up[i], r.serving[i] = false, false
	r.w.Crash(r.names[i])
	r.check.crashed(i)
}

// tell delivers a membership update to every actor of node i that keeps a
// view: the front, the accumulator and the devices.
func (r *run) tell(i int, u member.Update) {
	name := r.names[i]
	r.w.Inject(r.w.Now(), actors.Address{Node: name, ID: FrontID}, u)
	if r.cfg.PerNode {
		return // nothing leaves the node: the front routes to itself
	}
	if r.cfg.Split {
		for _, m := range r.cfg.Models {
			id, _ := actors.SplitAccumulatorID(SplitIDBase, r.cfg.Models, m)
			r.w.Inject(r.w.Now(), actors.Address{Node: name, ID: id}, u)
		}
	} else {
		r.w.Inject(r.w.Now(), actors.Address{Node: name, ID: AccumulatorID}, u)
	}
	for k := range r.devicesOf(i) {
		r.w.Inject(r.w.Now(), actors.Address{Node: name, ID: DeviceIDBase + uint64(k)}, u)
	}
}

// devicesOf is the number of devices node i holds.
func (r *run) devicesOf(i int) int {
	if r.cfg.Devices <= 0 {
		return r.cfg.DevicesPerNode
	}
	n := r.cfg.Devices / r.cfg.Nodes
	if i < r.cfg.Devices%r.cfg.Nodes {
		n++
	}
	return n
}

// waiter stands for the connections of a node's front: the checker reads
// what reaches it.
type waiter struct{}

func (waiter) Receive(actors.Context, actors.Message) {}
