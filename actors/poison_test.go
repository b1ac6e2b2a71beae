package actors

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestDeviceReportsIsolatedPoison(t *testing.T) {
	d, c := newTestDevice(t)
	d.Receive(c, RunBatch{Batch: testBatch(7, "a", "poison-b", "c", "poison-d")})
	for runs := 0; len(ofType[BatchDone](c.sent)) == 0; runs++ {
		if runs > 7+2 {
			t.Fatal("more than 2n-1 runs and one more per poison")
		}
		runBackend(d, c)
	}
	done := ofType[BatchDone](c.take())
	if len(done) != 1 || len(done[0].Isolated) != 2 || done[0].Isolated[0] != 2 || done[0].Isolated[1] != 4 {
		t.Fatalf("want BatchDone isolating items 2 and 4, got %+v", done)
	}
	// The next batch reports only its own.
	d.Receive(c, RunBatch{Batch: testBatch(8, "x")})
	runBackend(d, c)
	if done := ofType[BatchDone](c.take()); len(done) != 1 || len(done[0].Isolated) != 0 {
		t.Fatalf("a clean batch reported %+v", done)
	}
}

// TestDeviceIsolatesPastTheDeadline: when a failed batch's split rounds
// come too late for every item's deadline, the items are answered Expired
// at once, and the rounds run on, unanswered, until the poison is alone:
// the batcher learns it all the same.
func TestDeviceIsolatesPastTheDeadline(t *testing.T) {
	d, c := newTestDevice(t)
	b := testBatch(9, "a", "poison-b", "c", "d")
	for i := range b.Items {
		b.Items[i].Req.Deadline = 150 * time.Millisecond // one run of 100 ms fits, not two
	}
	d.Receive(c, RunBatch{Batch: b})
	for runs := 0; len(ofType[BatchDone](c.sent)) == 0; runs++ {
		if runs > 2*len(b.Items) {
			t.Fatal("more than 2n-1 runs and one more per poison")
		}
		c.now += 100 * time.Millisecond
		runBackend(d, c)
	}
	sent := c.take()
	done := ofType[BatchDone](sent)
	if len(done) != 1 || len(done[0].Isolated) != 1 || done[0].Isolated[0] != 2 {
		t.Fatalf("want BatchDone isolating item 2, got %+v", done)
	}
	rs := replies(sent)
	seen := map[uint64]int{}
	for _, r := range rs {
		seen[r.ID]++
		if r.Outcome != Expired {
			t.Errorf("item %d: %v, want expired (no split round fits its deadline)", r.ID, r.Outcome)
		}
	}
	if len(rs) != 4 || len(seen) != 4 {
		t.Fatalf("want one reply per item, got %+v", rs)
	}
	// Runs: the batch, [a b], [a], [b] twice (the second to tell a poison
	// from a transient error): the clean half [c d] answers no one and is
	// dropped once [a b] fails.
	if len(c.jobs) != 5 {
		t.Errorf("%d runs, want 5", len(c.jobs))
	}
}

// poisonRig drives a batcher of 3 devices whose devices answer at once.
type poisonRig struct {
	t   *testing.T
	b   *Batcher
	c   *fakeCtx
	cfg BatcherConfig
}

func newPoisonRig(t *testing.T) *poisonRig {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax = 10
	b, c := newTestBatcher(t, cfg, 3)
	return &poisonRig{t, b, c, cfg}
}

func (r *poisonRig) sub(id uint64, tenant, input string) {
	r.b.Receive(r.c, Submit{Req: Request{ID: id, Tenant: tenant, Model: "m", Input: input, Arrival: r.c.now, ReplyTo: Address{ID: 2}}})
}

// flush lets the linger pass and completes every batch sent, reporting
// the items in isolated as poison found alone; it returns the batches'
// request IDs and the replies the batcher sent itself.
func (r *poisonRig) flush(isolated ...uint64) (batches [][]uint64, rs []Reply) {
	r.c.advance(r.b, r.c.now+r.cfg.Linger(3, 16))
	for _, x := range r.c.take() {
		switch m := x.msg.(type) {
		case Reply:
			rs = append(rs, m)
		case RunBatch:
			var ids, iso []uint64
			for _, it := range m.Batch.Items {
				ids = append(ids, it.Req.ID)
				if slices.Contains(isolated, it.Req.ID) {
					iso = append(iso, it.Req.ID)
				}
			}
			batches = append(batches, ids)
			r.b.Receive(r.c, BatchDone{Device: x.to, BatchID: m.Batch.ID, Isolated: iso})
		}
	}
	if err := r.b.Check(r.c.now); err != nil {
		r.t.Fatal(err)
	}
	return batches, rs
}

// TestBatcherRefusesKnownPoison: once a device isolated a poison input,
// its copies are answered Failed at admission, taking no device time and
// no one's batch, until PoisonMemoryAge has passed.
func TestBatcherRefusesKnownPoison(t *testing.T) {
	r := newPoisonRig(t)
	r.sub(1, "bad", "poison")
	r.sub(2, "good", "fine")
	if got, _ := r.flush(1); len(got) != 1 || len(got[0]) != 2 {
		t.Fatalf("before any poison is known: want one batch of both, got %v", got)
	}
	r.sub(3, "bad", "poison")
	r.sub(4, "good", "fine")
	got, rs := r.flush()
	if len(rs) != 1 || rs[0].ID != 3 || rs[0].Outcome != Failed || rs[0].Reason != ReasonBackend {
		t.Fatalf("the known poison: want failed at admission, got %+v", rs)
	}
	if len(got) != 1 || len(got[0]) != 1 || got[0][0] != 4 {
		t.Fatalf("want request 4 alone in a batch, got %v", got)
	}
	r.c.advance(r.b, r.c.now+r.cfg.PoisonMemoryAge+time.Second)
	r.sub(5, "bad", "poison")
	if got, rs := r.flush(); len(rs) != 0 || len(got) != 1 {
		t.Fatalf("after PoisonMemoryAge: want it run again, got %v, %+v", got, rs)
	}
}

// TestBatcherSuspectTenant: a tenant that sent TenantSuspectAfter distinct
// poison inputs has its requests batched apart from other tenants', which
// still share batches among themselves.
func TestBatcherSuspectTenant(t *testing.T) {
	r := newPoisonRig(t)
	for i := range uint64(TenantSuspectAfter) {
		r.sub(10+i, "bad", fmt.Sprint("poison ", i))
		r.sub(20+i, "good", "fine")
		r.flush(10 + i)
	}
	r.sub(1, "bad", "other")
	r.sub(2, "good", "fine")
	r.sub(3, "good 2", "fine too")
	got, _ := r.flush()
	if len(got) != 2 {
		t.Fatalf("want the suspect tenant's request apart, got %v", got)
	}
	for _, ids := range got {
		if slices.Contains(ids, 1) != (len(ids) == 1) {
			t.Fatalf("want [1] and [2 3], got %v", got)
		}
	}
}

// TestDeviceFaultDuringIsolation: a device fault while the split rounds run
// on past the deadlines hands back only the items not answered yet: the
// ones answered Expired must not be retried (each request has one answer).
func TestDeviceFaultDuringIsolation(t *testing.T) {
	d, c := newTestDevice(t)
	b := testBatch(9, "a", "poison-b", "c", "d")
	for i := range b.Items {
		b.Items[i].Req.Deadline = 150 * time.Millisecond
	}
	d.Receive(c, RunBatch{Batch: b})
	c.now = 100 * time.Millisecond
	runBackend(d, c) // fails whole; [a b] expire and run on unanswered
	c.now = 150 * time.Millisecond
	d.Receive(c, JobDone{ID: c.jobs[len(c.jobs)-1].ID, Fault: true})
	sent := c.take()
	ab := ofType[BatchAborted](sent)
	if len(ab) != 1 {
		t.Fatalf("want the batch aborted, got %+v", sent)
	}
	answered := map[uint64]bool{}
	for _, r := range replies(sent) {
		answered[r.ID] = true
	}
	for _, id := range ab[0].Pending {
		if answered[id] {
			t.Errorf("request %d was answered and handed back for a retry", id)
		}
	}
	if len(answered)+len(ab[0].Pending) != 4 {
		t.Errorf("answered %v, handed back %v: want every item in one of them", answered, ab[0].Pending)
	}
}

// TestDeviceTransientErrorIsNoPoison: an input that fails alone once after
// a split runs alone again; passing there, it completes and is not
// reported: a transient error is not a poison.
func TestDeviceTransientErrorIsNoPoison(t *testing.T) {
	d, c := newTestDevice(t)
	d.Receive(c, RunBatch{Batch: testBatch(5, "a", "x")})
	fail := func() { d.Receive(c, JobDone{ID: c.jobs[len(c.jobs)-1].ID, Err: "transient"}) }
	ok := func() {
		job := c.jobs[len(c.jobs)-1]
		var out []string
		for _, in := range job.Inputs {
			out = append(out, EmulatedOutput(job.Model, job.Version, in))
		}
		d.Receive(c, JobDone{ID: job.ID, Outputs: out})
	}
	fail() // the pair
	ok()   // a alone
	fail() // x alone, once
	ok()   // x alone again
	sent := c.take()
	done := ofType[BatchDone](sent)
	rs := replies(sent)
	if len(done) != 1 || len(done[0].Isolated) != 0 {
		t.Fatalf("want BatchDone isolating nothing, got %+v", done)
	}
	if len(rs) != 2 || rs[0].Outcome != Completed || rs[1].Outcome != Completed {
		t.Fatalf("want both completed, got %+v", rs)
	}
}

// TestBatcherCapsSuspects: while another tenant's requests wait, the
// batches of a suspect tenant hold at most max(1,
// devices/SuspectDevicesDiv) devices, and its other requests wait for one
// of its batches to end; with no one else waiting they take any device
// (the cap would only idle it). Requests it had queued when it turned
// suspect move to its group, in their order.
func TestBatcherCapsSuspects(t *testing.T) {
	r := newPoisonRig(t) // 3 devices: one for suspects
	for i := range uint64(TenantSuspectAfter - 1) {
		r.sub(10+i, "bad", fmt.Sprint("poison ", i))
		r.flush(10 + i)
	}
	// Queued when its third poison is found, on a device meanwhile.
	r.sub(12, "bad", "poison 2")
	r.c.advance(r.b, r.c.now+r.cfg.Linger(3, 16))
	running := r.c.take()
	r.sub(30, "bad", "queued before")
	r.b.Receive(r.c, BatchDone{Device: running[0].to, BatchID: running[0].msg.(RunBatch).Batch.ID, Isolated: []uint64{12}})
	// Requests with a second to wait if they must.
	patient := func(id uint64, tenant string) {
		r.b.Receive(r.c, Submit{Req: Request{ID: id, Tenant: tenant, Model: "m", Input: fmt.Sprint("input ", id),
			Arrival: r.c.now, Deadline: r.c.now + time.Second, ReplyTo: Address{ID: 2}}})
	}
	bad := func(from, n uint64) {
		for id := from; id < from+n; id++ {
			patient(id, "bad")
		}
	}
	// No one else waits: the suspect's three batches take the three devices.
	bad(40, uint64(3*r.cfg.BatchMax-1))
	var on []sent
	for _, x := range r.c.take() {
		if _, ok := x.msg.(RunBatch); ok {
			on = append(on, x)
		}
	}
	if len(on) != 3 {
		t.Fatalf("with no one else waiting: want the suspect's 3 batches on the 3 devices, got %d", len(on))
	}
	if first := on[0].msg.(RunBatch).Batch.Items[0]; first.Req.ID != 30 || first.Group == 0 {
		t.Fatalf("the suspect's first batch starts with %d of group %x; want 30, moved to its group", first.Req.ID, first.Group)
	}
	if s := r.b.Stats(); s.SuspectsCapped {
		t.Fatalf("stats %+v: capped with no one else waiting", s)
	}
	// Another tenant waits now: the cap holds, and the device a batch of
	// the suspect's frees goes to the other, not to the suspect's next
	// full batch.
	patient(1, "good")
	bad(100, uint64(r.cfg.BatchMax))
	if s := r.b.Stats(); !s.SuspectsCapped || s.Queued != r.cfg.BatchMax+1 {
		t.Fatalf("stats %+v: want the cap, the other's request and a batch of the suspect's queued", s)
	}
	r.c.now += r.cfg.Linger(3, 16)
	r.b.Receive(r.c, BatchDone{Device: on[0].to, BatchID: on[0].msg.(RunBatch).Batch.ID})
	if sent := ofType[RunBatch](r.c.take()); len(sent) != 1 || sent[0].Batch.Items[0].Req.ID != 1 {
		t.Fatalf("want request 1 on the freed device, got %+v", sent)
	}
	if err := r.b.Check(r.c.now); err != nil {
		t.Fatal(err)
	}
	// No one else waits: the suspect's batch goes on the next device freed.
	r.b.Receive(r.c, BatchDone{Device: on[1].to, BatchID: on[1].msg.(RunBatch).Batch.ID})
	if sent := ofType[RunBatch](r.c.take()); len(sent) != 1 || sent[0].Batch.Items[0].Req.Tenant != "bad" || len(sent[0].Batch.Items) != r.cfg.BatchMax {
		t.Fatalf("want the suspect's full batch on the freed device, got %+v", sent)
	}
}
