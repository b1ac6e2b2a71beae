package cluster

import (
	"fmt"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/ledger"
	"github.com/batchd/batchd/sim/swim"
)

// Report is what a cluster run did, and what its checker found.
type Report struct {
	Seed  uint64
	Nodes int
	// Offered requests were sent by the clients; Accepted reached a live
	// front.
	Offered, Accepted int64
	// Outcomes of the answered requests.
	Completed, Failed, Rejected, Expired, Cancelled int64
	// Lost are accepted requests whose front lived to the end and whose
	// waiter never got an answer: the checker's first invariant says 0.
	// WithFront are accepted requests whose front crashed before an answer
	// reached them (their connection died with the node).
	Lost, WithFront int64
	// Twice are requests whose waiter got more than one answer (must be 0).
	Twice int64
	// TenantCompleted counts the completed requests by tenant.
	TenantCompleted map[string]int64
	// Latency of the completed requests, arrival to answer, in ms.
	LatencyP50Ms, LatencyP95Ms, LatencyP99Ms float64
	// Batches run, and their mean size; Declined batches a device sent
	// back because it had taken another accumulator's.
	Batches, Declined int64
	BatchMean         float64
	// Detected is, per node a surviving member declared dead, the first
	// time one did (after its last crash).
	Detected map[string]time.Duration
	// Windows are per-second figures over the run (see Window).
	Windows []Window
	// Violations are the first invariant breaks found (at most
	// violationsMax); ViolationCount counts them all.
	Violations     []string
	ViolationCount int64
	// The run itself.
	Events      int64
	NetLost     int64
	TraceHash   uint64
	Membership  swim.Stats
	WallSeconds float64
}

// Window is one second of the run: requests that arrived in it and how
// they ended.
type Window struct {
	StartS                 float64
	Arrived, Completed     int64
	Late                   int64 // completed past the SLO, or expired
	LatencyP99Ms           float64
	lat                    []time.Duration
	expired, failed, other int64
}

const violationsMax = 20

// reqRec is one accepted request. It holds no pointer (its model, version
// and tenant are indexes into checker.names), so the table of a 3 M-request
// run is memory the garbage collector never scans.
type reqRec struct {
	seen    bool // a front accepted it
	node    int32
	life    int32
	answers int32
	model   uint16
	version uint16
	tenant  uint16
	inHash  uint64
	arrival time.Duration
}

// namesMax bounds the distinct model, version and tenant names a run's
// records refer to (checker.names).
const namesMax = 1 << 16

// checker watches every delivery of a run: requests accepted by a front,
// the answers their waiters get, the batches devices are handed.
type checker struct {
	r *run
	// recs are indexed by request ID - 1: the sources number requests
	// densely (source k of N sends k+1, k+1+N, ...).
	recs []reqRec
	// names are the model, version and tenant names records refer to;
	// completed counts each tenant's completed requests, by name index.
	names     []string
	completed []int64
	rep       Report
	lat       []time.Duration
	wins      []Window
	settle    time.Duration
	// servedBy: per model, the accumulators that sent a batch after settle.
	servedBy map[string][]string
}

func newChecker(r *run) *checker {
	c := &checker{r: r, servedBy: map[string][]string{}}
	// Ownership must be single once membership has settled after the
	// last true event.
	c.settle = settledAt(r.cfg)
	nw := int(r.cfg.Duration/time.Second) + 1
	c.wins = make([]Window, nw)
	// Room for what the sources offer (IDs are dense), so that the
	// tables are not copied as they grow: 5% and 1,024 over the mean.
	perSecond := int(min(r.cfg.Rate*1.05, recsMax)) + 1024
	expected := min(int(r.cfg.Rate*1.05*r.cfg.Duration.Seconds())+1024, recsMax)
	c.recs = make([]reqRec, 0, expected)
	c.lat = make([]time.Duration, 0, expected)
	for i := range c.wins {
		c.wins[i].StartS = float64(i)
		c.wins[i].lat = make([]time.Duration, 0, perSecond)
	}
	return c
}

// name returns the index of s in c.names, adding it; namesMax when the
// table is full (a record that refers to it matches no output).
func (c *checker) name(s string) uint16 {
	for i, n := range c.names {
		if n == s {
			return uint16(i)
		}
	}
	if len(c.names) >= namesMax-1 {
		c.violate("more than %d distinct model, version and tenant names", namesMax-1)
		return namesMax - 1
	}
	c.names = append(c.names, s)
	return uint16(len(c.names) - 1)
}

// nameOf is the name of index i ("" for the overflow index).
func (c *checker) nameOf(i uint16) string {
	if int(i) >= len(c.names) {
		return ""
	}
	return c.names[i]
}

func (c *checker) violate(format string, args ...any) {
	c.rep.ViolationCount++
	if len(c.rep.Violations) < violationsMax {
		c.rep.Violations = append(c.rep.Violations, fmt.Sprintf(format, args...))
	}
}

// crashed: the requests the node's front held die with it; its detection
// is measured from now.
func (c *checker) crashed(i int) { delete(c.rep.Detected, c.r.names[i]) }

// dead records the first declaration of node's death.
func (c *checker) dead(at time.Duration, node string) {
	if c.rep.Detected == nil {
		c.rep.Detected = map[string]time.Duration{}
	}
	if _, ok := c.rep.Detected[node]; !ok {
		c.rep.Detected[node] = at
	}
}

// Deliver implements sim.Observer.
func (c *checker) Deliver(at time.Duration, from, to actors.Address, msg actors.Message) {
	switch m := msg.(type) {
	case actors.Submit:
		if from.Node != "" || to.ID != FrontID {
			return // a front's submission to an accumulator
		}
		i, ok := c.r.index[to.Node]
		if !ok || !c.r.up[i] {
			return
		}
		rec := c.rec(m.Req.ID)
		if rec == nil || rec.seen {
			c.violate("request %d submitted twice, or its ID is out of range", m.Req.ID)
			return
		}
		c.rep.Accepted++
		*rec = reqRec{seen: true, node: int32(i), life: int32(c.r.life[i]), model: c.name(m.Req.Model), tenant: c.name(m.Req.Tenant),
			version: c.name(m.Req.Version), inHash: actors.InputHash(m.Req.Input), arrival: m.Req.Arrival}
		if w := c.window(m.Req.Arrival); w != nil {
			w.Arrived++
		}
	case actors.Reply:
		if to.ID != WaiterID {
			return
		}
		i, ok := c.r.index[to.Node]
		if !ok {
			return // to a crashed node's waiter: lost with it
		}
		c.answer(at, i, m)
	case actors.RunBatch:
		c.batch(at, m)
	case actors.BatchDeclined:
		c.rep.Declined++
	}
}

// recsMax bounds the requests a run checks (a 100-node minute at 50,000
// req/s is 3 M): 40 bytes each, 640 MB at the bound.
const recsMax = 16 << 20

// rec returns the record of request id, growing the table; nil past
// recsMax or for ID 0.
func (c *checker) rec(id uint64) *reqRec {
	if id == 0 || id > recsMax {
		return nil
	}
	if int(id) > len(c.recs) {
		n := max(int(id), 2*len(c.recs), 1024)
		c.recs = append(c.recs, make([]reqRec, min(n, recsMax)-len(c.recs))...)
	}
	return &c.recs[id-1]
}

func (c *checker) window(arrival time.Duration) *Window {
	k := int(arrival / time.Second)
	if k < 0 || k >= len(c.wins) {
		return nil
	}
	return &c.wins[k]
}

func (c *checker) answer(at time.Duration, node int, m actors.Reply) {
	rec := c.rec(m.ID)
	switch {
	case rec == nil || !rec.seen:
		c.violate("%v: an answer for request %d, which no front accepted", at, m.ID)
		return
	case int(rec.node) != node:
		c.violate("%v: request %d of %s answered at %s", at, m.ID, c.r.names[rec.node], c.r.names[node])
		return
	case int(rec.life) != c.r.life[node]:
		return // the old life's connection is gone
	}
	rec.answers++
	if rec.answers > 1 {
		c.rep.Twice++
		c.violate("%v: request %d answered %d times", at, m.ID, rec.answers)
		return
	}
	w := c.window(rec.arrival)
	switch m.Outcome {
	case actors.Completed:
		if !actors.EmulatedOutputMatches(m.Output, c.nameOf(rec.model), c.nameOf(rec.version), rec.inHash) {
			c.violate("%v: request %d got an output that is not its own", at, m.ID)
		}
		c.rep.Completed++
		for int(rec.tenant) >= len(c.completed) {
			c.completed = append(c.completed, 0)
		}
		c.completed[rec.tenant]++
		d := at - rec.arrival
		c.lat = append(c.lat, d)
		if w != nil {
			w.Completed++
			w.lat = append(w.lat, d)
			if d > c.r.cfg.Batcher.SLO {
				w.Late++
			}
		}
	case actors.Failed:
		c.rep.Failed++
	case actors.Rejected:
		c.rep.Rejected++
	case actors.Expired:
		c.rep.Expired++
		if w != nil {
			w.Late++
		}
	case actors.Cancelled:
		c.rep.Cancelled++
	}
}

func (c *checker) batch(at time.Duration, m actors.RunBatch) {
	b := m.Batch
	c.rep.Batches++
	if len(b.Items) == 0 || len(b.Items) > c.r.cfg.Batcher.BatchMax {
		c.violate("%v: batch %d of %d items", at, b.ID, len(b.Items))
	}
	for _, it := range b.Items {
		if it.Req.Model != b.Key.Model || it.Req.Version != b.Key.Version || it.Req.Params != b.Key.Params {
			c.violate("%v: batch %d of key %v holds request %d of %s/%s/%q", at, b.ID, b.Key, it.Req.ID, it.Req.Model, it.Req.Version, it.Req.Params)
		}
	}
	c.rep.BatchMean += float64(len(b.Items))
	if at >= c.settle && !c.r.cfg.PerNode {
		s := c.servedBy[b.Key.Model]
		if !slices.Contains(s, m.From.Node) {
			c.servedBy[b.Key.Model] = append(s, m.From.Node)
			if len(s) == 1 {
				c.violate("%v: model %s batched by %s and %s after membership settled (%v)", at, b.Key.Model, s[0], m.From.Node, c.settle)
			}
		}
	}
}

func (c *checker) report(offered int64, res *swim.Result, wall time.Duration) Report {
	rep := c.rep
	rep.Seed, rep.Nodes, rep.Offered = c.r.cfg.Seed, c.r.cfg.Nodes, offered
	// Every accepted request: answered once if its front lived on.
	for k := range c.recs {
		rec, id := &c.recs[k], uint64(k)+1
		if !rec.seen || rec.answers > 0 {
			continue
		}
		if c.r.up[rec.node] && c.r.life[rec.node] == int(rec.life) {
			rep.Lost++
			c.violate("request %d (front %s, arrived %v) never answered", id, c.r.names[rec.node], rec.arrival)
		} else {
			rep.WithFront++
		}
	}
	for i, n := range c.completed {
		if n > 0 {
			if rep.TenantCompleted == nil {
				rep.TenantCompleted = map[string]int64{}
			}
			rep.TenantCompleted[c.nameOf(uint16(i))] += n
		}
	}
	rep.Violations, rep.ViolationCount = c.rep.Violations, c.rep.ViolationCount
	if rep.Batches > 0 {
		rep.BatchMean /= float64(rep.Batches)
	}
	ps := pct(c.lat, 0.99, 0.95, 0.50)
	rep.LatencyP99Ms, rep.LatencyP95Ms, rep.LatencyP50Ms = ps[0], ps[1], ps[2]
	for i := range c.wins {
		w := &c.wins[i]
		w.LatencyP99Ms = pct(w.lat, 0.99)[0]
		w.lat = nil
	}
	rep.Windows = c.wins
	rep.Events, rep.NetLost, rep.TraceHash = c.r.w.Events(), c.r.w.NetLost(), c.r.w.TraceHash()
	rep.Membership = res.Stats
	rep.WallSeconds = wall.Seconds()
	return rep
}

// pct returns the qs-quantiles of d in ms (nearest rank), qs in
// decreasing order; it reorders d. It selects the ranks rather than sorting
// (the 100-node minute has 3 M latencies): each selection leaves the
// smaller ranks to its left, where the next one searches.
func pct(d []time.Duration, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if len(d) == 0 {
		return out
	}
	hi := len(d)
	for i, q := range qs {
		k := int(q*float64(len(d))+0.999999) - 1
		k = min(max(k, 0), hi-1)
		ledger.SelectKth(d[:hi], k)
		out[i] = float64(d[k]) / float64(time.Millisecond)
		hi = k + 1
	}
	return out
}

// settledAt is when membership has settled after cfg's last true event
// (the SWIM model's bound; 0 without events).
func settledAt(cfg Config) time.Duration {
	if len(cfg.Events) == 0 {
		return 0
	}
	sw := cfg.SWIM
	sw.Events = cfg.Events
	for i := range cfg.Nodes {
		sw.Nodes = append(sw.Nodes, NodeName(i))
	}
	return sw.QuietAt() + sw.SettleBound()
}
