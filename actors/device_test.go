package actors

import (
	"strings"
	"testing"
	"time"
)

var batcherAddr = Address{ID: 1}

func newTestDevice(t *testing.T) (*Device, *fakeCtx) {
	t.Helper()
	d, err := NewDevice(DefaultDeviceConfig(), batcherAddr)
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeCtx(Address{ID: 100})
	d.Receive(c, Start{})
	if r := ofType[DeviceReady](c.take()); len(r) != 1 || r[0].Incarnation != 1 {
		t.Fatalf("start: want one DeviceReady incarnation 1, got %+v", r)
	}
	return d, c
}

func testBatch(id uint64, inputs ...string) Batch {
	b := Batch{ID: id, Key: Key{Model: "m", Version: "v1"}}
	for i, in := range inputs {
		b.Items = append(b.Items, Item{Req: Request{ID: uint64(i + 1), Model: "m", Version: "v1", Input: in, Deadline: time.Hour, ReplyTo: Address{ID: 2}}, Attempt: 1})
	}
	return b
}

// runBackend answers the device's last job like a backend on which any
// input starting with "poison" fails the whole batch.
func runBackend(d *Device, c *fakeCtx) {
	job := c.jobs[len(c.jobs)-1]
	done := JobDone{ID: job.ID}
	for _, in := range job.Inputs {
		if strings.HasPrefix(in, "poison") {
			done = JobDone{ID: job.ID, Err: "poison in batch"}
			break
		}
		done.Outputs = append(done.Outputs, EmulatedOutput(job.Model, job.Version, in))
	}
	d.Receive(c, done)
}

func TestDeviceSplitIsolatesPoison(t *testing.T) {
	d, c := newTestDevice(t)
	inputs := []string{"a", "b", "poison-c", "d", "e", "f", "g"}
	d.Receive(c, RunBatch{Batch: testBatch(7, inputs...)})
	for runs := 0; len(ofType[BatchDone](c.sent)) == 0; runs++ {
		if runs > 2*len(inputs)-1 {
			t.Fatalf("more than 2n-1 runs for %d inputs", len(inputs))
		}
		runBackend(d, c)
	}
	got := c.take()
	rs := replies(got)
	if len(rs) != len(inputs) {
		t.Fatalf("want %d replies, got %d", len(inputs), len(rs))
	}
	seen := map[uint64]bool{}
	for _, r := range rs {
		if seen[r.ID] {
			t.Fatalf("duplicate reply for %d", r.ID)
		}
		seen[r.ID] = true
		in := inputs[r.ID-1]
		switch {
		case in == "poison-c" && r.Outcome != Failed:
			t.Errorf("poison input: outcome %v, want failed", r.Outcome)
		case in != "poison-c" && (r.Outcome != Completed || r.Output != EmulatedOutput("m", "v1", in)):
			t.Errorf("input %q: outcome %v output %q", in, r.Outcome, r.Output)
		}
	}
	if done := ofType[BatchDone](got); len(done) != 1 || done[0].BatchID != 7 {
		t.Errorf("want one BatchDone for batch 7, got %+v", done)
	}
}

func TestDeviceHangAbortsRestartsAndDropsLateResult(t *testing.T) {
	d, c := newTestDevice(t)
	d.Receive(c, RunBatch{Batch: testBatch(1, "a", "b")})
	job := c.jobs[0]
	cfg := DefaultDeviceConfig()
	// Nothing happens before the watchdog.
	c.advance(d, time.Duration(cfg.WatchdogMultiple)*100*time.Millisecond-1)
	if len(c.sent) != 0 {
		t.Fatalf("sent before the watchdog: %+v", c.sent)
	}
	c.advance(d, time.Duration(cfg.WatchdogMultiple)*100*time.Millisecond)
	ab := ofType[BatchAborted](c.take())
	if len(ab) != 1 || len(ab[0].Pending) != 2 || !strings.Contains(ab[0].Reason, "hung") {
		t.Fatalf("want one BatchAborted with 2 pending for a hang, got %+v", ab)
	}
	// The late result of the abandoned run is dropped.
	d.Receive(c, JobDone{ID: job.ID, Outputs: []string{"x", "y"}})
	if len(c.sent) != 0 {
		t.Fatalf("late result produced messages: %+v", c.sent)
	}
	// Restart after the first backoff, with a new incarnation.
	c.advance(d, c.now+cfg.RestartBackoff)
	r := ofType[DeviceReady](c.take())
	if len(r) != 1 || r[0].Incarnation != 2 {
		t.Fatalf("want DeviceReady incarnation 2 after backoff, got %+v", r)
	}
}

func TestDeviceBackoffDoublesThenQuarantines(t *testing.T) {
	d, c := newTestDevice(t)
	cfg := DefaultDeviceConfig()
	wantWait := cfg.RestartBackoff
	for i := 1; i <= cfg.QuarantineAfter; i++ {
		d.Receive(c, RunBatch{Batch: testBatch(uint64(i), "a")})
		d.Receive(c, JobDone{ID: c.jobs[len(c.jobs)-1].ID, Fault: true})
		got := c.take()
		if len(ofType[BatchAborted](got)) != 1 {
			t.Fatalf("failure %d: no BatchAborted", i)
		}
		down := ofType[DeviceDown](got)
		if i < cfg.QuarantineAfter {
			if len(down) != 0 {
				t.Fatalf("quarantined after %d failures, want %d", i, cfg.QuarantineAfter)
			}
			start := c.now
			c.advance(d, start+wantWait-1)
			if len(c.sent) != 0 {
				t.Fatalf("failure %d: restarted before %v", i, wantWait)
			}
			c.advance(d, start+wantWait)
			if len(ofType[DeviceReady](c.take())) != 1 {
				t.Fatalf("failure %d: no restart after %v", i, wantWait)
			}
			wantWait = min(2*wantWait, cfg.RestartBackoffMax)
			continue
		}
		if len(down) != 1 || down[0].Until != c.now+cfg.QuarantineFor {
			t.Fatalf("want DeviceDown until now+%v, got %+v", cfg.QuarantineFor, down)
		}
	}
}

func TestDeviceItemErrorFailsOnlyThatItem(t *testing.T) {
	d, c := newTestDevice(t)
	d.Receive(c, RunBatch{Batch: testBatch(3, "a", "b", "c")})
	d.Receive(c, JobDone{ID: c.jobs[0].ID, Outputs: []string{"A", "", "C"}, ItemErrs: []string{"", "bad item", ""}})
	rs := replies(c.take())
	if len(rs) != 3 || rs[0].Outcome != Completed || rs[1].Outcome != Failed || rs[2].Outcome != Completed {
		t.Fatalf("want completed, failed, completed; got %+v", rs)
	}
	if len(c.jobs) != 1 {
		t.Fatalf("an item error must not rerun the batch: %d runs", len(c.jobs))
	}
}

func TestDeviceSplitExpiresWhatCanNoLongerMakeIt(t *testing.T) {
	d, c := newTestDevice(t)
	b := testBatch(1, "poison", "b")
	for i := range b.Items {
		b.Items[i].Req.Deadline = 250 * time.Millisecond
	}
	d.Receive(c, RunBatch{Batch: b})
	// The pair fails; the poison fails alone; its second run alone (to
	// tell it from a transient error) and b's run would end past 250 ms,
	// so both are answered Expired, and the poison's run goes on,
	// unanswered, to confirm it; b's is skipped, the poison being found.
	for round := 1; round <= 3; round++ {
		c.now += 100 * time.Millisecond
		runBackend(d, c)
	}
	sent := c.take()
	rs := replies(sent)
	done := ofType[BatchDone](sent)
	if len(c.jobs) != 3 || len(rs) != 2 || rs[0].ID != 1 || rs[0].Outcome != Expired || rs[1].ID != 2 || rs[1].Outcome != Expired {
		t.Fatalf("want 3 runs, the poison and b expired; got %d runs, %+v", len(c.jobs), rs)
	}
	if len(done) != 1 || len(done[0].Isolated) != 1 || done[0].Isolated[0] != 1 {
		t.Fatalf("want the poison isolated, got %+v", done)
	}
}

// TestDeviceReannounce: asked to announce itself again, an idle device says
// DeviceReady at once and a running one once its batch is done (after its
// BatchDone), both in the same incarnation: nothing sent to it is lost.
func TestDeviceReannounce(t *testing.T) {
	d, c := newTestDevice(t)
	d.Receive(c, Reannounce{})
	if r := ofType[DeviceReady](c.take()); len(r) != 1 || r[0].Incarnation != 1 {
		t.Fatalf("idle: want DeviceReady incarnation 1, got %+v", r)
	}
	d.Receive(c, RunBatch{Batch: testBatch(3, "a", "b")})
	d.Receive(c, Reannounce{})
	if r := ofType[DeviceReady](c.sent); len(r) != 0 {
		t.Fatalf("running: announced before the batch was done: %+v", r)
	}
	runBackend(d, c)
	got := c.take()
	var order []string
	for _, s := range got {
		switch m := s.msg.(type) {
		case BatchDone:
			order = append(order, "done")
		case DeviceReady:
			if m.Incarnation != 1 {
				t.Fatalf("running: re-announced as incarnation %d, want 1", m.Incarnation)
			}
			order = append(order, "ready")
		}
	}
	if strings.Join(order, ",") != "done,ready" {
		t.Fatalf("running: want BatchDone then DeviceReady, got %v", order)
	}
	// Once only: the next batch ends with BatchDone alone.
	d.Receive(c, RunBatch{Batch: testBatch(4, "c")})
	runBackend(d, c)
	if r := ofType[DeviceReady](c.take()); len(r) != 0 {
		t.Fatalf("re-announced again unasked: %+v", r)
	}
}
