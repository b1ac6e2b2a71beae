package sim

// A property of poison isolation (the batcher's poison memory): with poison inputs at
// 2% of the traffic below capacity, the SLO holds for every request of the
// tenants that send no poison, once each distinct poison input has failed
// alone once and the batcher remembers it.
//
// What cannot hold, and is not claimed: the batches a novel poison input
// lands in before it was isolated cost their other requests their SLO.
// Nothing tells a novel poison apart before it runs, and with a batch time
// of half the SLO, the split rounds that isolate it (one per halving, run
// serially on the same device) fit no one's deadline.
//
// TestPropertyPoisonIsolated gives the poison tenant's requests a deadline
// of their own, 1 to 3 s (a client with a generous timeout), so the split
// rounds answer its requests; TestPropertyPoisonIsolatedAtSLO keeps every
// deadline at the SLO, where no split round fits any deadline and the
// device runs the rounds on, unanswered, to find the poison (before it
// did, no poison was ever isolated there: poisonConfig(1, 4, 0.1, 3, 0, 3,
// 0.02, 0, 10s) had 515 of the other tenants' 2,806 requests miss the SLO,
// the same with the memory off; now 54, and 0 of the 1,929 that arrived
// once every input was isolated and poisonSettle more, against 1,036
// with the memory off).

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/batchd/batchd/actors"
)

// poisonRecorder follows every request of a run with poison traffic, from
// the messages: its tenant and whether its input is a poison one (from its
// Submit), its reply, and when each distinct poison input first failed
// alone (the first BatchDone to the batcher that reports it Isolated: the
// moment the batcher can remember it).
type poisonRecorder struct {
	prefix string
	reqs   []poisonReq
	// isolated is when each poison input was first reported isolated.
	isolated map[string]time.Duration
	// sent is when each poison input was first submitted.
	sent map[string]time.Duration
	// anyIsolated: a BatchDone reported a poison isolated.
	anyIsolated bool
	// batches counts the batches dispatched.
	batches int
	// poisonBatches are the dispatched batches that held a poison input.
	poisonBatches []poisonBatch
	// devices is the run's device count; running the batches holding a
	// poison input that each device runs (at most one), by batch ID; and
	// locked the spans when every device ran one (its split rounds).
	devices int
	running map[uint64]time.Duration
	locked  []span
}

// span is a stretch of a run's time.
type span struct{ from, to time.Duration }

// lockedWithin reports whether a locked span overlaps from to to.
func (r *poisonRecorder) lockedWithin(from, to time.Duration) bool {
	return slices.ContainsFunc(r.locked, func(l span) bool { return l.from <= to && l.to >= from })
}

// end closes the span of a batch holding a poison input, if id is one.
func (r *poisonRecorder) end(at time.Duration, id uint64) {
	if _, ok := r.running[id]; !ok {
		return
	}
	if len(r.running) == r.devices {
		r.locked[len(r.locked)-1].to = at
	}
	delete(r.running, id)
}

// poisonBatch is a batch that held a poison input.
type poisonBatch struct {
	at   time.Duration // dispatched
	size int
	// others counts its requests of tenants other than those that sent
	// its poison inputs.
	others int
	// afterIsolated: one of its poison inputs had been reported isolated
	// (the batcher remembers it) before it was dispatched; others then
	// counts every other request in it.
	afterIsolated bool
}

type poisonReq struct {
	submitted bool
	poison    bool
	tenant    string
	input     string
	arrival   time.Duration
	replies   int
	outcome   actors.Outcome
	reason    actors.Reason
	replyAt   time.Duration
}

func newPoisonRecorder(prefix string, devices int) *poisonRecorder {
	return &poisonRecorder{prefix: prefix, isolated: map[string]time.Duration{}, sent: map[string]time.Duration{},
		devices: devices, running: map[uint64]time.Duration{}}
}

func (r *poisonRecorder) get(id uint64) *poisonReq {
	if int(id) >= len(r.reqs) {
		r.reqs = append(r.reqs, make([]poisonReq, int(id)+1-len(r.reqs))...)
	}
	return &r.reqs[id]
}

// Deliver implements Observer.
func (r *poisonRecorder) Deliver(at time.Duration, _, to actors.Address, msg actors.Message) {
	switch m := msg.(type) {
	case actors.Submit:
		q := r.get(m.Req.ID)
		q.submitted, q.tenant, q.input, q.arrival = true, m.Req.Tenant, m.Req.Input, m.Req.Arrival
		q.poison = strings.HasPrefix(m.Req.Input, r.prefix)
		if _, ok := r.sent[q.input]; q.poison && !ok {
			r.sent[q.input] = m.Req.Arrival
		}
	case actors.RunBatch:
		r.batches++
		var bad []string // tenants of the poison inputs in the batch
		known := false   // one of them was isolated before
		for _, it := range m.Batch.Items {
			if !strings.HasPrefix(it.Req.Input, r.prefix) {
				continue
			}
			// Told before it left (at the same instant, the batcher may
			// have sent it just before the BatchDone that tells it).
			if at, ok := r.isolated[it.Req.Input]; ok && at < m.Batch.Dispatch {
				known = true
			}
			if !slices.Contains(bad, it.Req.Tenant) {
				bad = append(bad, it.Req.Tenant)
			}
		}
		if len(bad) == 0 {
			return
		}
		pb := poisonBatch{at: at, size: len(m.Batch.Items), afterIsolated: known}
		for _, it := range m.Batch.Items {
			if !slices.Contains(bad, it.Req.Tenant) {
				pb.others++
			}
		}
		if known {
			// A remembered poison runs alone: anyone beside it counts.
			pb.others = pb.size - 1
		}
		r.poisonBatches = append(r.poisonBatches, pb)
		r.running[m.Batch.ID] = at
		if len(r.running) == r.devices {
			r.locked = append(r.locked, span{from: at, to: math.MaxInt64})
		}
	case actors.BatchAborted:
		if to == BatcherAddr {
			r.end(at, m.BatchID)
		}
	case actors.BatchDone:
		if to != BatcherAddr {
			return
		}
		r.end(at, m.BatchID)
		for _, id := range m.Isolated {
			q := r.get(id)
			r.anyIsolated = r.anyIsolated || q.poison
			if _, ok := r.isolated[q.input]; q.poison && !ok {
				r.isolated[q.input] = at
			}
		}
	case actors.Reply:
		if to != LedgerAddr {
			return
		}
		q := r.get(m.ID)
		q.replies++
		q.outcome, q.reason, q.replyAt = m.Outcome, m.Reason, at
	}
}

// poisonSetup is one drawn run with poison traffic.
type poisonSetup struct {
	cfg     Config
	bad     string        // the tenant that sends poison
	inputs  int           // distinct poison inputs
	timeout time.Duration // the bad tenant's deadline
}

const poisonTestPrefix = "POISON-" // never a pool input: those are lowercase

// poisonConfig builds a run: tenants t0..t(n-1) at equal rates, tenant bad
// sending share of all the traffic as one of inputs poison inputs, its
// requests with a deadline of timeout (0: the SLO).
func poisonConfig(seed uint64, devices int, load float64, tenants, bad, inputs int, share float64, timeout, duration time.Duration) poisonSetup {
	cfg := DefaultConfig()
	cfg.Seed, cfg.Devices, cfg.Duration = seed, devices, duration
	capacity := float64(devices*cfg.Batcher.BatchMax) / cfg.Latency.Base.Seconds()
	for i := range tenants {
		src := DefaultTrafficConfig()
		src.Rate = load * capacity / float64(tenants)
		src.Tenants = []string{fmt.Sprintf("t%d", i)}
		if i == bad {
			// share of all the traffic is share*tenants of this one's.
			src.PoisonShare = share * float64(tenants)
			src.PoisonPrefix = poisonTestPrefix
			src.PoisonInputs = inputs
			src.Timeout = timeout
		}
		cfg.Sources = append(cfg.Sources, src)
	}
	cfg.Faults.PoisonPrefix = poisonTestPrefix
	cfg.EventsMax = 50_000_000
	return poisonSetup{cfg: cfg, bad: fmt.Sprintf("t%d", bad), inputs: inputs, timeout: timeout}
}

// poisonOutcome is what a run with poison traffic did.
type poisonOutcome struct {
	rep Report
	rec *poisonRecorder
	// learned is when a poison input was first isolated, so that the
	// batcher remembers its tenant; MaxInt64 if none ever was.
	learned time.Duration
	// poisonBefore counts the poison requests that arrived by learned.
	poisonBefore int
	// mixedAfter counts the batches that held a poison input the batcher
	// had been told of (reported isolated before the batch left) beside any
	// other request; mixedFirst is the first.
	mixedAfter int
	mixedFirst poisonBatch
	// missesBefore and missesAfter count the requests of the tenants that
	// sent no poison that did not complete within the SLO, arrived by
	// learned and after it; missesLocked those of missesBefore whose SLO
	// overlapped a span when every device ran a batch holding a poison
	// (poisonRecorder.locked).
	missesBefore, missesAfter, missesLocked int
	firstAfter                              []string // a few of the misses after
	innocents                               int      // requests of those tenants
	// allLearned is when the last distinct poison input sent was first
	// isolated (MaxInt64 if one never was); innocentsAfterAll and
	// missesAfterAll count the requests of the tenants that sent no
	// poison arriving poisonSettle after it, and those of them that missed
	// the SLO.
	allLearned                        time.Duration
	innocentsAfterAll, missesAfterAll int
}

// poisonSettle is how long after the batcher learns a poison the batches
// that took copies of it before still fail and split (at most about
// 2·log2(BatchMax) batch times of 100 ms each, on every device that has
// one).
const poisonSettle = 1500 * time.Millisecond

func runPoison(s poisonSetup) (poisonOutcome, error) {
	rec := newPoisonRecorder(poisonTestPrefix, s.cfg.Devices)
	cfg := s.cfg
	cfg.Observers = []Observer{rec}
	rep, err := Run(cfg)
	if err != nil {
		return poisonOutcome{}, err
	}
	o := poisonOutcome{rep: rep, rec: rec}
	o.learned = math.MaxInt64
	for _, at := range rec.isolated {
		o.learned = min(o.learned, at)
	}
	for in := range rec.sent {
		at, ok := rec.isolated[in]
		if !ok {
			at = math.MaxInt64
		}
		o.allLearned = max(o.allLearned, at)
	}
	for _, b := range rec.poisonBatches {
		if b.afterIsolated && b.others > 0 {
			if o.mixedAfter == 0 {
				o.mixedFirst = b
			}
			o.mixedAfter++
		}
	}
	slo := s.cfg.Batcher.SLO
	for id := range rec.reqs {
		q := &rec.reqs[id]
		if q.submitted && q.poison && q.arrival <= o.learned {
			o.poisonBefore++
		}
		if !q.submitted || q.poison || q.tenant == s.bad {
			continue
		}
		o.innocents++
		met := q.replies == 1 && q.outcome == actors.Completed && q.replyAt-q.arrival <= slo
		if o.allLearned < math.MaxInt64 && q.arrival > o.allLearned+poisonSettle {
			o.innocentsAfterAll++
			if !met {
				o.missesAfterAll++
			}
		}
		if met {
			continue
		}
		if q.arrival <= o.learned {
			o.missesBefore++
			if rec.lockedWithin(q.arrival, q.arrival+slo) {
				o.missesLocked++
			}
			continue
		}
		o.missesAfter++
		if len(o.firstAfter) < 5 {
			o.firstAfter = append(o.firstAfter, fmt.Sprintf("request %d of %s: arrival %v, %v at %v", id, q.tenant, q.arrival, q.outcome, q.replyAt))
		}
	}
	return o, nil
}

func (s poisonSetup) String() string {
	rate := 0.0
	for _, c := range s.cfg.Sources {
		rate += c.Rate
	}
	return fmt.Sprintf("seed %d, %d devices, %.0f req/s over %d tenants for %v, %s sends %d poison inputs (share %.3f of its requests) with a %v deadline",
		s.cfg.Seed, s.cfg.Devices, rate, len(s.cfg.Sources), s.cfg.Duration, s.bad, s.inputs,
		s.cfg.Sources[slices.IndexFunc(s.cfg.Sources, func(c TrafficConfig) bool { return c.PoisonShare > 0 })].PoisonShare, s.timeout)
}

// TestPropertyPoisonIsolated: with 2% of the requests carrying one of 1 to
// 5 distinct poison inputs, sent by one tenant of 2 to 4 (at equal rates),
// on 2 to 8 devices at 5 to 20% of capacity (devices × BatchMax / latency),
// latency 100 ms, SLO 200 ms, for 5 to 10 simulated seconds:
//
//   - every poison request ends Failed or Expired, never Completed; no
//     other request ever Fails; each request has exactly one reply, and the
//     ledger sees nothing lost or duplicated and no violation;
//   - a poison input fails alone, and is reported isolated, at some point
//     L (the first such BatchDone: from then on the batcher remembers the
//     poison tenant and batches its requests apart);
//   - (a) no batch dispatched after L holds a poison input together with a
//     request of another tenant: not one;
//   - (b) of the other tenants' requests that arrive by L, at most
//     BatchMax-1 per poison request that arrived by L miss the SLO: a poison
//     costs at most its own batch. This leaves out the requests whose SLO
//     overlaps a span when every device ran a batch holding a poison
//     (poisonRecorder.locked): the split rounds hold each device for up to
//     a second, and what arrives meanwhile waits behind them whatever
//     batch it lands in. Counted with the rest, (b) failed 1 run in about
//     10,000 (-rapid.seed=14339807911518648153: 2 devices, 2 poison
//     requests before L at 1.057 s, both devices running poisoned batches
//     from 157 ms to L, 300 misses against a bound of 198). In 300 drawn
//     runs of TestPropertyPoisonIsolatedAtSLO's draws, 240 had such spans,
//     the longest 1.05 s.
//
// What is not claimed, and does not hold: that every request of the other
// tenants arriving after L meets the SLO. They no longer share a batch with
// a poison, but the poison still costs device time: each remembered copy
// runs alone for a whole batch time (2% of the requests at 100 items a
// batch is 2 batch times per 100 requests, several times the device time
// of the other 98), and a novel poison of the same tenant fails its
// tenant's batch, which then holds a device for its split rounds. In 60
// drawn runs about 2% of the other tenants' requests arriving after L
// missed the SLO (0.3% after every distinct input was isolated), against
// 73% without the memory; see RESULTS.md, Hardening.
//
// Nor is the poison tenant's traffic held to the SLO: fair scheduling
// charges it the device time of its lone poison runs. Nor is every distinct
// poison input sure to be isolated: a poison tenant's batch is dispatched
// when its own deadlines require, which can leave no room for the split
// rounds, and such a poison then costs only its own tenant.
//
// Seen to fail with the batcher's poison memory off
// (Batcher.PoisonMemoryMax = 0), and without the batcher grouping again the
// requests already queued when it learns a poison: (a), on the first draws.
func TestPropertyPoisonIsolated(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := drawPoison(t, 5, time.Duration(rapid.IntRange(1000, 3000).Draw(t, "bad_timeout_ms"))*time.Millisecond)
		o, err := runPoison(s)
		if err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
		checkPoisonOutcome(t, s, o)
		if o.learned == math.MaxInt64 {
			t.Fatalf("no poison input ever failed alone\n%s", s)
		}
		if o.mixedAfter > 0 {
			t.Fatalf("%d batches held a poison input and another tenant's requests after the first poison was isolated (at %v); first at %v: %d of %d items of other tenants\n%s",
				o.mixedAfter, o.learned, o.mixedFirst.at, o.mixedFirst.others, o.mixedFirst.size, s)
		}
		if limit := o.poisonBefore * (s.cfg.Batcher.BatchMax - 1); o.missesBefore-o.missesLocked > limit {
			t.Fatalf("%d requests of the other tenants missed the SLO before the first poison was isolated (at %v), none while every device ran a poisoned batch: more than %d for %d poison requests (%d more missed while they did, in %v)\n%s",
				o.missesBefore-o.missesLocked, o.learned, limit, o.poisonBefore, o.missesLocked, o.rec.locked, s)
		}
	})
}

// drawPoison draws a run for the poison properties: 2 to 8 devices at 5
// to 20% of capacity, 2 to 4 tenants of which one sends 2% of all requests
// as 1 to inputsMax distinct poison inputs with a deadline of timeout (0:
// the SLO), for 5 to 10 s.
func drawPoison(t *rapid.T, inputsMax int, timeout time.Duration) poisonSetup {
	tenants := rapid.IntRange(2, 4).Draw(t, "tenants")
	return poisonConfig(
		rapid.Uint64().Draw(t, "seed"),
		rapid.IntRange(3, 8).Draw(t, "devices"),
		rapid.Float64Range(0.05, 0.2).Draw(t, "load"),
		tenants,
		rapid.IntRange(0, tenants-1).Draw(t, "bad"),
		rapid.IntRange(1, inputsMax).Draw(t, "poison_inputs"),
		0.02,
		timeout,
		time.Duration(rapid.IntRange(5, 10).Draw(t, "duration_s"))*time.Second,
	)
}

// checkPoisonOutcome checks what holds with or without the poison memory.
func checkPoisonOutcome(t interface{ Fatalf(string, ...any) }, s poisonSetup, o poisonOutcome) {
	r := o.rep.Requests
	if r.Lost != 0 || r.Duplicated != 0 || o.rep.Violations.Count != 0 {
		t.Fatalf("lost %d, duplicated %d, violations %d (%s)\n%s", r.Lost, r.Duplicated, o.rep.Violations.Count, strings.Join(o.rep.Violations.First, "; "), s)
	}
	poison := 0
	for id := range o.rec.reqs {
		q := &o.rec.reqs[id]
		if !q.submitted {
			continue
		}
		if q.replies != 1 {
			t.Fatalf("request %d: %d replies\n%s", id, q.replies, s)
		}
		if q.poison {
			poison++
		}
		if q.poison && q.outcome == actors.Completed {
			t.Fatalf("poison request %d (%q) completed\n%s", id, q.input, s)
		}
		if !q.poison && q.outcome == actors.Failed {
			t.Fatalf("request %d of %s, no poison, failed\n%s", id, q.tenant, s)
		}
	}
	if poison == 0 {
		t.Fatalf("no poison request sent: the run tests nothing\n%s", s)
	}
}

// TestPoisonMemorySparesOtherTenants: one run, with and without the
// batcher's poison memory. With it, no batch holds a poison the batcher
// was told of beside another request, and once every poison input was
// isolated (and poisonSettle more) no request of the other tenants misses
// its SLO (seed 1: 0 of 1,762); without it, the poison fails their batches
// again and again (1,715 of 1,762 missed). The properties above are
// therefore not vacuous.
func TestPoisonMemorySparesOtherTenants(t *testing.T) {
	var after [2]int
	for i, memory := range []bool{true, false} {
		s := poisonConfig(1, 4, 0.1, 3, 0, 3, 0.02, 2*time.Second, 10*time.Second)
		if !memory {
			s.cfg.Batcher.PoisonMemoryMax = 0
		}
		o, err := runPoison(s)
		if err != nil {
			t.Fatal(err)
		}
		checkPoisonOutcome(t, s, o)
		t.Logf("memory %v: first isolated at %v; of %d requests of other tenants, %d missed the SLO before, %d after; %d mixed batches after; every input isolated at %v, and after it and %v more %d of %d missed",
			memory, o.learned, o.innocents, o.missesBefore, o.missesAfter, o.mixedAfter, o.allLearned, poisonSettle, o.missesAfterAll, o.innocentsAfterAll)
		after[i] = o.missesAfterAll
		switch {
		case o.learned == math.MaxInt64 || o.learned > 2*time.Second:
			t.Errorf("memory %v: first isolated at %v; want within 2 s", memory, o.learned)
		case memory && o.mixedAfter != 0:
			t.Errorf("memory on: %d mixed batches after the first isolation; want none", o.mixedAfter)
		case !memory && o.mixedAfter < 10:
			t.Errorf("memory off: %d mixed batches after the first isolation; want many", o.mixedAfter)
		}
	}
	if after[0] != 0 || after[1] < 100 {
		t.Errorf("SLO misses once every poison was isolated: %d with the memory, %d without; want none with it, and many without", after[0], after[1])
	}
}

// TestPropertyPoisonIsolatedAtSLO: the same with every deadline the
// seeds' SLO (200 ms for 100 ms batches), where no split round fits any
// deadline: the device answers the items Expired and runs the rounds on,
// unanswered, until the poison is alone, so the batcher learns it all the
// same. The bad tenant sends one or two distinct poison inputs (three make
// it suspect and batched apart; see TenantSuspectAfter). What holds:
//   - some poison is isolated in every run, and no batch holds a poison
//     the batcher was told of beside any other request;
//   - once every distinct poison input sent was isolated, and poisonSettle
//     more for the batches that took copies of it before, no request of the
//     other tenants misses its SLO: 0 (its copies are refused at
//     admission);
//   - before that, each distinct input costs the batch it first lands in,
//     and its isolation rounds take device time: the other tenants' misses
//     until the last input is isolated are what a new poison costs, and
//     are not bounded here.
func TestPropertyPoisonIsolatedAtSLO(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := drawPoison(t, 2, 0) // every deadline the SLO
		o, err := runPoison(s)
		if err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
		checkPoisonOutcome(t, s, o)
		switch {
		case o.learned == math.MaxInt64:
			t.Fatalf("no poison input ever failed alone\n%s", s)
		case o.mixedAfter > 0:
			t.Fatalf("%d batches held a poison the batcher knew beside another request\n%s", o.mixedAfter, s)
		case o.allLearned < math.MaxInt64 && o.missesAfterAll > 0:
			t.Fatalf("%d of %d requests of the other tenants missed the SLO after every poison input was isolated (at %v) and %v more\n%s", o.missesAfterAll, o.innocentsAfterAll, o.allLearned, poisonSettle, s)
		}
	})
}

// TestPropertyPoisonFlood: the bad tenant probes with new poison inputs,
// about every one distinct (a thousand or more, at 2 to 10% of its
// requests), every deadline the SLO, so that no memory of inputs helps.
// After its TenantSuspectAfter-th is isolated it is suspect: its requests
// run in batches apart, and while the others' wait on at most a quarter
// of the devices (at least one) at once (actors.SuspectDevicesDiv). What holds: from then, and
// poisonSettle more for the mixed batches that took its earlier poisons,
// no request of the other tenants misses its SLO (their load, at most a
// fifth of the capacity, fits in what the cap leaves them), on 3 to 8
// devices. (On 2, the cap takes one, and the other alone makes a request
// that comes as it starts a batch wait that batch out: admission turns a
// few away, 2 of 144 in one run.) Without the cap, the suspect's split
// rounds took every device the others left idle for a moment: in the first
// draw, all 959 of the others' requests were turned away as overloaded.
func TestPropertyPoisonFlood(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tenants := rapid.IntRange(2, 4).Draw(t, "tenants")
		s := poisonConfig(
			rapid.Uint64().Draw(t, "seed"),
			rapid.IntRange(3, 8).Draw(t, "devices"),
			rapid.Float64Range(0.05, 0.2).Draw(t, "load"),
			tenants,
			rapid.IntRange(0, tenants-1).Draw(t, "bad"),
			rapid.IntRange(1000, 10000).Draw(t, "poison_inputs"),
			rapid.Float64Range(0.02, 0.1).Draw(t, "poison_share")/float64(tenants),
			0, // every deadline the SLO
			time.Duration(rapid.IntRange(5, 10).Draw(t, "duration_s"))*time.Second,
		)
		o, err := runPoison(s)
		if err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
		checkPoisonOutcome(t, s, o)
		var found []time.Duration
		for _, at := range o.rec.isolated {
			found = append(found, at)
		}
		if len(found) < actors.TenantSuspectAfter {
			t.Skipf("%d poison inputs isolated: the tenant never turned suspect", len(found))
		}
		slices.Sort(found)
		suspect := found[actors.TenantSuspectAfter-1]
		slo := s.cfg.Batcher.SLO
		after, missed := 0, 0
		var first string
		for id := range o.rec.reqs {
			q := &o.rec.reqs[id]
			if !q.submitted || q.tenant == s.bad || q.arrival <= suspect+poisonSettle {
				continue
			}
			after++
			if q.replies == 1 && q.outcome == actors.Completed && q.replyAt-q.arrival <= slo {
				continue
			}
			if missed++; first == "" {
				first = fmt.Sprintf("request %d of %s: arrival %v, %v (%v) at %v", id, q.tenant, q.arrival, q.outcome, q.reason, q.replyAt)
			}
		}
		if missed > 0 {
			t.Fatalf("%d of the other tenants' %d requests after the bad tenant turned suspect (at %v) and %v more missed the SLO; first %s\n%s",
				missed, after, suspect, poisonSettle, first, s)
		}
	})
}
