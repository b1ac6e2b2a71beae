package actors

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors/member"
)

const ms = time.Millisecond

func newTestBatcher(t *testing.T, cfg BatcherConfig, devices int) (*Batcher, *fakeCtx) {
	t.Helper()
	b, err := NewBatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.checkEvery(func(err error) { t.Helper(); t.Fatalf("after a message: %v", err) })
	c := newFakeCtx(batcherAddr)
	b.Receive(c, Start{})
	for i := 0; i < devices; i++ {
		b.Receive(c, DeviceReady{Device: Address{ID: uint64(100 + i)}, Incarnation: 1})
	}
	return b, c
}

func submit(b *Batcher, c *fakeCtx, id uint64) {
	b.Receive(c, Submit{Req: Request{ID: id, Model: "m", Version: "v1", Input: "x", Arrival: c.now, ReplyTo: Address{ID: 2}}})
}

func TestBatcherFullBatchLeavesAtOnce(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 4
	b, c := newTestBatcher(t, cfg, 1)
	for id := uint64(1); id <= 3; id++ {
		submit(b, c, id)
	}
	if len(c.sent) != 0 {
		t.Fatalf("a batch of 3 of 4 left before its linger: %+v", c.sent)
	}
	submit(b, c, 4)
	rb := ofType[RunBatch](c.take())
	if len(rb) != 1 || len(rb[0].Batch.Items) != 4 {
		t.Fatalf("want one full batch of 4, got %+v", rb)
	}
	for _, it := range rb[0].Batch.Items {
		if it.Attempt != 1 {
			t.Errorf("item %d attempt %d, want 1", it.Req.ID, it.Attempt)
		}
	}
}

func TestBatcherLingerIsDerivedAndHonoured(t *testing.T) {
	cfg := DefaultBatcherConfig()
	b, c := newTestBatcher(t, cfg, 4)
	linger := cfg.Linger(4, 1)
	if linger != 25*ms {
		t.Fatalf("linger for 4 devices of 100 ms: %v, want the 25 ms gap", linger)
	}
	submit(b, c, 1)
	c.advance(b, linger-1)
	if len(c.sent) != 0 {
		t.Fatalf("left before the linger: %+v", c.sent)
	}
	c.advance(b, linger)
	if rb := ofType[RunBatch](c.take()); len(rb) != 1 || rb[0].Batch.Dispatch != linger {
		t.Fatalf("want one batch at %v, got %+v", linger, rb)
	}
}

func TestBatcherRejectsWhenFullWithRetryAfter(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.QueueMax, cfg.QueueTotalMax = 2, 2
	b, c := newTestBatcher(t, cfg, 1)
	submit(b, c, 1)
	submit(b, c, 2)
	submit(b, c, 3)
	rs := replies(c.take())
	if len(rs) != 1 || rs[0].ID != 3 || rs[0].Outcome != Rejected || rs[0].RetryAfter <= 0 {
		t.Fatalf("want request 3 rejected with a retry hint, got %+v", rs)
	}
	if s := b.Stats(); s.Queued != 2 || s.Held != 2 {
		t.Fatalf("a rejection changed the queue: %+v", s)
	}
}

func TestBatcherRetriesAbortedItemsThenGivesUp(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 1
	cfg.SLO = 10 * time.Second
	b, c := newTestBatcher(t, cfg, 1)
	dev := Address{ID: 100}
	submit(b, c, 1)
	for attempt := 1; attempt <= cfg.AttemptMax; attempt++ {
		rb := ofType[RunBatch](c.take())
		if len(rb) != 1 || rb[0].Batch.Items[0].Attempt != attempt {
			t.Fatalf("attempt %d: want one batch with attempt %d, got %+v", attempt, attempt, rb)
		}
		b.Receive(c, BatchAborted{Device: dev, BatchID: rb[0].Batch.ID, Pending: []uint64{1}, Reason: "device fault"})
		b.Receive(c, DeviceReady{Device: dev, Incarnation: uint64(attempt + 1)})
	}
	rs := replies(c.take())
	if len(rs) != 1 || rs[0].Outcome != Failed || !strings.Contains(rs[0].Err, "attempts") {
		t.Fatalf("want a failure after %d attempts, got %+v", cfg.AttemptMax, rs)
	}
	if s := b.Stats(); s.Held != 0 || s.Queued != 0 {
		t.Fatalf("books not empty after the final answer: %+v", s)
	}
}

func TestBatcherRequeuesWhenDeviceRestartsMidBatch(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 2
	b, c := newTestBatcher(t, cfg, 1)
	submit(b, c, 1)
	submit(b, c, 2)
	first := ofType[RunBatch](c.take())
	// The device's actor restarted and forgot the batch.
	b.Receive(c, DeviceReady{Device: Address{ID: 100}, Incarnation: 2})
	again := ofType[RunBatch](c.take())
	if len(first) != 1 || len(again) != 1 || len(again[0].Batch.Items) != 2 || again[0].Batch.Items[0].Attempt != 2 {
		t.Fatalf("want the batch re-sent with attempt 2, got %+v then %+v", first, again)
	}
	// The stale BatchDone of the first batch changes nothing.
	b.Receive(c, BatchDone{Device: Address{ID: 100}, BatchID: first[0].Batch.ID})
	if s := b.Stats(); s.Held != 2 || s.Ready != 0 {
		t.Fatalf("stale BatchDone settled the new batch: %+v", s)
	}
}

func TestBatcherCancelRemovesQueuedRequest(t *testing.T) {
	b, c := newTestBatcher(t, DefaultBatcherConfig(), 0)
	b.Receive(c, DeviceReady{Device: Address{ID: 100}, Incarnation: 1})
	b.Receive(c, BatchDone{}) // unknown device: ignored
	submit(b, c, 1)
	b.Receive(c, Cancel{ID: 1})
	rs := replies(c.take())
	if len(rs) != 1 || rs[0].Outcome != Cancelled {
		t.Fatalf("want one cancelled reply, got %+v", rs)
	}
	if s := b.Stats(); s.Queued != 0 || s.Held != 0 {
		t.Fatalf("cancelled request still counted: %+v", s)
	}
	c.advance(b, time.Second)
	if rb := ofType[RunBatch](c.take()); len(rb) != 0 {
		t.Fatalf("a cancelled request was dispatched: %+v", rb)
	}
}

func TestBatcherExpiresWhatCannotMakeItsDeadline(t *testing.T) {
	b, c := newTestBatcher(t, DefaultBatcherConfig(), 1)
	b.Receive(c, DeviceDown{Device: Address{ID: 999}}) // unknown: ignored
	// Occupy the only device with a full batch.
	for id := uint64(1); id <= 100; id++ {
		submit(b, c, id)
	}
	// The default 200 ms SLO cannot be met behind it: rejected at once.
	submit(b, c, 101)
	rs := replies(c.take())
	if len(rs) != 1 || rs[0].ID != 101 || rs[0].Outcome != Rejected || rs[0].RetryAfter != 100*ms {
		t.Fatalf("want request 101 rejected, retry after the 100 ms the device needs, got %+v", rs)
	}
	// A 300 ms deadline can, if the device finishes on time. It does not.
	b.Receive(c, Submit{Req: Request{ID: 102, Model: "m", Input: "x", Deadline: 300 * ms, ReplyTo: Address{ID: 2}}})
	c.advance(b, time.Second)
	rs = replies(c.take())
	if len(rs) != 1 || rs[0].ID != 102 || rs[0].Outcome != Expired {
		t.Fatalf("want request 102 expired, got %+v", rs)
	}
	// It expired as soon as it could no longer finish: 300 ms less 100 ms of compute.
	if rs[0].Done != 200*ms+1 {
		t.Errorf("expired at %v, want just after 200ms", rs[0].Done)
	}
}

// lateDevice runs the trim tests' setup: a device of 4-item batches (1
// item: 30 ms, 4: 90 ms) busy until 90 ms, then requests 1 to queued
// (request 2 with a deadline of 185 ms: enough for a batch of 4 starting
// at 90, with 5 of margin; the others 1 s), then the device late, done at
// 100 ms, when a batch of 4 would end at 190 ms, past request 2's deadline
// (alone it would end at 130 ms). It returns what the batcher sent then.
func lateDevice(t *testing.T, queued uint64) (*Batcher, []Reply, []RunBatch) {
	t.Helper()
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 4
	cfg.Latency = LatencyModel{Base: 10 * ms, PerItem: 20 * ms}
	b, c := newTestBatcher(t, cfg, 1)
	sub := func(id uint64, deadline time.Duration) {
		b.Receive(c, Submit{Req: Request{ID: id, Model: "m", Input: "x", Deadline: deadline, ReplyTo: Address{ID: 2}}})
	}
	for id := uint64(11); id <= 14; id++ {
		sub(id, time.Second)
	}
	first := ofType[RunBatch](c.take())
	for id := uint64(1); id <= queued; id++ {
		deadline := time.Second
		if id == 2 {
			deadline = 185 * ms
		}
		sub(id, deadline)
	}
	if rs := replies(c.take()); len(first) != 1 || len(rs) != 0 {
		t.Fatalf("setup: %d first batches, replies %+v", len(first), rs)
	}
	c.now = 100 * ms
	b.Receive(c, BatchDone{Device: Address{ID: 100}, BatchID: first[0].Batch.ID})
	got := c.take()
	return b, replies(got), ofType[RunBatch](got)
}

func TestBatcherTrimsWhatTheBatchWouldMakeLate(t *testing.T) {
	b, rs, rb := lateDevice(t, 4)
	if len(rs) != 1 || rs[0].ID != 2 || rs[0].Outcome != Expired || rs[0].Attempts != 0 {
		t.Fatalf("want request 2 expired, never run; got %+v", rs)
	}
	if len(rb) != 1 || len(rb[0].Batch.Items) != 3 {
		t.Fatalf("want a batch of the other 3, got %+v", rb)
	}
	if s := b.Stats(); s.Held != 3 || s.Queued != 0 {
		t.Fatalf("books after the trim: %+v", s)
	}
}

// TestBatcherRefillsWhatItTrims: the room a late item leaves in a batch
// goes to the next queued one, so the device runs a full batch and the
// tenant whose item expired is not charged a short batch's cost an item.
func TestBatcherRefillsWhatItTrims(t *testing.T) {
	b, rs, rb := lateDevice(t, 6)
	if len(rs) != 1 || rs[0].ID != 2 || rs[0].Outcome != Expired {
		t.Fatalf("want request 2 expired, got %+v", rs)
	}
	if len(rb) != 1 || !slices.Equal(ids(rb[0].Batch.Items), []uint64{1, 3, 4, 5}) {
		t.Fatalf("want a full batch of 1, 3, 4 and 5, got %+v", rb)
	}
	if s := b.Stats(); s.Held != 5 || s.Queued != 1 {
		t.Fatalf("books after the refill: %+v", s)
	}
}

// TestBatcherStartAsksDevicesToAnnounce: a batcher (a restarted one knows
// no device) asks its configured devices to announce themselves; a
// re-announcement of the same incarnation that crosses a batch on its way
// to the device leaves the batch alone, as the device will run it.
func TestBatcherStartAsksDevicesToAnnounce(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 2
	cfg.Devices = []Address{{ID: 100}, {ID: 101}}
	b, err := NewBatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.checkEvery(func(err error) { t.Helper(); t.Fatalf("after a message: %v", err) })
	c := newFakeCtx(batcherAddr)
	b.Receive(c, Start{})
	got := c.take()
	if len(got) != 2 || got[0].to != cfg.Devices[0] || got[1].to != cfg.Devices[1] || len(ofType[Reannounce](got)) != 2 {
		t.Fatalf("want a Reannounce to each configured device, got %+v", got)
	}
	b.Receive(c, DeviceReady{Device: Address{ID: 100}, Incarnation: 3})
	submit(b, c, 1)
	submit(b, c, 2)
	if rb := ofType[RunBatch](c.take()); len(rb) != 1 {
		t.Fatalf("want one batch on the announced device, got %+v", rb)
	}
	b.Receive(c, DeviceReady{Device: Address{ID: 100}, Incarnation: 3})
	if out := c.take(); len(out) != 0 {
		t.Fatalf("a re-announcement of the running incarnation re-queued or re-sent the batch: %+v", out)
	}
	if s := b.Stats(); s.Held != 2 || s.Retried != 0 {
		t.Fatalf("books after a re-announcement: %+v", s)
	}
	cfg.Devices = make([]Address, cfg.DevicesMax+1)
	if _, err := NewBatcher(cfg); err == nil {
		t.Fatal("more Devices than DevicesMax accepted")
	}
}

// TestBatcherIgnoresRepeatedSubmit: a Submit of a request already queued
// (a front door resubmitting what a restarted batcher may have lost) is
// neither queued twice nor answered: the first Submit's answer is the one.
func TestBatcherIgnoresRepeatedSubmit(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 2
	b, c := newTestBatcher(t, cfg, 1)
	submit(b, c, 1)
	submit(b, c, 1)
	if out := c.take(); len(out) != 0 {
		t.Fatalf("a repeated Submit was answered or dispatched: %+v", out)
	}
	if s := b.Stats(); s.Queued != 1 || s.Held != 1 {
		t.Fatalf("want the request queued once, got %+v", s)
	}
	submit(b, c, 2)
	rb := ofType[RunBatch](c.take())
	if len(rb) != 1 || len(rb[0].Batch.Items) != 2 || rb[0].Batch.Items[0].Req.ID != 1 || rb[0].Batch.Items[1].Req.ID != 2 {
		t.Fatalf("want one batch of requests 1 and 2, got %+v", rb)
	}
}

// TestBatcherLearnsOverrun: with LearnOverrun, batches that run past their
// predicted time widen the margin admission holds back (capped at
// OverrunMax), and batches on time again make the batcher forget it.
func TestBatcherLearnsOverrun(t *testing.T) {
	dev := Address{ID: 100}
	run := func(b *Batcher, c *fakeCtx, id uint64, took time.Duration) {
		t.Helper()
		submit(b, c, id)
		rb := ofType[RunBatch](c.take())
		if len(rb) != 1 {
			t.Fatalf("request %d: want one batch at once, got %d", id, len(rb))
		}
		c.now += took
		b.Receive(c, BatchDone{Device: dev, BatchID: rb[0].Batch.ID})
	}
	// tight asks for a deadline 120 ms away: room for the 100 ms batch
	// and the 5 ms Margin, not for 30 ms more.
	tight := func(b *Batcher, c *fakeCtx, id uint64) Outcome {
		b.Receive(c, Submit{Req: Request{ID: id, Model: "m", Version: "v1", Input: "x", Arrival: c.now, Deadline: c.now + 120*ms, ReplyTo: Address{ID: 2}}})
		for _, s := range c.take() {
			if r, ok := s.msg.(Reply); ok && r.ID == id {
				return r.Outcome
			}
			if rb, ok := s.msg.(RunBatch); ok {
				b.Receive(c, BatchDone{Device: dev, BatchID: rb.Batch.ID})
				return Completed // admitted and sent
			}
		}
		t.Fatalf("request %d: neither answered nor sent", id)
		return 0
	}
	for _, learn := range []bool{false, true} {
		cfg := DefaultBatcherConfig()
		cfg.BatchMax = 1
		cfg.LearnOverrun = learn
		b, c := newTestBatcher(t, cfg, 1)
		run(b, c, 1, 130*ms)
		want := time.Duration(0)
		if learn {
			want = 30 * ms
		}
		if got := b.Stats().Overrun; got != want {
			t.Fatalf("learn %v: overrun %v after a 130 ms batch predicted at 100, want %v", learn, got, want)
		}
		wantOutcome := Completed
		if learn {
			wantOutcome = Rejected
		}
		if o := tight(b, c, 2); o != wantOutcome {
			t.Errorf("learn %v: a request 120 ms from its deadline: %v, want %v", learn, o, wantOutcome)
		}
		if !learn {
			continue
		}
		run(b, c, 3, time.Second)
		if got := b.Stats().Overrun; got != cfg.OverrunMax {
			t.Errorf("after a 1 s batch: overrun %v, want the cap %v", got, cfg.OverrunMax)
		}
		for id := uint64(10); id < 10+overrunWindowLen; id++ {
			run(b, c, id, 100*ms)
		}
		if got := b.Stats().Overrun; got != 0 {
			t.Errorf("after a window of batches on time: overrun %v, want 0", got)
		}
		if o := tight(b, c, 5); o != Completed {
			t.Errorf("after a window of batches on time: the tight request %v, want admitted", o)
		}
	}
}

// TestBatcherTenantBackFromIdleKeepsOneItemCredit: a tenant that was idle
// while another was served comes back one item ahead of the system
// virtual time, no more: of its three requests, two go before the busy
// tenant's next (one for being level, one for the credit), the third after.
func TestBatcherTenantBackFromIdleKeepsOneItemCredit(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 1
	cfg.Latency = FixedLatency(10 * ms)
	cfg.KeyPolicy = PolicyFair
	b, c := newTestBatcher(t, cfg, 1)
	dev := Address{ID: 100}
	send := func(id uint64, tenant string) {
		b.Receive(c, Submit{Req: Request{ID: id, Tenant: tenant, Model: "m", Version: "v1", Input: "x", Arrival: c.now, ReplyTo: Address{ID: 2}}})
	}
	// finish completes the batch on the device and returns the tenant of
	// the one sent next, if any.
	var running RunBatch
	next := func() string {
		t.Helper()
		rb := ofType[RunBatch](c.take())
		if len(rb) != 1 {
			t.Fatalf("want one batch sent, got %d", len(rb))
		}
		running = rb[0]
		return rb[0].Batch.Items[0].Req.Tenant
	}
	finish := func() string {
		t.Helper()
		c.now += 10 * ms
		b.Receive(c, BatchDone{Device: dev, BatchID: running.Batch.ID})
		return next()
	}
	send(1, "a")
	if got := next(); got != "a" {
		t.Fatalf("first batch: tenant %q", got)
	}
	for id := uint64(10); id < 20; id++ {
		send(id, "b")
	}
	for range 5 { // a is idle while b is served
		if got := finish(); got != "b" {
			t.Fatalf("a idle: tenant %q served", got)
		}
	}
	for id := uint64(2); id <= 4; id++ {
		send(id, "a")
	}
	var order []string
	for range 3 {
		order = append(order, finish())
	}
	if want := []string{"a", "a", "b"}; strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("after a's return: %v, want %v (level, then one item's credit, then b)", order, want)
	}
}

// TestBatcherRidersOfAPartBatchStayLevel: a batch that is not full took
// every request of its key, so the tenants riding in it (all but the one
// whose turn sent it) are charged no further than that tenant. Tenant a's
// one request and b's two leave together at the linger; then b's and a's
// requests on keys of their own compete for the device. Level, the older
// (b's) goes first. With a fourth request the batch is full, b is charged
// its three places, and a's goes first though it is younger.
func TestBatcherRidersOfAPartBatchStayLevel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rides int // b's requests in the shared batch
		want  string
	}{
		{"part batch", 2, "b"},
		{"full batch", 3, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultBatcherConfig()
			cfg.BatchMax = 4
			cfg.Latency = FixedLatency(10 * ms)
			cfg.KeyPolicy = PolicyFair
			b, c := newTestBatcher(t, cfg, 1)
			id := uint64(0)
			send := func(tenant, model string) {
				id++
				b.Receive(c, Submit{Req: Request{ID: id, Tenant: tenant, Model: model, Version: "v1", Input: "x", Arrival: c.now, ReplyTo: Address{ID: 2}}})
			}
			send("a", "shared")
			for range tc.rides {
				send("b", "shared")
			}
			c.advance(b, 5*ms)
			send("b", "mb")
			c.advance(b, 6*ms)
			send("a", "ma")
			c.advance(b, 10*ms) // the shared key's linger (tc.rides 2), or at once (full)
			rb := ofType[RunBatch](c.take())
			if len(rb) != 1 || rb[0].Batch.Key.Model != "shared" || len(rb[0].Batch.Items) != 1+tc.rides {
				t.Fatalf("want the shared batch of %d, got %+v", 1+tc.rides, rb)
			}
			c.advance(b, 20*ms) // both keys of their own are due by now
			b.Receive(c, BatchDone{Device: Address{ID: 100}, BatchID: rb[0].Batch.ID})
			next := ofType[RunBatch](c.take())
			if len(next) != 1 {
				t.Fatalf("want one batch after the shared one, got %d", len(next))
			}
			if got := next[0].Batch.Items[0].Req.Tenant; got != tc.want {
				t.Errorf("next after the shared batch: tenant %q, want %q", got, tc.want)
			}
		})
	}
}

// A node that leaves gracefully drains: the batch its device runs is not
// re-queued (it ends, and the device is out after its BatchDone); if no
// BatchDone comes a batch time after the batch's predicted end (the node
// stopped first), the batch is re-queued then.
func TestBatcherDrainsALeavingNode(t *testing.T) {
	for _, done := range []bool{true, false} {
		cfg := DefaultBatcherConfig()
		cfg.BatchMax = 4
		b, c := newTestBatcher(t, cfg, 0)
		for _, n := range []string{"x", "y"} {
			b.Receive(c, member.Update{Node: n, Inc: 1, Kind: member.Alive})
		}
		b.Receive(c, DeviceReady{Device: Address{Node: "x", ID: 100}, Incarnation: 1})
		for id := uint64(1); id <= 4; id++ {
			submit(b, c, id)
		}
		rb := ofType[RunBatch](c.take())
		if len(rb) != 1 {
			t.Fatalf("want one batch, got %+v", rb)
		}
		b.Receive(c, member.Update{Node: "x", Inc: 1, Kind: member.Left})
		if out := c.take(); len(out) != 0 {
			t.Fatalf("the leaving node's batch was answered or re-sent: %+v", out)
		}
		if st := b.Stats(); st.Held != 4 || st.Queued != 0 {
			t.Fatalf("after the leave: held %d queued %d, want the batch still running", st.Held, st.Queued)
		}
		if h, _ := b.Capacity(); h != 0 {
			t.Fatalf("a draining device counts as healthy (%d)", h)
		}
		if done {
			b.Receive(c, BatchDone{Device: Address{Node: "x", ID: 100}, BatchID: rb[0].Batch.ID})
			if st := b.Stats(); st.Held != 0 {
				t.Fatalf("after its BatchDone: held %d", st.Held)
			}
			submit(b, c, 5)
			c.advance(b, time.Second)
			if got := ofType[RunBatch](c.take()); len(got) != 0 {
				t.Fatalf("a device of a node that left got a batch: %+v", got)
			}
			continue
		}
		c.advance(b, 150*ms) // the batch's 100 ms, and less than a batch time more
		if st := b.Stats(); st.Queued != 0 {
			t.Fatalf("re-queued at %v, before its drain was due", c.now)
		}
		c.advance(b, 250*ms)
		if st, answered := b.Stats(), len(replies(c.take())); st.Retried+int64(answered) != 4 || st.Held != st.Queued {
			t.Fatalf("at %v the undrained batch: %d re-queued, %d answered, held %d, queued %d; want its 4 items back", c.now, st.Retried, answered, st.Held, st.Queued)
		}
	}
}
