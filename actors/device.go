package actors

import (
	"fmt"
	"slices"
	"time"

	"github.com/batchd/batchd/actors/member"
)

// Device stands for one GPU. It announces itself ready to its batcher, runs
// one batch at a time through the runtime (Context.Exec), answers every item
// straight to its waiter, and then reports BatchDone.
//
// Failures:
//   - a per-item error fails only that item;
//   - a whole-batch error splits the batch in halves and runs each, so a
//     poison input ends up alone and fails alone (at most 2n-1 runs for n
//     items). An item whose deadline passes meanwhile is answered Expired
//     but still runs, unanswered, until the poison is found (the batcher
//     remembers it: BatchDone.Isolated); at a batch time of half the SLO
//     no split round fits any deadline, and without this no poison would
//     ever be isolated, so every copy of it would fail a whole batch;
//   - a device fault, or a run still going at WatchdogMultiple times its
//     predicted latency (hung), aborts the batch: the device reports the
//     items it has not answered to the batcher, which re-queues them, and
//     restarts after an exponential backoff. After QuarantineAfter failures
//     in a row it reports DeviceDown and stays out for QuarantineFor. A late
//     result of an abandoned run is dropped, since its items now belong to
//     another attempt.
type Device struct {
	cfg     DeviceConfig
	batcher Address
	// batchers are where the device announces itself: its batcher, or in a
	// cluster the owners of the models it holds (see NewClusterDevice).
	batchers []Address
	// from is the batcher whose batch is running.
	from    Address
	cluster *deviceCluster
	// offers gathered in the window open since the first one (a device
	// that serves several batchers); offerGen tells a stale window's timer.
	offers   []Offer
	offerGen uint64

	incarnation uint64
	phase       devicePhase
	batch       Batch
	cur         []int   // indexes into batch.Items of the run in progress
	todo        [][]int // runs still to do for this batch, last one next
	job         uint64  // the run in progress; 0 when none
	jobSeq      uint64
	watchdog    TimerID
	failures    int // in a row
	restartGen  uint64
	// reannounce: a batcher asked (Reannounce) while a batch ran; tell it
	// once the batch is done.
	reannounce bool
	// isolated are the items of the batch that failed a run alone with a
	// whole-batch error, for BatchDone.
	isolated []uint64
	// answered marks the items of a split batch already answered
	// (Expired), which run on only to isolate the poison; again those
	// that failed alone once and run alone a second time, so that a
	// transient error is not taken for a poison.
	answered, again []bool
	// Asking ahead (DeviceConfig.AskAhead, a device of one batcher): asked
	// is set while the device has asked for its next batch and not had
	// it; ahead is the batch that came (ID 0: none), which starts as soon
	// as the running one ends.
	asked bool
	ahead Batch
}

type devicePhase uint8

const (
	deviceIdle devicePhase = iota + 1
	deviceRunning
	deviceRestarting
	deviceClaiming // claimed an offer; waiting for its batch
)

type watchdogFired struct{ job uint64 }
type restartDue struct{ gen uint64 }

// NewDevice returns a Device that serves the batcher at batcher.
func NewDevice(cfg DeviceConfig, batcher Address) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if batcher.IsZero() {
		return nil, fmt.Errorf("device: no batcher address")
	}
	return &Device{cfg: cfg, batcher: batcher, batchers: []Address{batcher}}, nil
}

// NewSharedDevice returns a Device that serves several batchers on one
// node: the accumulators of the models it holds, in a split (one
// accumulator per model). It offers itself to all of them and claims the
// best offer (see Offer).
func NewSharedDevice(cfg DeviceConfig, batchers []Address) (*Device, error) {
	if len(batchers) == 0 || len(batchers) > SplitModelsMax {
		return nil, fmt.Errorf("device: %d batchers: want 1 to %d", len(batchers), SplitModelsMax)
	}
	d, err := NewDevice(cfg, batchers[0])
	if err != nil {
		return nil, err
	}
	d.batchers = slices.Clone(batchers)
	return d, nil
}

// SplitModelsMax bounds the models of a split: the accumulators one
// device or front may address.
const SplitModelsMax = 256

// SplitAccumulatorID is the actor ID of model's accumulator in a split of
// models (one accumulator per model, the same on every node): base+1+i
// for models[i]; ok is false for a model not in the list.
func SplitAccumulatorID(base uint64, models []string, model string) (id uint64, ok bool) {
	i := slices.Index(models, model)
	if i < 0 {
		return 0, false
	}
	return base + 1 + uint64(i), true
}

// ClusterHeartbeat is how often an idle device in a cluster announces
// itself again to the batchers it serves, so that one lost message (its
// DeviceReady, a RunBatch, a BatchDone) costs at most this long.
const ClusterHeartbeat = time.Second

type deviceBeat struct{}

// ClusterOfferWindow is how long a device that serves several batchers
// gathers their offers before it claims the best (unless every one has
// offered): a round trip to a batcher on another node and back, with room
// for the link's jitter. At 0.5 ms a local batcher's offer, in at once, closed
// the window before a remote one's could arrive, so remote models lost
// devices they needed (a request expired queued at 10% load).
const ClusterOfferWindow = 2 * time.Millisecond

type offerWindow struct{ gen uint64 }
type claimTimeout struct{ gen uint64 }

// deviceCluster is what a device in a cluster keeps: its membership view,
// from which it finds the owners of its models.
type deviceCluster struct {
	view *member.View
	// shunned are nodes a message to which came back Undeliverable; the
	// device serves no accumulator there until they come back alive at a
	// higher incarnation, or the data plane reaches them again (PeerUp).
	shunned     map[string]uint64
	accumulator uint64
	// perModel, in a split, are the models that have an accumulator of
	// their own on every node (see SplitAccumulatorID).
	perModel []string
	nodeInc  uint64
}

// isAccumulator reports whether id is an accumulator's actor ID.
func (c *deviceCluster) isAccumulator(id uint64) bool {
	if len(c.perModel) == 0 {
		return id == c.accumulator
	}
	return id > c.accumulator && id <= c.accumulator+uint64(len(c.perModel))
}

// NewClusterDevice returns a Device of a cluster node at incarnation
// nodeInc. It announces itself to the accumulator (actor ID accumulator on
// every node) of each node that owns one of the models it holds
// (cfg.Models; all live nodes if it holds any model), as its membership
// view (member.Update messages) says, again whenever that view changes;
// it takes the first batch that comes and declines (BatchDeclined) any
// other while it runs one. Its incarnations carry nodeInc, so a batcher
// tells a restarted node's device from its old life.
func NewClusterDevice(cfg DeviceConfig, accumulator, nodeInc uint64) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if accumulator == 0 || nodeInc == 0 || nodeInc >= 1<<31 {
		return nil, fmt.Errorf("device: accumulator %d, node incarnation %d: want both positive, the incarnation below 2^31", accumulator, nodeInc)
	}
	return &Device{cfg: cfg, incarnation: nodeInc << 32,
		cluster: &deviceCluster{view: member.NewView(0), shunned: map[string]uint64{}, accumulator: accumulator, nodeInc: nodeInc}}, nil
}

// NewSplitClusterDevice is NewClusterDevice for a split: each model of
// models has its own accumulator on every node (SplitAccumulatorID from
// accumulator), and the device announces itself to the accumulator of
// each model it holds (every one of models if it holds any) at the
// model's owner.
func NewSplitClusterDevice(cfg DeviceConfig, accumulator uint64, models []string, nodeInc uint64) (*Device, error) {
	if len(models) == 0 || len(models) > SplitModelsMax {
		return nil, fmt.Errorf("device: a split of %d models: want 1 to %d", len(models), SplitModelsMax)
	}
	d, err := NewClusterDevice(cfg, accumulator, nodeInc)
	if err != nil {
		return nil, err
	}
	d.cluster.perModel = slices.Clone(models)
	return d, nil
}

// membership applies u to a cluster device's view and announces the device
// to its models' owners if they changed (or a node restarted: its
// accumulator forgot the device).
func (d *Device) membership(ctx Context, u member.Update) {
	c := d.cluster
	if c == nil {
		panic("batchd: membership update to a device outside a cluster")
	}
	if ch, err := c.view.Apply(u); err != nil || ch == member.Ignored {
		return
	}
	unshun(c.shunned, u)
	d.route(ctx)
}

// route finds the batchers to serve (the owners of the device's models
// among the live members it does not shun) and announces the device to
// them.
func (d *Device) route(ctx Context) {
	c := d.cluster
	live := c.view.Live()
	if len(c.shunned) > 0 {
		live = liveExcept(live, c.shunned)
	}
	var to []Address
	if len(c.perModel) > 0 {
		models := d.cfg.Models
		if len(models) == 0 {
			models = c.perModel
		}
		for _, m := range models {
			n, ok := member.NewOwners(c.view.Holders(m, live)).Owner(m)
			id, split := SplitAccumulatorID(c.accumulator, c.perModel, m)
			if a := (Address{Node: n, ID: id}); ok && split && !slices.Contains(to, a) {
				to = append(to, a)
			}
		}
	} else if len(d.cfg.Models) == 0 {
		for _, n := range live {
			to = append(to, Address{Node: n, ID: c.accumulator})
		}
	} else {
		for _, m := range d.cfg.Models {
			if n, ok := member.NewOwners(c.view.Holders(m, live)).Owner(m); ok {
				a := Address{Node: n, ID: c.accumulator}
				if !slices.Contains(to, a) {
					to = append(to, a)
				}
			}
		}
	}
	d.batchers = to
	switch d.phase {
	case deviceIdle:
		d.ready(ctx)
	case deviceRunning:
		d.reannounce = true
	}
}

// offered gathers an Offer while the device is idle: the first opens the
// window. Offers that come while it runs or claims are stale: the batcher
// hears the device is busy, or its next DeviceReady.
func (d *Device) offered(ctx Context, o Offer) {
	if len(d.batchers) < 2 || d.phase != deviceIdle || len(d.offers) >= 64 {
		return
	}
	if slices.ContainsFunc(d.offers, func(p Offer) bool { return p.From == o.From }) {
		return // one offer per batcher and window
	}
	d.offers = append(d.offers, o)
	if len(d.offers) == len(d.batchers) {
		// Every batcher has offered: no better offer can come.
		d.claim(ctx)
		return
	}
	if len(d.offers) == 1 {
		d.offerGen++
		w := d.cfg.OfferWindow
		if w == 0 {
			w = ClusterOfferWindow
		}
		ctx.After(w, offerWindow{gen: d.offerGen})
	}
}

// claim claims the best offer gathered.
func (d *Device) claim(ctx Context) {
	best := d.offers[0]
	for _, o := range d.offers[1:] {
		if o.Before(best) {
			best = o
		}
	}
	d.offers = d.offers[:0]
	d.phase = deviceClaiming
	d.offerGen++
	ctx.Send(best.From, Claim{Device: ctx.Self()})
	w := d.cfg.OfferWindow
	if w == 0 {
		w = ClusterOfferWindow
	}
	ctx.After(20*max(w, ClusterOfferWindow), claimTimeout{gen: d.offerGen})
}

// toBatchers sends msg to every batcher the device serves.
func (d *Device) toBatchers(ctx Context, msg Message) {
	for _, b := range d.batchers {
		ctx.Send(b, msg)
	}
}

// Receive implements Actor.
func (d *Device) Receive(ctx Context, msg Message) {
	switch m := msg.(type) {
	case Start:
		d.announce(ctx)
		if d.cluster != nil {
			ctx.After(ClusterHeartbeat, deviceBeat{})
		}
	case deviceBeat:
		if d.phase == deviceIdle {
			d.ready(ctx)
		}
		ctx.After(ClusterHeartbeat, deviceBeat{})
	case member.Update:
		d.membership(ctx, m)
	case Offer:
		d.offered(ctx, m)
	case offerWindow:
		if m.gen == d.offerGen && d.phase == deviceIdle && len(d.offers) > 0 {
			d.claim(ctx)
		}
	case claimTimeout:
		if m.gen == d.offerGen && d.phase == deviceClaiming {
			d.phase = deviceIdle // the claim or its batch was lost
			d.ready(ctx)
		}
	case PeerUp:
		if c := d.cluster; c != nil && shuns(c.shunned, m.Node) {
			delete(c.shunned, m.Node)
			d.route(ctx)
		}
	case Undeliverable:
		if c := d.cluster; c != nil && c.isAccumulator(m.To.ID) && !shuns(c.shunned, m.To.Node) {
			u, _ := c.view.Get(m.To.Node)
			c.shunned[m.To.Node] = u.Inc
			d.route(ctx)
		}
	case RunBatch:
		if d.asksAhead() && (m.Incarnation != 0 && m.Incarnation != d.incarnation || d.phase == deviceRestarting) {
			// Sent ahead before the device failed: the batcher heard of
			// the failure first (BatchAborted) and re-queued the batch.
			return
		}
		if d.phase == deviceRunning && d.asked {
			if len(m.Batch.Items) == 0 {
				panic(fmt.Sprintf("batchd: device %v got empty batch %d", ctx.Self(), m.Batch.ID))
			}
			d.asked = false
			if d.answered != nil {
				// Isolating a poison: split rounds, not one batch time.
				ctx.Send(d.batchers[0], BatchDeclined{Device: ctx.Self(), BatchID: m.Batch.ID})
				return
			}
			d.ahead = m.Batch
			return
		}
		shared := d.cluster != nil || len(d.batchers) > 1
		if d.phase != deviceIdle && d.phase != deviceClaiming && shared {
			ctx.Send(m.From, BatchDeclined{Device: ctx.Self(), BatchID: m.Batch.ID})
			return
		}
		if shared {
			d.offers = d.offers[:0]
			d.offerGen++
		}
		if d.phase != deviceIdle && d.phase != deviceClaiming {
			panic(fmt.Sprintf("batchd: device %v got batch %d while not idle", ctx.Self(), m.Batch.ID))
		}
		if len(m.Batch.Items) == 0 {
			panic(fmt.Sprintf("batchd: device %v got empty batch %d", ctx.Self(), m.Batch.ID))
		}
		d.begin(ctx, m.Batch, m.From, m.Share)
	case JobDone:
		if m.ID != d.job {
			return // the result of an abandoned run
		}
		ctx.Cancel(d.watchdog)
		d.job = 0
		d.finish(ctx, m)
	case watchdogFired:
		if m.job != d.job {
			return
		}
		d.job = 0
		d.fail(ctx, fmt.Sprintf("hung: no result within %d× the predicted latency", d.cfg.WatchdogMultiple))
	case restartDue:
		if m.gen == d.restartGen && d.phase == deviceRestarting {
			d.announce(ctx)
		}
	case Reannounce:
		// The same incarnation: nothing sent to this device is lost, so a
		// batcher that knows it, and may have a batch on its way here,
		// must not re-queue that batch.
		switch d.phase {
		case deviceIdle:
			d.ready(ctx)
		case deviceClaiming:
			// The claimed batcher had nothing due any more.
			d.phase = deviceIdle
			d.ready(ctx)
		case deviceRunning:
			d.reannounce = true // once the batch is done (see next)
		}
		// Restarting: restartDue announces it.
	default:
		panic(fmt.Sprintf("batchd: device got unknown message %T", msg))
	}
}

// announce starts a new incarnation, idle: whatever the batcher had sent
// the previous one is lost.
func (d *Device) announce(ctx Context) {
	d.incarnation++
	d.phase = deviceIdle
	d.ready(ctx)
}

// ready tells the batcher the device is idle, in its current incarnation.
func (d *Device) ready(ctx Context) {
	d.toBatchers(ctx, DeviceReady{Device: ctx.Self(), Incarnation: d.incarnation, Models: d.cfg.Models, Offers: len(d.batchers) > 1})
}

// asksAhead reports whether the device asks for its next batch before the
// running one ends (DeviceConfig.AskAhead): only with one batcher.
func (d *Device) asksAhead() bool {
	return d.cfg.AskAhead > 0 && d.cluster == nil && len(d.batchers) == 1
}

// begin starts batch b, sent by from (zero: the device's batcher).
func (d *Device) begin(ctx Context, b Batch, from Address, share Share) {
	d.phase = deviceRunning
	d.batch = b
	d.from = from
	if d.from.IsZero() {
		d.from = d.batcher
	}
	busy := DeviceBusy{Device: ctx.Self(), Incarnation: d.incarnation, From: d.from, Share: share,
		FreeAt: ctx.Now() + d.cfg.Latency.Predict(len(b.Items), maxInput(b.Items))}
	for _, bt := range d.batchers {
		if bt != d.from {
			ctx.Send(bt, busy)
		}
	}
	all := make([]int, len(b.Items))
	for i := range all {
		all[i] = i
	}
	d.todo = append(d.todo[:0], all)
	d.next(ctx)
}

// done reports the batch done, and starts the batch sent ahead if there is
// one.
func (d *Device) done(ctx Context) {
	d.failures = 0
	d.phase = deviceIdle
	id := d.batch.ID
	d.batch = Batch{}
	ctx.Send(d.from, BatchDone{Device: ctx.Self(), BatchID: id, Isolated: d.isolated})
	d.isolated, d.answered, d.again = nil, nil, nil // sent: the batcher reads it, no one writes it
	d.asked = false                                 // an ask unanswered is undone by the BatchDone
	if len(d.batchers) != 1 || d.batchers[0] != d.from {
		// The others it serves may have had a batch declined.
		d.reannounce = true
	}
	if d.ahead.ID != 0 {
		b := d.ahead
		d.ahead = Batch{}
		b.Dispatch = ctx.Now()              // it reaches the device now, not when it was formed
		d.begin(ctx, b, d.batcher, Share{}) // its one batcher's
		return                              // a reannouncement waits for this batch's end
	}
	if d.reannounce {
		// A batcher that (re)started meanwhile does not know this
		// batch, and ignores its BatchDone.
		d.reannounce = false
		d.ready(ctx)
	}
}

// next starts the next run of the batch, or reports the batch done.
func (d *Device) next(ctx Context) {
	if len(d.todo) == 0 {
		d.done(ctx)
		return
	}
	run := d.todo[len(d.todo)-1]
	d.todo = d.todo[:len(d.todo)-1]
	// A split batch runs in several rounds; whoever can no longer make the
	// deadline by the time its round comes is answered now, not run.
	now := ctx.Now()
	d.cur = run[:0]
	inputs := make([]string, 0, len(run))
	longest := 0
	for _, i := range run {
		it := d.batch.Items[i]
		if !d.isAnswered(i) && now+d.cfg.Latency.Predict(1, len(it.Req.Input)) > it.Req.Deadline {
			d.reply(ctx, it, 0, Expired, "", "deadline exceeded before its run on the device")
			if d.answered == nil {
				continue // not a split batch: no poison to find
			}
			d.answered[i] = true
		}
		d.cur = append(d.cur, i)
		inputs = append(inputs, it.Req.Input)
		longest = max(longest, len(it.Req.Input))
	}
	if len(inputs) == 0 || len(d.isolated) > 0 && d.probeOnly(d.cur) {
		// Nothing to answer, and the poison is found: skip it.
		d.next(ctx)
		return
	}
	d.jobSeq++
	d.job = d.jobSeq
	// The batch's last run (a split one's is not: it may split again)
	// asks for the next batch, before the job: in a live runtime the
	// goroutine woken last runs first, and that must be the job's, not
	// the batcher's. (A timer would not do: the engine's starts a
	// goroutine at once for a short wait, and the job waited behind it.)
	if d.asksAhead() && len(d.todo) == 0 && d.answered == nil && d.ahead.ID == 0 && !d.asked {
		d.asked = true
		ctx.Send(d.batchers[0], DeviceReady{Device: ctx.Self(), Incarnation: d.incarnation, Models: d.cfg.Models,
			Running: d.batch.ID, Ahead: d.cfg.AskAhead})
	}
	ctx.Exec(Job{ID: d.job, Model: d.batch.Key.Model, Version: d.batch.Key.Version, Inputs: inputs})
	limit := max(time.Duration(d.cfg.WatchdogMultiple)*d.cfg.Latency.Predict(len(inputs), longest), d.cfg.WatchdogMin)
	d.watchdog = ctx.After(limit, watchdogFired{job: d.job})
}

func (d *Device) finish(ctx Context, m JobDone) {
	n := len(d.cur)
	switch {
	case m.Fault:
		d.fail(ctx, "device fault")
		return
	case m.Err == "" && len(m.Outputs) != n:
		m.Err = fmt.Sprintf("backend returned %d outputs for %d inputs", len(m.Outputs), n)
	case m.Err == "" && m.ItemErrs != nil && len(m.ItemErrs) != n:
		m.Err = fmt.Sprintf("backend returned %d item errors for %d inputs", len(m.ItemErrs), n)
	}
	if m.Err != "" && d.answered != nil && d.probeOnly(d.cur) {
		// The poison is in this run, which answers no one: the runs left
		// that answer no one either only cost time. (A second poison in
		// them is found when it next fails a batch.)
		d.todo = slices.DeleteFunc(d.todo, d.probeOnly)
	}
	if m.Err != "" && n > 1 {
		if d.answered == nil {
			d.answered = make([]bool, len(d.batch.Items))
			d.again = make([]bool, len(d.batch.Items))
			if d.ahead.ID != 0 {
				// The split rounds may take seconds (about 2·log2(n) runs):
				// the batch sent ahead goes back to the batcher, for another
				// device, rather than wait behind them.
				ctx.Send(d.batchers[0], BatchDeclined{Device: ctx.Self(), BatchID: d.ahead.ID})
				d.ahead = Batch{}
			}
		}
		// Split to isolate a poison input; the first half runs next.
		d.todo = append(d.todo, d.cur[n/2:], d.cur[:n/2])
		d.next(ctx)
		return
	}
	if m.Err != "" && d.answered != nil {
		// Alone after a split: its batch failed with it, and each half
		// without it passed or led here. A batch of one that fails is no
		// such evidence (a transient error fails it as well), and neither
		// is one failure alone: it runs alone once more first.
		i := d.cur[0]
		if !d.again[i] {
			d.again[i] = true
			d.todo = append(d.todo, []int{i})
			d.next(ctx)
			return
		}
		d.isolated = append(d.isolated, d.batch.Items[i].Req.ID)
	}
	for i, idx := range d.cur {
		it := d.batch.Items[idx]
		switch {
		case d.isAnswered(idx):
			// Answered Expired already; it ran to isolate the poison.
		case m.Err != "":
			d.reply(ctx, it, n, Failed, "", m.Err)
		case m.ItemErrs != nil && m.ItemErrs[i] != "":
			d.reply(ctx, it, n, Failed, "", m.ItemErrs[i])
		default:
			d.reply(ctx, it, n, Completed, m.Outputs[i], "")
		}
	}
	d.next(ctx)
}

func (d *Device) isAnswered(i int) bool { return d.answered != nil && d.answered[i] }

// probeOnly reports whether every item of run was answered already.
func (d *Device) probeOnly(run []int) bool {
	for _, i := range run {
		if !d.isAnswered(i) {
			return false
		}
	}
	return true
}

func (d *Device) reply(ctx Context, it Item, size int, o Outcome, out, err string) {
	ctx.Send(it.Req.ReplyTo, Reply{
		ID: it.Req.ID, Outcome: o, Output: out, Version: it.Req.Version, Reason: reason(o), Err: err,
		Arrival: it.Req.Arrival, Enqueue: it.Enqueue, Dispatch: d.batch.Dispatch, Done: ctx.Now(),
		BatchSize: size, Attempts: it.Attempt, Device: ctx.Self(),
	})
}

// fail aborts the batch: the unanswered items go back to the batcher, and
// the device restarts after a backoff or is quarantined.
func (d *Device) fail(ctx Context, reason string) {
	var pending []uint64
	for _, run := range append(d.todo, d.cur) {
		for _, i := range run {
			if !d.isAnswered(i) { // answered Expired, run only to find a poison
				pending = append(pending, d.batch.Items[i].Req.ID)
			}
		}
	}
	ctx.Send(d.from, BatchAborted{Device: ctx.Self(), BatchID: d.batch.ID, Pending: pending, Reason: reason})
	d.batch, d.todo, d.cur, d.isolated, d.answered, d.again = Batch{}, d.todo[:0], nil, nil, nil, nil
	// The batch sent ahead never ran: the batcher re-queues it with the
	// BatchAborted, and one still on its way is dropped (see RunBatch).
	d.ahead, d.asked = Batch{}, false
	d.reannounce = false // the restart announces it
	d.failures++
	d.phase = deviceRestarting
	d.restartGen++
	wait := d.cfg.QuarantineFor
	if d.failures >= d.cfg.QuarantineAfter {
		d.failures = 0
		d.toBatchers(ctx, DeviceDown{Device: ctx.Self(), Until: ctx.Now() + wait, Reason: reason})
	} else {
		// Doubles per failure in a row; the loop is bounded by QuarantineAfter.
		wait = d.cfg.RestartBackoff
		for i := 1; i < d.failures && wait < d.cfg.RestartBackoffMax; i++ {
			wait *= 2
		}
		wait = min(wait, d.cfg.RestartBackoffMax)
	}
	ctx.After(wait, restartDue{gen: d.restartGen})
}

func reason(o Outcome) Reason {
	switch o {
	case Failed:
		return ReasonBackend
	case Expired:
		return ReasonDeadline
	}
	return ReasonNone
}
