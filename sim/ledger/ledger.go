package ledger

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/batchd/batchd/actors"
)

// RequestsLimit bounds the requests one ledger tracks (80 bytes each,
// so 20 M is 1.6 GB at most). A run that needs more is too big for
// one process anyway.
const RequestsLimit = 20_000_000

// Config configures a Ledger: where the batcher is and the bounds its
// messages must respect.
type Config struct {
	// Batcher is the address Submit, Cancel and the device reports go to;
	// the queue bound is checked after every delivery to it.
	Batcher actors.Address
	// BatchMax is the batcher's batch size bound (invariant 3).
	BatchMax int
	// AttemptMax is the batcher's retry bound (invariant 8).
	AttemptMax int
	// QueueTotalMax is the batcher's queue bound (invariant 10).
	QueueTotalMax int
	// SLO is the deadline of a request that has none of its own, for SLO
	// attainment.
	SLO time.Duration
	// Probe, when set, reads the batcher's counters; it is called before
	// every delivery to the batcher (so it sees the state the previous
	// delivery left) and once at Finish.
	Probe func() actors.BatcherStats
	// SelfCheck, when set, runs the batcher's own assertions
	// (actors.Batcher.Check) on the state its last delivery left, at that
	// delivery's time: before every delivery to the batcher and at
	// Finish. A failure is a ViolationOther.
	SelfCheck func(now time.Duration) error
	// ViolationsMax is how many violation descriptions are kept; all are
	// counted. Default 20.
	ViolationsMax int
	// RequestsMax bounds the request IDs tracked; IDs are expected to be
	// dense from 1, as Traffic makes them. Default and ceiling
	// RequestsLimit.
	RequestsMax int
	// RequestsHint presizes the ledger, to avoid regrowing it on the hot
	// path. Optional.
	RequestsHint int
	// Models is the batcher's model registry, for the bucket check: a
	// batch's items must fall in its key's length bucket (or, under
	// BucketMerge, in a shorter one). Empty: every input is in bucket 0.
	Models []actors.ModelConfig
	// BucketMerge is the batcher's setting: with it, a batch may also
	// hold items of shorter buckets of its model version and parameters.
	BucketMerge bool
	// NamesMax bounds the tenants the ledger tells apart; the requests of
	// any further tenant are counted under OtherName. Default and ceiling
	// NamesLimit.
	NamesMax int
}

// NamesLimit is the most tenants a ledger tells apart (see
// Config.NamesMax): the per-tenant report is read by people, and a
// run with more tenants than this is a load test of the tenant table.
const NamesLimit = 1024

// OtherName is the name the per-tenant and per-model figures use for the
// tenants past Config.NamesMax.
const OtherName = "(other)"

// record is the ledger's line for one request. It holds string headers that
// share the request's own bytes, never copies, and only what a check needs
// after the request's submit: it is touched once per request, and its size
// is most of the ledger's memory traffic (80 bytes).
type record struct {
	// key indexes Ledger.keys, tenant Ledger.tenants, and inputHash is
	// actors.InputHash of the input: with no string kept, a record holds
	// no pointer, so the garbage collector never scans the ledger.
	key       uint32
	tenant    uint32
	inputHash uint64
	// arrival and deadline are the request's; reply is when its first
	// reply was delivered.
	arrival, deadline, reply time.Duration
	// runs counts the batches that carried this request and started on
	// their device (not those it dropped);
	// replies its replies, saturating (only 0, 1 and more matter).
	runs    uint16
	replies uint8
	outcome actors.Outcome
	// reason is the first reply's Reason, for the per-tenant rejections.
	reason    actors.Reason
	submitted bool
	cancelled bool
	// resolved: version was empty on the request and was taken from the
	// key of the batch that first ran it.
	resolved bool
}

// devState is what the ledger knows about one device.
type devState struct {
	incarnation uint64
	known       bool
	busy        bool
	batchID     uint64
	since       time.Duration
	// Asking ahead: askedFor is the running batch the device asked for its
	// next batch ahead of (DeviceReady.Running), ahead the batch that came
	// then, which starts at the running one's BatchDone. After a
	// BatchAborted the device drops what comes until it announces a new
	// incarnation (dropping), and a batch sent to an earlier incarnation.
	askedFor uint64
	ahead    *actors.Batch
	dropping bool
	// models are the warm models of its last DeviceReady; empty: any.
	models []string
	// registered is when its first DeviceReady was delivered: when the
	// batcher starts counting its busy fraction.
	registered time.Duration
}

// Ledger is the simulator's checker: an Observer that sees every delivery
// and the actor every request's Reply goes to. It keeps one record per
// request, not aggregate counts, so that "exactly one reply" and "the right
// output" are checked per request (architecture invariants 1–4, 8, 10), and
// it records the latency signals for the report.
type Ledger struct {
	cfg  Config
	recs []record     // indexed by request ID; recs[0] is unused
	keys []actors.Key // interned (model, version) of the records
	// tenants are the interned tenant names of the records (tenantIndex
	// maps them back), lastTenant a one-entry cache: most runs repeat one.
	tenants     []string
	tenantIndex map[string]uint32
	lastTenant  uint32
	// models holds the registry's bucket edges by model name, and
	// modelSLO the SLOs of the models that have their own (nil if none).
	models   map[string][]int
	modelSLO map[string]time.Duration
	// keySplit and tenantSplit sum the queue wait and compute of the
	// completed requests by key and by tenant index (timeline.go).
	keySplit, tenantSplit []splitSums
	devs                  map[actors.Address]*devState
	// sampler, when set, reads the batcher's Signals on a clock of its
	// own; sampleAt is its next reading (never, without a sampler), so
	// that the hot path pays one comparison for it.
	sampler  *signalSampler
	sampleAt time.Duration
	last     time.Duration
	// batcherAt is the time of the last delivery to the batcher (-1:
	// none yet), what SelfCheck checks the batcher's state at.
	batcherAt time.Duration

	submitted  int64
	replied    int64
	duplicated int64
	lost       int64
	outcomes   [actors.Cancelled + 1]int64
	sloMet     int64
	finished   bool

	batches     int64
	batchItems  int64
	batchSizes  []int64 // index: batch size; the last slot counts oversize
	queuedHigh  int
	latency     *hist
	queueWait   *hist
	compute     *hist
	violations  []string
	violationsN int64
	byKind      [ViolationKinds]int64
}

// New returns a ledger for a valid configuration.
func New(cfg Config) (*Ledger, error) {
	if cfg.ViolationsMax == 0 {
		cfg.ViolationsMax = 20
	}
	if cfg.RequestsMax == 0 || cfg.RequestsMax > RequestsLimit {
		cfg.RequestsMax = RequestsLimit
	}
	if cfg.NamesMax <= 0 || cfg.NamesMax > NamesLimit {
		cfg.NamesMax = NamesLimit
	}
	switch {
	case cfg.BatchMax < 1 || cfg.AttemptMax < 1 || cfg.QueueTotalMax < 1:
		return nil, errors.New("ledger config: BatchMax, AttemptMax and QueueTotalMax must be at least 1")
	case cfg.ViolationsMax < 0 || cfg.RequestsMax < 0 || cfg.RequestsHint < 0 || cfg.SLO < 0:
		return nil, errors.New("ledger config: negative bound")
	case cfg.Batcher.IsZero():
		return nil, errors.New("ledger config: Batcher must be set")
	}
	hint := min(cfg.RequestsHint, cfg.RequestsMax) + 1
	models := make(map[string][]int, len(cfg.Models))
	var modelSLO map[string]time.Duration
	for _, m := range cfg.Models {
		models[m.Name] = m.BucketEdges
		if m.SLO > 0 {
			if modelSLO == nil {
				modelSLO = map[string]time.Duration{}
			}
			modelSLO[m.Name] = m.SLO
		}
	}
	return &Ledger{
		cfg:         cfg,
		recs:        make([]record, 1, hint),
		tenantIndex: make(map[string]uint32),
		lastTenant:  math.MaxUint32,
		models:      models,
		modelSLO:    modelSLO,
		devs:        make(map[actors.Address]*devState),
		sampleAt:    math.MaxInt64,
		batcherAt:   -1,
		batchSizes:  make([]int64, cfg.BatchMax+2),
		latency:     newHist(),
		queueWait:   newHist(),
		compute:     newHist(),
	}, nil
}

// ViolationKind classifies a broken invariant, so that a test can ask for
// the ones it is about (Ledger.ViolationsByKind, ViolationSummary.ByKind).
type ViolationKind uint8

const (
	// ViolationOther: a message that breaks the protocol (an unknown or
	// repeated request ID, an unknown outcome, a Cancelled reply without a
	// Cancel, traffic not received).
	ViolationOther ViolationKind = iota
	// ViolationLost: a request without a reply (invariant 1).
	ViolationLost
	// ViolationDuplicate: a second reply to one request (invariant 1).
	ViolationDuplicate
	// ViolationOutput: a reply with another input's output, or a request
	// altered in flight (invariant 2).
	ViolationOutput
	// ViolationBatch: a batch of a bad size or of mixed keys, or a device
	// given a batch while it runs one (invariant 3).
	ViolationBatch
	// ViolationCausality: a request's timeline out of order, or the clock
	// going back (invariant 4).
	ViolationCausality
	// ViolationAttempts: a request run more than AttemptMax times
	// (invariant 8).
	ViolationAttempts
	// ViolationQueue: the batcher over its queue bound (invariant 10).
	ViolationQueue
	// ViolationDrain: a run that did not drain in its liveness phase.
	ViolationDrain
	// ViolationWarm: a device given a batch of a model it did not
	// announce as warm in its DeviceReady (the warm-model placement rule).
	ViolationWarm
	// ViolationKinds is the number of kinds.
	ViolationKinds
)

var violationKindNames = [ViolationKinds]string{
	"other", "lost", "duplicate", "output", "batch", "causality", "attempts", "queue", "drain", "warm",
}

func (k ViolationKind) String() string {
	if k < ViolationKinds {
		return violationKindNames[k]
	}
	return "unknown"
}

// violate records a broken invariant. Descriptions are formatted only while
// there is room to keep them.
func (l *Ledger) violate(kind ViolationKind, format string, args ...any) {
	l.violationsN++
	if kind >= ViolationKinds {
		kind = ViolationOther
	}
	l.byKind[kind]++
	if len(l.violations) < l.cfg.ViolationsMax {
		l.violations = append(l.violations, fmt.Sprintf(format, args...))
	}
}

// Violations returns the number of violations found and the first few.
func (l *Ledger) Violations() (int64, []string) { return l.violationsN, l.violations }

// ViolationsByKind returns the number of violations found, by kind.
func (l *Ledger) ViolationsByKind() [ViolationKinds]int64 { return l.byKind }

// rec returns the record of a submitted request, or nil.
func (l *Ledger) rec(id uint64) *record {
	if id == 0 || id >= uint64(len(l.recs)) || !l.recs[id].submitted {
		return nil
	}
	return &l.recs[id]
}

// Deliver implements Observer: it is called for every delivery, just before
// the receiver runs.
func (l *Ledger) Deliver(at time.Duration, from, to actors.Address, msg actors.Message) {
	if at < l.last {
		l.violate(ViolationCausality, "clock went back: delivery at %v after one at %v", at, l.last)
	}
	l.last = at
	if at > l.sampleAt {
		l.sampleAt = l.sampler.advance(at)
	}
	if to == l.cfg.Batcher && l.cfg.Probe != nil {
		l.checkQueue(at)
	}
	if to == l.cfg.Batcher {
		l.selfCheck()
		l.batcherAt = at
	}
	switch m := msg.(type) {
	case actors.Submit:
		if to == l.cfg.Batcher { // not a router's hop on to an accumulator
			l.submit(at, m.Req)
		}
	case actors.Cancel:
		if r := l.rec(m.ID); r != nil {
			r.cancelled = true
		}
	case actors.RunBatch:
		l.runBatch(at, to, m)
	case actors.BatchDone:
		l.deviceFree(at, m.Device, m.BatchID, false)
	case actors.BatchAborted:
		l.deviceFree(at, m.Device, m.BatchID, true)
	case actors.BatchDeclined:
		// A device asking ahead declines the batch it holds ahead once its
		// running batch fails as a whole, and asks for no other.
		if d := l.devs[m.Device]; d != nil && d.ahead != nil && d.ahead.ID == m.BatchID {
			d.ahead, d.askedFor = nil, 0
		}
	case actors.DeviceReady:
		d := l.dev(m.Device)
		if m.Running != 0 {
			if d.known && d.busy && d.batchID == m.Running && d.incarnation == m.Incarnation {
				d.askedFor = m.Running
			}
			return
		}
		if !d.known || d.incarnation != m.Incarnation {
			// A new incarnation has lost whatever the old one held.
			d.busy, d.askedFor, d.ahead, d.dropping = false, 0, nil, false
		}
		if !d.known {
			d.registered = at
		}
		d.known, d.incarnation = true, m.Incarnation
		// The device's own list, which it does not change once sent.
		d.models = m.Models
	}
}

func (l *Ledger) selfCheck() {
	if l.cfg.SelfCheck == nil || l.batcherAt < 0 {
		return
	}
	if err := l.cfg.SelfCheck(l.batcherAt); err != nil {
		l.violate(ViolationOther, "%v", err)
	}
}

func (l *Ledger) checkQueue(at time.Duration) {
	s := l.cfg.Probe()
	l.queuedHigh = max(l.queuedHigh, s.Queued)
	if s.Queued > l.cfg.QueueTotalMax {
		l.violate(ViolationQueue, "queue bound: %d items queued at %v, QueueTotalMax %d", s.Queued, at, l.cfg.QueueTotalMax)
	}
	if s.Held > l.cfg.QueueTotalMax {
		l.violate(ViolationQueue, "queue bound: %d items held (queued or running) at %v, QueueTotalMax %d", s.Held, at, l.cfg.QueueTotalMax)
	}
}

func (l *Ledger) submit(at time.Duration, q actors.Request) {
	switch {
	case q.ID == 0 || q.ID >= uint64(l.cfg.RequestsMax):
		l.violate(ViolationOther, "request id %d out of the ledger's range [1, %d)", q.ID, l.cfg.RequestsMax)
		return
	case q.Arrival > at:
		l.violate(ViolationCausality, "request %d: arrival %v after its submit's delivery at %v", q.ID, q.Arrival, at)
	}
	if n := int(q.ID) + 1; n > len(l.recs) {
		// Records past len are never written, so the capacity slices.Grow
		// keeps or adds is zero: untracked.
		l.recs = slices.Grow(l.recs, n-len(l.recs))[:n]
	}
	r := &l.recs[q.ID]
	if r.submitted {
		l.violate(ViolationOther, "request %d submitted twice", q.ID)
		return
	}
	*r = record{
		key: l.intern(actors.Key{Model: q.Model, Version: q.Version}), tenant: l.internTenant(q.Tenant),
		inputHash: actors.InputHash(q.Input), arrival: q.Arrival, deadline: q.Deadline, submitted: true,
	}
	if r.deadline == 0 {
		slo := l.cfg.SLO
		if m, ok := l.modelSLO[q.Model]; ok {
			slo = m // the batcher serves the model to its own SLO
		}
		r.deadline = q.Arrival + slo
	}
	l.submitted++
}

func (l *Ledger) dev(a actors.Address) *devState {
	d := l.devs[a]
	if d == nil {
		d = &devState{}
		l.devs[a] = d
	}
	return d
}

// deviceFree ends the device's batch batchID: the batch sent ahead starts
// (BatchDone), or is dropped with it (aborted).
func (l *Ledger) deviceFree(at time.Duration, a actors.Address, batchID uint64, aborted bool) {
	d := l.devs[a]
	if d == nil || !d.busy || d.batchID != batchID {
		return
	}
	d.busy, d.askedFor = false, 0
	next := d.ahead
	d.ahead = nil
	switch {
	case aborted:
		d.dropping = true
	case next != nil:
		l.start(at, d, next)
	}
}

// start has d run b.
func (l *Ledger) start(at time.Duration, d *devState, b *actors.Batch) {
	d.busy, d.batchID, d.since = true, b.ID, at
	for i := range b.Items {
		id := b.Items[i].Req.ID
		if r := l.rec(id); r != nil {
			r.runs++
			if int(r.runs) > l.cfg.AttemptMax {
				l.violate(ViolationAttempts, "request %d: run %d times, AttemptMax %d", id, r.runs, l.cfg.AttemptMax)
			}
		}
	}
}

func (l *Ledger) runBatch(at time.Duration, to actors.Address, rb actors.RunBatch) {
	b := &rb.Batch
	n := len(b.Items)
	l.batches++
	l.batchItems += int64(n)
	if n < 1 || n > l.cfg.BatchMax {
		l.violate(ViolationBatch, "batch %d to %v: %d items, need 1..%d", b.ID, to, n, l.cfg.BatchMax)
		l.batchSizes[len(l.batchSizes)-1]++
	} else {
		l.batchSizes[n]++
	}
	d := l.dev(to)
	if b.Dispatch > at {
		l.violate(ViolationCausality, "batch %d: dispatch %v after its delivery at %v", b.ID, b.Dispatch, at)
	}
	if len(d.models) > 0 && !slices.Contains(d.models, b.Key.Model) {
		l.violate(ViolationWarm, "batch %d of model %q sent to device %v, which holds %q", b.ID, b.Key.Model, to, d.models)
	}
	edges := l.models[b.Key.Model]
	ownBucket := false
	for i := range b.Items {
		it := &b.Items[i]
		q := &it.Req
		if q.Model != b.Key.Model || (q.Version != "" && q.Version != b.Key.Version) || q.Params != b.Key.Params {
			l.violate(ViolationBatch, "batch %d: request %d (%s@%s %q) under key %s@%s %q", b.ID, q.ID, q.Model, q.Version, q.Params, b.Key.Model, b.Key.Version, b.Key.Params)
		}
		// An item is in its key's bucket, or, under BucketMerge, in a
		// shorter one of the same model version and parameters (checked
		// above): a longer input would make the batch pay its padding.
		switch bk := bucketOf(edges, len(q.Input)); {
		case bk == b.Key.Bucket:
			ownBucket = true
		case bk > b.Key.Bucket || !l.cfg.BucketMerge:
			l.violate(ViolationBatch, "batch %d (bucket %d, merge %v): request %d of %d bytes is in bucket %d", b.ID, b.Key.Bucket, l.cfg.BucketMerge, q.ID, len(q.Input), bk)
		}
		if it.Attempt > l.cfg.AttemptMax {
			l.violate(ViolationAttempts, "request %d: attempt %d > AttemptMax %d", q.ID, it.Attempt, l.cfg.AttemptMax)
		}
		r := l.rec(q.ID)
		if r == nil {
			l.violate(ViolationOther, "batch %d carries request %d that was never submitted", b.ID, q.ID)
			continue
		}
		k := l.keys[r.key]
		// A request that named no version runs on the one the batcher
		// routed it to: the batch's, which the batcher may also write into
		// the request.
		routed := k.Version == "" && q.Version == b.Key.Version
		if q.Model != k.Model || (q.Version != k.Version && !routed && !(q.Version == "" && r.resolved)) {
			l.violate(ViolationOutput, "batch %d: request %d altered in flight", b.ID, q.ID)
		}
		if k.Version == "" {
			// The batcher resolved the default version; the output must
			// be of the version it resolved to.
			r.key, r.resolved = l.intern(actors.Key{Model: k.Model, Version: b.Key.Version}), true
		}
		if !(r.arrival <= it.Enqueue && it.Enqueue <= b.Dispatch) {
			l.violate(ViolationCausality, "request %d: arrival %v, enqueue %v, dispatch %v out of order", q.ID, r.arrival, it.Enqueue, b.Dispatch)
		}
	}
	if n > 0 && !ownBucket {
		// A batch leaves for its own key's sake: merging only tops it up.
		l.violate(ViolationBatch, "batch %d: no item in its key's bucket %d", b.ID, b.Key.Bucket)
	}
	// What the device does with it: it drops a batch sent to an earlier
	// incarnation, or to one that failed since (only a batch sent ahead
	// can be on its way then); it holds a batch it asked for ahead; a
	// batch sent to a busy device otherwise breaks "one at a time".
	switch {
	case rb.Incarnation != 0 && d.known && rb.Incarnation != d.incarnation || d.dropping:
	case !d.busy:
		l.start(at, d, b)
	case d.askedFor == d.batchID && d.ahead == nil:
		d.ahead = b
	default:
		l.violate(ViolationBatch, "device %v sent batch %d at %v while batch %d (since %v) is outstanding", to, b.ID, at, d.batchID, d.since)
		l.start(at, d, b)
	}
}

// bucketOf is the length bucket of an input of n bytes under edges, the
// way actors.ModelConfig.BucketEdges defines it.
func bucketOf(edges []int, n int) int {
	for i, e := range edges {
		if n <= e {
			return i
		}
	}
	return len(edges)
}

// Receive implements actors.Actor: the ledger is where every Reply goes.
func (l *Ledger) Receive(ctx actors.Context, msg actors.Message) {
	if m, ok := msg.(actors.Reply); ok {
		l.reply(ctx.Now(), &m)
	}
}

func (l *Ledger) reply(at time.Duration, m *actors.Reply) {
	r := l.rec(m.ID)
	if r == nil {
		l.violate(ViolationOther, "reply for request %d that was never submitted", m.ID)
		return
	}
	if r.replies < math.MaxUint8 {
		r.replies++
	}
	if r.replies > 1 {
		l.duplicated++
		l.violate(ViolationDuplicate, "request %d: reply %d (%v at %v) after %v at %v", m.ID, r.replies, m.Outcome, at, r.outcome, r.reply)
		return
	}
	l.replied++
	r.outcome, r.reply, r.reason = m.Outcome, at, m.Reason
	if m.Outcome >= actors.Completed && m.Outcome <= actors.Cancelled {
		l.outcomes[m.Outcome]++
	} else {
		l.violate(ViolationOther, "request %d: reply with unknown outcome %d", m.ID, m.Outcome)
	}
	if at < r.arrival {
		l.violate(ViolationCausality, "request %d: reply at %v before arrival %v", m.ID, at, r.arrival)
	}
	if m.Attempts > l.cfg.AttemptMax {
		l.violate(ViolationAttempts, "request %d: reply after %d attempts, AttemptMax %d", m.ID, m.Attempts, l.cfg.AttemptMax)
	}
	switch m.Outcome {
	case actors.Completed:
		if !(r.arrival <= m.Enqueue && m.Enqueue <= m.Dispatch && m.Dispatch <= m.Done && m.Done <= at) {
			l.violate(ViolationCausality, "request %d: arrival %v, enqueue %v, dispatch %v, done %v, reply %v out of order",
				m.ID, r.arrival, m.Enqueue, m.Dispatch, m.Done, at)
		}
		if k := l.keys[r.key]; !actors.EmulatedOutputMatches(m.Output, k.Model, k.Version, r.inputHash) {
			l.violate(ViolationOutput, "request %d: output %q is not that of its input on %s@%s", m.ID, m.Output, k.Model, k.Version)
		}
		l.latency.record(at - r.arrival)
		l.queueWait.record(m.Dispatch - m.Enqueue)
		l.compute.record(m.Done - m.Dispatch)
		l.addSplit(r, m.Dispatch-m.Enqueue, m.Done-m.Dispatch)
		if at <= r.deadline {
			l.sloMet++
		}
	case actors.Failed:
		// A failed request may not have reached every step (retries
		// exhausted while queued); the steps it reached must be in order.
		prev := r.arrival
		for _, t := range [...]time.Duration{m.Enqueue, m.Dispatch, m.Done, at} {
			if t == 0 {
				continue
			}
			if t < prev {
				l.violate(ViolationCausality, "request %d (failed): arrival %v, enqueue %v, dispatch %v, done %v, reply %v out of order",
					m.ID, r.arrival, m.Enqueue, m.Dispatch, m.Done, at)
				break
			}
			prev = t
		}
	case actors.Cancelled:
		if !r.cancelled {
			l.violate(ViolationOther, "request %d: cancelled, but no Cancel was sent for it", m.ID)
		}
	}
}

// Finish closes the ledger at the end of a run: every submitted request
// without a reply is lost (invariant 1), and the signal readings due up
// to at are taken (SampleSignals). It is idempotent.
func (l *Ledger) Finish(at time.Duration) {
	if l.finished {
		return
	}
	l.finished = true
	if l.cfg.Probe != nil {
		l.checkQueue(at)
	}
	l.selfCheck()
	for id := 1; id < len(l.recs); id++ {
		r := &l.recs[id]
		if r.submitted && r.replies == 0 {
			l.lost++
			l.violate(ViolationLost, "request %d (arrival %v, %d runs): no reply by %v", id, r.arrival, r.runs, at)
		}
	}
	if l.sampler != nil {
		l.sampler.finish(at)
	}
}

// Last is the time of the last delivery the ledger saw.
func (l *Ledger) Last() time.Duration { return l.last }

// Counts are the ledger's request counts.
type Counts struct {
	Submitted, Replied, Duplicated, Lost int64
	// Outcomes is indexed by actors.Outcome.
	Outcomes [actors.Cancelled + 1]int64
	// SLOMet counts completed requests answered by their deadline.
	SLOMet int64
	// Batches and BatchItems count the RunBatch messages seen and the
	// items in them (retries included).
	Batches, BatchItems int64
	// QueuedHigh is the most items the probe saw queued.
	QueuedHigh int
}

// Counts returns the ledger's counts so far; Lost is set by Finish.
func (l *Ledger) Counts() Counts {
	return Counts{
		Submitted: l.submitted, Replied: l.replied, Duplicated: l.duplicated, Lost: l.lost,
		Outcomes: l.outcomes, SLOMet: l.sloMet,
		Batches: l.batches, BatchItems: l.batchItems, QueuedHigh: l.queuedHigh,
	}
}

// CompletedBy counts the requests completed with a reply at or before t.
func (l *Ledger) CompletedBy(t time.Duration) int64 {
	var n int64
	for id := 1; id < len(l.recs); id++ {
		r := &l.recs[id]
		if r.outcome == actors.Completed && r.reply <= t {
			n++
		}
	}
	return n
}

// BatchSizes returns the number of batches by size: index n counts batches
// of n items; the last index counts batches outside 1..BatchMax.
func (l *Ledger) BatchSizes() []int64 { return l.batchSizes }

// intern returns the index of k in l.keys, adding it if new. Runs have a
// handful of keys, so a scan beats a map; the table is bounded by the
// batcher's own KeysMax in any run that obeys it.
func (l *Ledger) intern(k actors.Key) uint32 {
	for i, x := range l.keys {
		if x == k {
			return uint32(i)
		}
	}
	l.keys = append(l.keys, k)
	return uint32(len(l.keys) - 1)
}

// internTenant returns the index of tenant name in l.tenants, adding it
// if new; past NamesMax, tenants share the index of OtherName.
func (l *Ledger) internTenant(name string) uint32 {
	if l.lastTenant < uint32(len(l.tenants)) && l.tenants[l.lastTenant] == name {
		return l.lastTenant
	}
	i, ok := l.tenantIndex[name]
	if !ok {
		if len(l.tenants) >= l.cfg.NamesMax {
			name = OtherName
		}
		if i, ok = l.tenantIndex[name]; !ok {
			i = uint32(len(l.tenants))
			l.tenants = append(l.tenants, name)
			l.tenantIndex[name] = i
		}
	}
	l.lastTenant = i
	return i
}

// hist is a latency histogram at microsecond resolution, 3 significant
// digits, with the exact maximum kept aside (HdrHistogram reports the top of
// the maximum's bucket).
type hist struct {
	h   *hdrhistogram.Histogram
	max time.Duration
	n   int64
}

// histMax is the largest latency the histograms resolve: one hour, far past
// any TimeoutMax; larger values are clamped to it.
const histMax = time.Hour

func newHist() *hist {
	return &hist{h: hdrhistogram.New(1, int64(histMax/time.Microsecond), 3)}
}

func (h *hist) record(d time.Duration) {
	d = min(max(d, 0), histMax)
	h.max = max(h.max, d)
	h.n++
	// The value is within the trackable range, so RecordValue cannot fail.
	_ = h.h.RecordValue(int64(d / time.Microsecond))
}

// Percentiles are latency figures in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func (h *hist) percentiles() Percentiles {
	if h.n == 0 {
		return Percentiles{}
	}
	// Microsecond resolution, like the histogram's.
	maxMs := float64(h.max/time.Microsecond) / 1e3
	// A quantile is reported as the top of its bucket, which can pass the
	// exact maximum by the 3-digit resolution; no percentile exceeds max.
	ms := func(q float64) float64 { return min(float64(h.h.ValueAtQuantile(q))/1e3, maxMs) }
	return Percentiles{P50: ms(50), P95: ms(95), P99: ms(99), Max: maxMs}
}

// reasonSlots is the size of per-reason tables: every actors.Reason fits,
// and an unknown one is counted in the last slot.
const reasonSlots = 16

// groupTally is the outcome of a group of requests (one tenant's, one model's,
// or one tenant's in a window of arrival times).
type groupTally struct {
	offered, completed, sloMet, expired, failed, cancelled, rejected int64
	// completedBy counts completions replied by the groupTally's cutoff (the
	// end of the safety phase), for throughput.
	completedBy int64
	rejectedBy  [reasonSlots]int64
	// latency holds the completed requests' latencies, unsorted.
	latency []time.Duration
}

// Tenants returns the tenant names, in order of first submission; a
// record's tenant field indexes it.
func (l *Ledger) Tenants() []string { return l.tenants }

// tallies groups the requests that arrived in [from, to) into n groups by
// group (which returns -1 to leave a request out), in one pass over the
// ledger. A completion replied at or before cutoff also counts in
// completedBy.
func (l *Ledger) tallies(n int, group func(r *record) int, from, to, cutoff time.Duration) []groupTally {
	out := make([]groupTally, n)
	for id := 1; id < len(l.recs); id++ {
		r := &l.recs[id]
		if !r.submitted || r.arrival < from || r.arrival >= to {
			continue
		}
		g := group(r)
		if g < 0 || g >= n {
			continue
		}
		t := &out[g]
		t.offered++
		if r.replies == 0 {
			continue // lost: a violation of its own
		}
		switch r.outcome {
		case actors.Completed:
			t.completed++
			t.latency = append(t.latency, r.reply-r.arrival)
			if r.reply <= r.deadline {
				t.sloMet++
			}
			if r.reply <= cutoff {
				t.completedBy++
			}
		case actors.Rejected:
			t.rejected++
			t.rejectedBy[min(int(r.reason), reasonSlots-1)]++
		case actors.Expired:
			t.expired++
		case actors.Failed:
			t.failed++
		case actors.Cancelled:
			t.cancelled++
		}
	}
	return out
}

// modelGroups maps each interned key to the index of its model in the
// returned names (models in order of first submission).
func (l *Ledger) modelGroups() (names []string, ofKey []int) {
	ofKey = make([]int, len(l.keys))
	for i, k := range l.keys {
		j := slices.Index(names, k.Model)
		if j < 0 {
			j = len(names)
			names = append(names, k.Model)
		}
		ofKey[i] = j
	}
	return names, ofKey
}
