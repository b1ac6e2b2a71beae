package ledger

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// ledgerCtx is the least Context the ledger needs: a clock. The ledger only
// reads Now; the rest panics so that a change that makes it use more shows.
type ledgerCtx struct{ now time.Duration }

func (c *ledgerCtx) Self() actors.Address                               { return ledgerAddr }
func (c *ledgerCtx) Now() time.Duration                                 { return c.now }
func (c *ledgerCtx) Send(actors.Address, actors.Message)                { panic("ledger sent a message") }
func (c *ledgerCtx) After(time.Duration, actors.Message) actors.TimerID { panic("ledger set a timer") }
func (c *ledgerCtx) Cancel(actors.TimerID)                              { panic("ledger cancelled a timer") }
func (c *ledgerCtx) Rand() *rand.Rand                                   { panic("ledger drew a number") }
func (c *ledgerCtx) Exec(actors.Job)                                    { panic("ledger ran a job") }

// ledgerHarness feeds a synthetic message sequence through a ledger the way
// the World does: Observer first, then Receive for messages to the ledger.
type ledgerHarness struct {
	t      *testing.T
	l      *Ledger
	ctx    ledgerCtx
	queued int // what the probe reports
}

// The addresses of the actors around the ledger, as sim.Run places them.
var (
	batcherAddr = actors.Address{ID: 1}
	ledgerAddr  = actors.Address{ID: 2}
	trafficAddr = actors.Address{ID: 3}
	dev0        = actors.Address{ID: 100}
	dev1        = actors.Address{ID: 101}
	mKey        = actors.Key{Model: "m", Version: "v1"}
	mKeyV2      = actors.Key{Model: "m", Version: "v2"}
)

func newLedgerHarness(t *testing.T, mutate func(*Config)) *ledgerHarness {
	t.Helper()
	h := &ledgerHarness{t: t}
	cfg := Config{
		Batcher:       batcherAddr,
		BatchMax:      3,
		AttemptMax:    2,
		QueueTotalMax: 10,
		SLO:           200 * time.Millisecond,
		Probe:         func() actors.BatcherStats { return actors.BatcherStats{Queued: h.queued} },
	}
	if mutate != nil {
		mutate(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.l = l
	return h
}

func (h *ledgerHarness) deliver(at time.Duration, from, to actors.Address, msg actors.Message) {
	h.l.Deliver(at, from, to, msg)
	if to == ledgerAddr {
		h.ctx.now = at
		h.l.Receive(&h.ctx, msg)
	}
}

func testReq(id uint64, arrival time.Duration) actors.Request {
	return actors.Request{
		ID: id, Tenant: "t", Model: "m", Version: "v1",
		Input: fmt.Sprintf("input-%d", id), Arrival: arrival, ReplyTo: ledgerAddr,
	}
}

func (h *ledgerHarness) submit(q actors.Request) {
	h.deliver(q.Arrival, trafficAddr, batcherAddr, actors.Submit{Req: q})
}

func (h *ledgerHarness) runBatch(at time.Duration, dev actors.Address, id uint64, key actors.Key, attempt int, qs ...actors.Request) {
	b := actors.Batch{ID: id, Key: key, Dispatch: at}
	for _, q := range qs {
		b.Items = append(b.Items, actors.Item{Req: q, Enqueue: q.Arrival, Attempt: attempt})
	}
	h.deliver(at, batcherAddr, dev, actors.RunBatch{Batch: b})
}

func (h *ledgerHarness) batchDone(at time.Duration, dev actors.Address, id uint64) {
	h.deliver(at, dev, batcherAddr, actors.BatchDone{Device: dev, BatchID: id})
}

// completed is the reply a correct device sends for q run at dispatch and
// done at done.
func completed(q actors.Request, dispatch, done time.Duration) actors.Reply {
	return actors.Reply{
		ID: q.ID, Outcome: actors.Completed, Output: actors.EmulatedOutput(q.Model, q.Version, q.Input),
		Arrival: q.Arrival, Enqueue: q.Arrival, Dispatch: dispatch, Done: done, BatchSize: 1, Attempts: 1,
	}
}

func (h *ledgerHarness) reply(at time.Duration, r actors.Reply) {
	h.deliver(at, dev0, ledgerAddr, r)
}

// clean runs two requests through one batch, correctly.
func (h *ledgerHarness) clean() (actors.Request, actors.Request) {
	a, b := testReq(1, 1*ms1), testReq(2, 2*ms1)
	h.submit(a)
	h.submit(b)
	h.runBatch(5*ms1, dev0, 1, mKey, 1, a, b)
	h.reply(105*ms1, completed(a, 5*ms1, 105*ms1))
	h.reply(105*ms1, completed(b, 5*ms1, 105*ms1))
	h.batchDone(105*ms1, dev0, 1)
	return a, b
}

const ms1 = time.Millisecond

// tick is a message the ledger only times, as it does a traffic source's
// timer.
type tick struct{}

func (h *ledgerHarness) finish() (int64, []string) {
	h.l.Finish(h.ctx.now + time.Second)
	return h.l.Violations()
}

func TestLedgerCleanSequence(t *testing.T) {
	h := newLedgerHarness(t, nil)
	h.clean()
	// A third request retried once after an abort: still clean.
	c := testReq(3, 200*ms1)
	h.submit(c)
	h.runBatch(201*ms1, dev1, 2, mKey, 1, c)
	h.deliver(250*ms1, dev1, batcherAddr, actors.BatchAborted{Device: dev1, BatchID: 2, Pending: []uint64{3}})
	h.deliver(260*ms1, dev1, batcherAddr, actors.DeviceReady{Device: dev1, Incarnation: 2})
	h.runBatch(260*ms1, dev1, 3, mKey, 2, c)
	r := completed(c, 260*ms1, 360*ms1)
	r.Attempts = 2
	h.reply(360*ms1, r)
	// A rejected and a cancelled request.
	d, e := testReq(4, 400*ms1), testReq(5, 400*ms1)
	h.submit(d)
	h.submit(e)
	h.reply(400*ms1, actors.Reply{ID: 4, Outcome: actors.Rejected, RetryAfter: time.Second})
	h.deliver(410*ms1, trafficAddr, batcherAddr, actors.Cancel{ID: 5})
	h.reply(410*ms1, actors.Reply{ID: 5, Outcome: actors.Cancelled})

	if n, v := h.finish(); n != 0 {
		t.Fatalf("clean sequence: %d violations: %q", n, v)
	}
	c2 := h.l.Counts()
	want := Counts{Submitted: 5, Replied: 5, SLOMet: 3, Batches: 3, BatchItems: 4}
	want.Outcomes[actors.Completed], want.Outcomes[actors.Rejected], want.Outcomes[actors.Cancelled] = 3, 1, 1
	if c2 != want {
		t.Errorf("counts = %+v, want %+v", c2, want)
	}
	if got := h.l.BatchSizes(); got[1] != 2 || got[2] != 1 {
		t.Errorf("batch sizes = %v, want two of 1 and one of 2", got)
	}
	if got := h.l.CompletedBy(105 * ms1); got != 2 {
		t.Errorf("CompletedBy(105ms) = %d, want 2", got)
	}
}

// TestLedgerDetects feeds one broken sequence per case and checks that the
// ledger names the broken invariant.
func TestLedgerDetects(t *testing.T) {
	cases := []struct {
		name string
		// want is a substring of the first violation.
		want string
		run  func(h *ledgerHarness)
	}{
		{"lost request", "no reply", func(h *ledgerHarness) {
			h.submit(testReq(1, ms1))
		}},
		{"duplicate reply", "reply 2", func(h *ledgerHarness) {
			a, _ := h.clean()
			h.reply(106*ms1, completed(a, 5*ms1, 105*ms1))
		}},
		{"reply to unknown request", "never submitted", func(h *ledgerHarness) {
			h.reply(ms1, actors.Reply{ID: 9, Outcome: actors.Rejected})
		}},
		{"another request's output", "is not that of its input", func(h *ledgerHarness) {
			a, b := testReq(1, ms1), testReq(2, ms1)
			h.submit(a)
			h.submit(b)
			h.runBatch(2*ms1, dev0, 1, mKey, 1, a, b)
			swapped := completed(a, 2*ms1, 102*ms1)
			swapped.Output = actors.EmulatedOutput(b.Model, b.Version, b.Input)
			h.reply(102*ms1, swapped)
			h.reply(102*ms1, completed(b, 2*ms1, 102*ms1))
		}},
		{"wrong version's output", "is not that of its input", func(h *ledgerHarness) {
			a := testReq(1, ms1)
			h.submit(a)
			h.runBatch(2*ms1, dev0, 1, mKey, 1, a)
			r := completed(a, 2*ms1, 102*ms1)
			r.Output = actors.EmulatedOutput("m", "v2", a.Input)
			h.reply(102*ms1, r)
		}},
		{"empty batch", "0 items", func(h *ledgerHarness) {
			h.runBatch(ms1, dev0, 1, mKey, 1)
		}},
		{"oversize batch", "4 items", func(h *ledgerHarness) {
			var qs []actors.Request
			for id := uint64(1); id <= 4; id++ {
				qs = append(qs, testReq(id, ms1))
				h.submit(qs[len(qs)-1])
			}
			h.runBatch(2*ms1, dev0, 1, mKey, 1, qs...)
		}},
		{"mixed versions in a batch", "under key m@v2", func(h *ledgerHarness) {
			a, b := testReq(1, ms1), testReq(2, ms1)
			b.Version = "v2"
			h.submit(a)
			h.submit(b)
			h.runBatch(2*ms1, dev0, 1, mKeyV2, 1, a, b)
		}},
		{"two batches on one device", "while batch 1", func(h *ledgerHarness) {
			a, b := testReq(1, ms1), testReq(2, ms1)
			h.submit(a)
			h.submit(b)
			h.runBatch(2*ms1, dev0, 1, mKey, 1, a)
			h.runBatch(3*ms1, dev0, 2, mKey, 1, b)
		}},
		{"same incarnation does not free a device", "while batch 1", func(h *ledgerHarness) {
			h.deliver(0, dev0, batcherAddr, actors.DeviceReady{Device: dev0, Incarnation: 1})
			a, b := testReq(1, ms1), testReq(2, ms1)
			h.submit(a)
			h.submit(b)
			h.runBatch(2*ms1, dev0, 1, mKey, 1, a)
			h.deliver(3*ms1, dev0, batcherAddr, actors.DeviceReady{Device: dev0, Incarnation: 1})
			h.runBatch(3*ms1, dev0, 2, mKey, 1, b)
		}},
		{"done after reply", "out of order", func(h *ledgerHarness) {
			a := testReq(1, ms1)
			h.submit(a)
			h.runBatch(2*ms1, dev0, 1, mKey, 1, a)
			h.reply(100*ms1, completed(a, 2*ms1, 102*ms1))
		}},
		{"dispatch before enqueue", "out of order", func(h *ledgerHarness) {
			a := testReq(1, 10*ms1)
			h.submit(a)
			r := completed(a, 5*ms1, 105*ms1)
			h.reply(105*ms1, r)
		}},
		{"enqueue before arrival in a batch", "out of order", func(h *ledgerHarness) {
			a := testReq(1, 10*ms1)
			h.submit(a)
			b := actors.Batch{ID: 1, Key: mKey, Dispatch: 11 * ms1, Items: []actors.Item{{Req: a, Enqueue: 9 * ms1, Attempt: 1}}}
			h.deliver(11*ms1, batcherAddr, dev0, actors.RunBatch{Batch: b})
		}},
		{"clock goes back", "clock went back", func(h *ledgerHarness) {
			h.deliver(5*ms1, trafficAddr, trafficAddr, tick{})
			h.deliver(4*ms1, trafficAddr, trafficAddr, tick{})
		}},
		{"attempt past the limit", "attempt 3 > AttemptMax 2", func(h *ledgerHarness) {
			a := testReq(1, ms1)
			h.submit(a)
			h.runBatch(2*ms1, dev0, 1, mKey, 3, a)
		}},
		{"runs past the limit", "run 3 times", func(h *ledgerHarness) {
			a := testReq(1, ms1)
			h.submit(a)
			for i := uint64(1); i <= 3; i++ {
				at := time.Duration(i) * 10 * ms1
				h.runBatch(at, dev0, i, mKey, 1, a)
				h.deliver(at+ms1, dev0, batcherAddr, actors.BatchAborted{Device: dev0, BatchID: i, Pending: []uint64{1}})
				h.deliver(at+2*ms1, dev0, batcherAddr, actors.DeviceReady{Device: dev0, Incarnation: i + 1}) // restarted
			}
		}},
		{"reply after too many attempts", "reply after 3 attempts", func(h *ledgerHarness) {
			a := testReq(1, ms1)
			h.submit(a)
			h.reply(2*ms1, actors.Reply{ID: 1, Outcome: actors.Failed, Attempts: 3})
		}},
		{"queue past its bound", "queue bound: 11 items", func(h *ledgerHarness) {
			h.queued = 11
			h.submit(testReq(1, ms1))
			h.reply(2*ms1, actors.Reply{ID: 1, Outcome: actors.Rejected})
		}},
		{"cancelled without a cancel", "no Cancel was sent", func(h *ledgerHarness) {
			h.submit(testReq(1, ms1))
			h.reply(2*ms1, actors.Reply{ID: 1, Outcome: actors.Cancelled})
		}},
		{"request submitted twice", "submitted twice", func(h *ledgerHarness) {
			h.submit(testReq(1, ms1))
			h.submit(testReq(1, ms1))
			h.reply(2*ms1, actors.Reply{ID: 1, Outcome: actors.Rejected})
		}},
		{"request altered in flight", "altered in flight", func(h *ledgerHarness) {
			a := testReq(1, ms1)
			h.submit(a)
			// An altered input shows in the output check at the reply
			// (TestEmulatedOutputMatches); a batch that changes the
			// request's version is caught here.
			a.Version = "v9"
			h.runBatch(2*ms1, dev0, 1, actors.Key{Model: a.Model, Version: "v9"}, 1, a)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newLedgerHarness(t, nil)
			c.run(h)
			n, v := h.finish()
			if n == 0 {
				t.Fatalf("no violation, want one containing %q", c.want)
			}
			if !strings.Contains(v[0], c.want) {
				t.Errorf("first violation %q, want it to contain %q (all: %q)", v[0], c.want, v)
			}
		})
	}
}

func TestLedgerCountsLostAndDuplicated(t *testing.T) {
	h := newLedgerHarness(t, nil)
	a, _ := h.clean()
	h.reply(110*ms1, completed(a, 5*ms1, 105*ms1))
	h.reply(111*ms1, completed(a, 5*ms1, 105*ms1))
	h.submit(testReq(3, 120*ms1))
	h.submit(testReq(4, 120*ms1))
	n, _ := h.finish()
	c := h.l.Counts()
	if c.Duplicated != 2 || c.Lost != 2 || n != 4 {
		t.Errorf("duplicated %d, lost %d, violations %d; want 2, 2, 4", c.Duplicated, c.Lost, n)
	}
}

func TestLedgerKeepsFirstViolations(t *testing.T) {
	h := newLedgerHarness(t, func(c *Config) { c.ViolationsMax = 3 })
	for id := uint64(1); id <= 10; id++ {
		h.submit(testReq(id, ms1))
	}
	n, v := h.finish()
	if n != 10 || len(v) != 3 || !strings.Contains(v[0], "request 1 ") {
		t.Errorf("got %d violations, kept %q; want 10, the first 3", n, v)
	}
}

func TestLedgerResolvesDefaultVersion(t *testing.T) {
	h := newLedgerHarness(t, nil)
	a := testReq(1, ms1)
	a.Version = "" // the batcher's default, resolved to v2
	h.submit(a)
	h.runBatch(2*ms1, dev0, 1, mKeyV2, 1, a)
	h.deliver(50*ms1, dev0, batcherAddr, actors.BatchAborted{Device: dev0, BatchID: 1, Pending: []uint64{1}})
	h.runBatch(60*ms1, dev0, 2, mKeyV2, 2, a)
	r := completed(a, 60*ms1, 160*ms1)
	r.Output = actors.EmulatedOutput("m", "v2", a.Input)
	h.reply(160*ms1, r)
	if n, v := h.finish(); n != 0 {
		t.Fatalf("%d violations: %q", n, v)
	}
}

func TestLedgerRejectsBadConfig(t *testing.T) {
	for _, mut := range []func(*Config){
		func(c *Config) { c.BatchMax = 0 },
		func(c *Config) { c.AttemptMax = 0 },
		func(c *Config) { c.Batcher = actors.Address{} },
		func(c *Config) { c.ViolationsMax = -1 },
	} {
		cfg := Config{Batcher: batcherAddr, BatchMax: 1, AttemptMax: 1, QueueTotalMax: 1}
		mut(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted a bad config", cfg)
		}
	}
}

// BenchmarkLedgerRequest is the checker's cost per request: a submit, a
// share of a 20-item batch, a reply.
func BenchmarkLedgerRequest(b *testing.B) {
	l, err := New(Config{Batcher: batcherAddr, BatchMax: 100, AttemptMax: 3, QueueTotalMax: 1 << 20,
		SLO: 200 * ms1, RequestsHint: b.N + 1})
	if err != nil {
		b.Fatal(err)
	}
	ctx := &ledgerCtx{}
	const size = 20
	pending := make([]actors.Item, 0, size)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		at := time.Duration(i) * time.Microsecond
		q := actors.Request{ID: uint64(i + 1), Tenant: "t", Model: "m", Version: "v1", Input: "abcdefghijklmnop", Arrival: at, ReplyTo: ledgerAddr}
		l.Deliver(at, trafficAddr, batcherAddr, actors.Submit{Req: q})
		pending = append(pending, actors.Item{Req: q, Enqueue: at, Attempt: 1})
		if len(pending) < size {
			continue
		}
		batch := actors.Batch{ID: uint64(i), Key: mKey, Items: pending, Dispatch: at}
		l.Deliver(at, batcherAddr, dev0, actors.RunBatch{Batch: batch})
		// Done at dispatch keeps the clock monotonic across iterations.
		done := at
		for _, it := range pending {
			r := actors.Reply{ID: it.Req.ID, Outcome: actors.Completed, Output: actors.EmulatedOutput("m", "v1", it.Req.Input),
				Enqueue: it.Enqueue, Dispatch: at, Done: done, BatchSize: size, Attempts: 1}
			l.Deliver(done, dev0, ledgerAddr, r)
			ctx.now = done
			l.Receive(ctx, r)
		}
		l.Deliver(done, dev0, batcherAddr, actors.BatchDone{Device: dev0, BatchID: uint64(i)})
		pending = pending[:0]
	}
}

// TestOutputOK holds the ledger's allocation-free output check equal to
// actors.EmulatedOutput, the one definition of the emulated backend.

// TestLedgerDetectsPlacement: batches that mix parameters or buckets, merge
// the wrong way, or go to a device without their model are violations;
// merging shorter buckets under BucketMerge is not.
func TestLedgerDetectsPlacement(t *testing.T) {
	models := []actors.ModelConfig{{Name: "m", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}, BucketEdges: []int{8, 16}}}
	short, long := testReq(1, ms1), testReq(2, ms1)
	short.Input, long.Input = "abc", "abcdefghijklmnopq" // buckets 0 and 2
	other := testReq(3, ms1)
	other.Params = "temp=1"
	long2 := testReq(4, ms1)
	long2.Input = long.Input + "r"
	for _, c := range []struct {
		name  string
		merge bool
		key   actors.Key
		items []actors.Request
		ready []string
		kind  ViolationKind
		want  string // "" for clean
	}{
		{"merge shorter", true, actors.Key{Model: "m", Version: "v1", Bucket: 2}, []actors.Request{long, short}, nil, 0, ""},
		{"mixed buckets", false, actors.Key{Model: "m", Version: "v1", Bucket: 2}, []actors.Request{long, short}, nil, ViolationBatch, "is in bucket 0"},
		{"merge longer", true, actors.Key{Model: "m", Version: "v1", Bucket: 0}, []actors.Request{short, long}, nil, ViolationBatch, "is in bucket 2"},
		{"merge only", true, actors.Key{Model: "m", Version: "v1", Bucket: 2}, []actors.Request{short}, nil, ViolationBatch, "no item in its key's bucket"},
		{"mixed params", false, actors.Key{Model: "m", Version: "v1", Bucket: 2}, []actors.Request{long, other}, nil, ViolationBatch, "temp=1"},
		{"cold device", false, actors.Key{Model: "m", Version: "v1", Bucket: 2}, []actors.Request{long, long2}, []string{"x"}, ViolationWarm, "which holds"},
		{"warm device", false, actors.Key{Model: "m", Version: "v1", Bucket: 2}, []actors.Request{long, long2}, []string{"x", "m"}, 0, ""},
	} {
		h := newLedgerHarness(t, func(cfg *Config) { cfg.Models, cfg.BucketMerge = models, c.merge })
		h.deliver(0, dev0, batcherAddr, actors.DeviceReady{Device: dev0, Incarnation: 1, Models: c.ready})
		for _, q := range c.items {
			h.submit(q)
		}
		h.runBatch(2*ms1, dev0, 1, c.key, 1, c.items...)
		for _, q := range c.items {
			h.reply(100*ms1, completed(q, 2*ms1, 100*ms1))
		}
		n, first := h.finish()
		if c.want == "" {
			if n != 0 {
				t.Errorf("%s: %d violations: %q", c.name, n, first)
			}
			continue
		}
		if h.l.ViolationsByKind()[c.kind] == 0 || !strings.Contains(strings.Join(first, "\n"), c.want) {
			t.Errorf("%s: want a %v violation with %q; got %q", c.name, c.kind, c.want, first)
		}
	}
}
