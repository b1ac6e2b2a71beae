package actors

import (
	"slices"
	"testing"
	"time"
)

// newAheadDevice is newTestDevice asking ahead by ahead (batches of the
// default 100 ms).
func newAheadDevice(t *testing.T, ahead time.Duration) (*Device, *fakeCtx) {
	t.Helper()
	cfg := DefaultDeviceConfig()
	cfg.AskAhead = ahead
	d, err := NewDevice(cfg, batcherAddr)
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeCtx(Address{ID: 100})
	d.Receive(c, Start{})
	c.take()
	return d, c
}

// asks returns the asks ahead (DeviceReady with Running) among got.
func asks(got []sent) []DeviceReady {
	var out []DeviceReady
	for _, r := range ofType[DeviceReady](got) {
		if r.Running != 0 {
			out = append(out, r)
		}
	}
	return out
}

func TestDeviceAsksAheadAndStartsTheNextAtTheEnd(t *testing.T) {
	d, c := newAheadDevice(t, 100*ms) // no less than a batch: ask at its start
	a, b := testBatch(1, "a1", "a2"), testBatch(2, "b1")
	d.Receive(c, RunBatch{Batch: a, Incarnation: 1})
	if got := asks(c.take()); len(got) != 1 || got[0].Running != 1 || got[0].Incarnation != 1 {
		t.Fatalf("want one ask ahead of batch 1 as it starts, got %+v", got)
	}
	d.Receive(c, RunBatch{Batch: b, Incarnation: 1})
	if len(c.jobs) != 1 || len(c.sent) != 0 {
		t.Fatalf("the batch sent ahead ran or was answered at once: jobs %+v, sent %+v", c.jobs, c.sent)
	}
	c.now = 100 * ms
	runBackend(d, c)
	got := c.take()
	if len(c.jobs) != 2 || !slices.Equal(c.jobs[1].Inputs, []string{"b1"}) {
		t.Fatalf("batch 2 did not start at batch 1's end: jobs %+v", c.jobs)
	}
	done := slices.IndexFunc(got, func(s sent) bool { _, ok := s.msg.(BatchDone); return ok })
	ask := slices.IndexFunc(got, func(s sent) bool { r, ok := s.msg.(DeviceReady); return ok && r.Running == 2 })
	if done < 0 || ask < done || got[done].msg.(BatchDone).BatchID != 1 {
		// The batcher takes batch 2 as running at batch 1's BatchDone; an
		// ask for 2 before it would be stale there.
		t.Fatalf("want BatchDone of 1, then an ask ahead of 2: %+v", got)
	}
	if rs := replies(got); len(rs) != 2 || rs[0].Outcome != Completed || rs[1].Outcome != Completed {
		t.Fatalf("batch 1's answers: %+v", rs)
	}
	// Batch 2 ends with nothing ahead: the device is idle, its ask stands
	// at the batcher (no second DeviceReady).
	c.now = 200 * ms
	runBackend(d, c)
	got = c.take()
	if rs := replies(got); len(rs) != 1 || rs[0].Dispatch != 100*ms {
		t.Fatalf("batch 2's answer, dispatched at its start (100ms): %+v", rs)
	}
	if len(ofType[DeviceReady](got)) != 0 || d.phase != deviceIdle {
		t.Fatalf("after batch 2: phase %v, sent %+v", d.phase, got)
	}
}

func TestDeviceAsksWithItsLead(t *testing.T) {
	d, c := newAheadDevice(t, 30*ms)
	d.Receive(c, RunBatch{Batch: testBatch(1, "a"), Incarnation: 1})
	if got := asks(c.take()); len(got) != 1 || got[0].Running != 1 || got[0].Ahead != 30*ms {
		t.Fatalf("want an ask ahead of batch 1, 30 ms before its end, as it starts; got %+v", got)
	}
}

func TestDeviceDropsABatchSentAheadOfAFailure(t *testing.T) {
	d, c := newAheadDevice(t, time.Second)
	d.Receive(c, RunBatch{Batch: testBatch(1, "a"), Incarnation: 1})
	d.Receive(c, RunBatch{Batch: testBatch(2, "b"), Incarnation: 1}) // held
	c.take()
	d.Receive(c, JobDone{ID: c.jobs[0].ID, Fault: true})
	got := c.take()
	if ab := ofType[BatchAborted](got); len(ab) != 1 || ab[0].BatchID != 1 || len(replies(got)) != 0 {
		// The batcher re-queues batch 2 with batch 1's abort.
		t.Fatalf("want batch 1 aborted and nothing answered, got %+v", got)
	}
	// Sent ahead before the batcher heard of the failure: dropped while
	// the device restarts, and by its next incarnation.
	d.Receive(c, RunBatch{Batch: testBatch(3, "c"), Incarnation: 1})
	c.advance(d, c.now+DefaultDeviceConfig().RestartBackoff)
	if r := ofType[DeviceReady](c.take()); len(r) != 1 || r[0].Incarnation != 2 {
		t.Fatalf("want a restart in incarnation 2, got %+v", r)
	}
	d.Receive(c, RunBatch{Batch: testBatch(4, "d"), Incarnation: 1})
	if len(c.jobs) != 1 || len(c.sent) != 0 {
		t.Fatalf("a batch sent to the failed incarnation ran: jobs %+v, sent %+v", c.jobs, c.sent)
	}
	d.Receive(c, RunBatch{Batch: testBatch(5, "e"), Incarnation: 2})
	if len(c.jobs) != 2 || !slices.Equal(c.jobs[1].Inputs, []string{"e"}) {
		t.Fatalf("the new incarnation's batch did not run: %+v", c.jobs)
	}
}

// aheadBatcher is newTestBatcher with one device, batches of batchMax and
// an SLO of slo.
func aheadBatcher(t *testing.T, batchMax int, slo time.Duration) (*Batcher, *fakeCtx) {
	t.Helper()
	cfg := DefaultBatcherConfig()
	cfg.BatchMax, cfg.SLO = batchMax, slo
	return newTestBatcher(t, cfg, 1)
}

func TestBatcherSendsAheadAndTakesItBack(t *testing.T) {
	b, c := aheadBatcher(t, 2, time.Second)
	dev := Address{ID: 100}
	for id := uint64(1); id <= 4; id++ {
		submit(b, c, id)
	}
	first := ofType[RunBatch](c.take())
	if len(first) != 1 || first[0].Incarnation != 1 {
		t.Fatalf("want one batch to incarnation 1, got %+v", first)
	}
	c.now = 10 * ms
	b.Receive(c, DeviceReady{Device: dev, Incarnation: 1, Running: first[0].Batch.ID})
	ahead := ofType[RunBatch](c.take())
	if len(ahead) != 1 || len(ahead[0].Batch.Items) != 2 || ahead[0].Batch.Items[0].Req.ID != 3 {
		t.Fatalf("want batch of 3 and 4 sent ahead, got %+v", ahead)
	}
	// A stale ask (of a batch that is not the one running) is ignored.
	b.Receive(c, DeviceReady{Device: dev, Incarnation: 1, Running: 99})
	submit(b, c, 5)
	submit(b, c, 6)
	if rb := ofType[RunBatch](c.take()); len(rb) != 0 {
		t.Fatalf("a third batch went to a device holding two: %+v", rb)
	}
	// Batch 1 fails: its items back with an attempt spent, those of the
	// batch ahead with theirs as they were, all ahead of 5 and 6.
	b.Receive(c, BatchAborted{Device: dev, BatchID: first[0].Batch.ID, Pending: []uint64{1, 2}, Reason: "device fault"})
	b.Receive(c, DeviceReady{Device: dev, Incarnation: 2})
	var order []uint64
	attempts := map[uint64]int{}
	for range 3 {
		rb := ofType[RunBatch](c.take())
		if len(rb) != 1 || rb[0].Incarnation != 2 {
			t.Fatalf("want one batch to incarnation 2, got %+v", rb)
		}
		for _, it := range rb[0].Batch.Items {
			order = append(order, it.Req.ID)
			attempts[it.Req.ID] = it.Attempt
		}
		b.Receive(c, BatchDone{Device: dev, BatchID: rb[0].Batch.ID})
	}
	if !slices.Equal(order, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Errorf("re-queued out of order: %v", order)
	}
	if attempts[1] != 2 || attempts[3] != 1 || attempts[5] != 1 {
		t.Errorf("attempts %v: want 2 for the failed batch's, 1 for the others", attempts)
	}
	if s := b.Stats(); s.Held != 0 || s.Queued != 0 {
		t.Errorf("held %d, queued %d after every batch ended", s.Held, s.Queued)
	}
}

func TestBatcherPromotesTheBatchAhead(t *testing.T) {
	b, c := aheadBatcher(t, 1, time.Second)
	dev := Address{ID: 100}
	submit(b, c, 1)
	submit(b, c, 2)
	one := ofType[RunBatch](c.take())[0].Batch.ID
	b.Receive(c, DeviceReady{Device: dev, Incarnation: 1, Running: one})
	two := ofType[RunBatch](c.take())[0].Batch.ID
	submit(b, c, 3)
	c.now = 100 * ms
	b.Receive(c, BatchDone{Device: dev, BatchID: one})
	if rb := ofType[RunBatch](c.take()); len(rb) != 0 {
		t.Fatalf("batch 2 runs now: nothing new goes to the device, got %+v", rb)
	}
	if f := b.freeTimes(); len(f) != 1 || f[0] != 200*ms {
		t.Errorf("device free at %v, want batch 2's end at 200ms", f)
	}
	// Its ask ahead of batch 2 takes request 3.
	b.Receive(c, DeviceReady{Device: dev, Incarnation: 1, Running: two})
	if rb := ofType[RunBatch](c.take()); len(rb) != 1 || rb[0].Batch.Items[0].Req.ID != 3 {
		t.Fatalf("want request 3 sent ahead of batch 2, got %+v", rb)
	}
}

// A busy device that asks ahead is on the ready list, but a request waits
// for its batch's end: admission counts that wait.
func TestBatcherAdmitsAgainstTheBatchInFlight(t *testing.T) {
	b, c := aheadBatcher(t, 1, 150*ms)
	submit(b, c, 1)
	one := ofType[RunBatch](c.take())[0].Batch.ID
	b.Receive(c, DeviceReady{Device: Address{ID: 100}, Incarnation: 1, Running: one})
	submit(b, c, 2) // would end at 200 ms, past its 150 ms
	got := c.take()
	if rs := replies(got); len(rs) != 1 || rs[0].Outcome != Rejected {
		t.Fatalf("want request 2 rejected at admission, got %+v", got)
	}
}

// A partial batch goes ahead only from the device's lead before the
// running batch's predicted end; a full one at once.
func TestBatcherSendsAPartialBatchAheadAtItsLead(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.BatchMax, cfg.SLO, cfg.LingerMax = 2, time.Second, 20*ms
	b, c := newTestBatcher(t, cfg, 1)
	submit(b, c, 1)
	submit(b, c, 2)
	one := ofType[RunBatch](c.take())[0].Batch.ID // free at 100 ms
	b.Receive(c, DeviceReady{Device: Address{ID: 100}, Incarnation: 1, Running: one, Ahead: 30 * ms})
	submit(b, c, 3) // due at 20 ms
	c.advance(b, 70*ms-1)
	if rb := ofType[RunBatch](c.take()); len(rb) != 0 {
		t.Fatalf("a partial batch went ahead before 70 ms: %+v", rb)
	}
	c.advance(b, 70*ms)
	rb := ofType[RunBatch](c.take())
	if len(rb) != 1 || len(rb[0].Batch.Items) != 1 || rb[0].Batch.Dispatch != 70*ms {
		t.Fatalf("want request 3 sent ahead at 70 ms, got %+v", rb)
	}
}

// TestDeviceDeclinesAheadWhileIsolating: once its running batch fails as a
// whole, a device asking ahead declines the batch it holds ahead, and one
// that comes later, rather than keep them behind the split rounds; it
// asks for no other until the batch is done.
func TestDeviceDeclinesAheadWhileIsolating(t *testing.T) {
	for _, late := range []bool{false, true} {
		d, c := newAheadDevice(t, time.Second)
		d.Receive(c, RunBatch{Batch: testBatch(1, "a", "poison-b", "c"), Incarnation: 1})
		if !late {
			d.Receive(c, RunBatch{Batch: testBatch(2, "x"), Incarnation: 1}) // held
		}
		c.take()
		runBackend(d, c) // the whole batch fails: split rounds start
		got := c.take()
		if late {
			d.Receive(c, RunBatch{Batch: testBatch(2, "x"), Incarnation: 1})
			got = append(got, c.take()...)
		}
		dec := ofType[BatchDeclined](got)
		if len(dec) != 1 || dec[0].BatchID != 2 {
			t.Fatalf("late %v: want batch 2 declined, got %+v", late, got)
		}
		for runs := 0; len(ofType[BatchDone](c.sent)) == 0; runs++ {
			if runs > 2*3 {
				t.Fatalf("late %v: more than 2n-1 runs and one more per poison", late)
			}
			runBackend(d, c)
		}
		got = c.take()
		if len(asks(got)) != 0 {
			t.Errorf("late %v: asked ahead while isolating: %+v", late, asks(got))
		}
		for _, j := range c.jobs {
			if slices.Contains(j.Inputs, "x") {
				t.Fatalf("late %v: the declined batch ran: %+v", late, c.jobs)
			}
		}
		if d.phase != deviceIdle {
			t.Errorf("late %v: phase %v after the batch, want idle", late, d.phase)
		}
	}
}

// TestBatcherTakesBackADeclinedAhead: a batch sent ahead and declined goes
// back to its queue at the attempts it had, and on to the next device that
// is free; the device's running batch stays its.
func TestBatcherTakesBackADeclinedAhead(t *testing.T) {
	b, c := aheadBatcher(t, 2, time.Second)
	dev := Address{ID: 100}
	for id := uint64(1); id <= 4; id++ {
		submit(b, c, id)
	}
	first := ofType[RunBatch](c.take())[0].Batch
	b.Receive(c, DeviceReady{Device: dev, Incarnation: 1, Running: first.ID})
	ahead := ofType[RunBatch](c.take())[0].Batch
	b.Receive(c, BatchDeclined{Device: dev, BatchID: ahead.ID})
	if s := b.Stats(); s.Queued != 2 || s.Held != 4 || s.Ready != 0 {
		t.Fatalf("stats %+v: want the batch ahead queued, the running one held, no device ready", s)
	}
	if err := b.Check(c.now); err != nil {
		t.Fatal(err)
	}
	// The device runs on; at its end it takes them again.
	c.now = 2 * time.Second / 10
	b.Receive(c, BatchDone{Device: dev, BatchID: first.ID})
	rb := ofType[RunBatch](c.take())
	if len(rb) != 1 || len(rb[0].Batch.Items) != 2 || rb[0].Batch.Items[0].Req.ID != 3 || rb[0].Batch.Items[0].Attempt != 1 {
		t.Fatalf("want requests 3 and 4 again, first attempt, got %+v", rb)
	}
}
