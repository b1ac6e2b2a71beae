package sim

import (
	"math"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// TestScheduledCrashMidBatch: a crash scheduled at 1.05 s ends the job
// running then (started at 1 s, 100 ms long) at 1.05 s with a fault; the
// next job is not struck again; a crash scheduled while the device is idle
// strikes the next job halfway.
func TestScheduledCrashMidBatch(t *testing.T) {
	d := NewDevice(actors.FixedLatency(100*time.Millisecond), FaultPlan{}, NewStream(1, "d"))
	d.SetSchedule(2, []ScheduledFault{
		{At: 1050 * time.Millisecond, Device: 2, Kind: FaultCrash},
		{At: 1500 * time.Millisecond, Device: 2, Kind: FaultCrash},
		{At: time.Second, Device: 1, Kind: FaultHang}, // another device's
	})
	done, res, hang := d.Run(900*time.Millisecond, job(1, "a"))
	if hang || res.Fault || done != time.Second {
		t.Fatalf("job before the crash: done %v fault %v hang %v", done, res.Fault, hang)
	}
	done, res, hang = d.Run(time.Second, job(2, "a"))
	if hang || !res.Fault || done != 1050*time.Millisecond {
		t.Fatalf("job across the crash: done %v fault %v hang %v; want a fault at 1.05s", done, res.Fault, hang)
	}
	done, res, _ = d.Run(1100*time.Millisecond, job(3, "a"))
	if res.Fault || done != 1200*time.Millisecond {
		t.Fatalf("job after the crash: done %v fault %v", done, res.Fault)
	}
	done, res, _ = d.Run(2*time.Second, job(4, "a"))
	if !res.Fault || done != 2050*time.Millisecond {
		t.Fatalf("first job after an idle crash time: done %v fault %v; want a fault halfway, at 2.05s", done, res.Fault)
	}
}

// TestScheduledHangAndSlow: a hang strikes the job that covers its time;
// a slow fault multiplies the latency of the jobs started in its span and
// no other.
func TestScheduledHangAndSlow(t *testing.T) {
	d := NewDevice(actors.FixedLatency(100*time.Millisecond), FaultPlan{}, NewStream(1, "d"))
	d.SetSchedule(0, []ScheduledFault{
		{At: 3 * time.Second, Device: 0, Kind: FaultHang},
		{At: time.Second, Device: 0, Kind: FaultSlow, For: time.Second, Factor: 4},
	})
	for _, c := range []struct {
		start, done time.Duration
	}{
		{900 * time.Millisecond, time.Second},
		{time.Second, 1400 * time.Millisecond},
		{1900 * time.Millisecond, 2300 * time.Millisecond},
		{2 * time.Second, 2100 * time.Millisecond},
	} {
		done, res, hang := d.Run(c.start, job(1, "a"))
		if hang || res.Fault || done != c.done {
			t.Errorf("job at %v: done %v (fault %v hang %v), want %v", c.start, done, res.Fault, hang, c.done)
		}
	}
	if _, _, hang := d.Run(2950*time.Millisecond, job(2, "a")); !hang {
		t.Error("the job running at the hang's time did not hang")
	}
	if _, _, hang := d.Run(4*time.Second, job(3, "a")); hang {
		t.Error("a hang struck twice")
	}
}

// TestScheduledCrashRecovers: in a whole run, crashing two of six devices
// mid-batch loses nothing, retries the crashed batches, and keeps every
// invariant.
func TestScheduledCrashRecovers(t *testing.T) {
	cfg := shortReference(2)
	cfg.FaultSchedule = []ScheduledFault{
		{At: 2 * time.Second, Device: 0, Kind: FaultCrash},
		{At: 2 * time.Second, Device: 3, Kind: FaultHang},
	}
	retries := &retryCounter{}
	cfg.Observers = []Observer{retries}
	rep := mustRun(t, cfg)
	if err := rep.Check(); err != nil {
		t.Fatalf("%v: %q", err, rep.Violations.First)
	}
	// What the crash and the hang's watchdog delayed past its deadline
	// expires; everything else completes.
	if q := rep.Requests; q.Completed+q.Expired != q.Offered || q.Expired > q.Offered/100 {
		t.Errorf("completed %d, expired %d of %d", q.Completed, q.Expired, q.Offered)
	}
	if retries.n == 0 {
		t.Error("no request completed on a second attempt: the crashed batch was not retried")
	}
	bad := cfg
	bad.FaultSchedule = []ScheduledFault{{At: time.Second, Device: 6, Kind: FaultCrash}}
	if err := bad.Validate(); err == nil {
		t.Error("a fault on device 6 of 6 was accepted")
	}
}

// retryCounter counts the requests completed on a later attempt.
type retryCounter struct{ n int }

func (r *retryCounter) Deliver(_ time.Duration, _, _ actors.Address, msg actors.Message) {
	if m, ok := msg.(actors.Reply); ok && m.Outcome == actors.Completed && m.Attempts > 1 {
		r.n++
	}
}

// TestLatencySpread: with a spread of 0.5 the batch costs vary, average
// near the model's, and the run stays correct.
func TestLatencySpread(t *testing.T) {
	d := NewDevice(actors.FixedLatency(100*time.Millisecond), FaultPlan{}, NewStream(1, "d"))
	d.SetLatencySpread(0.5)
	var sum, lo, hi time.Duration
	lo = time.Hour
	const n = 20000
	now := time.Duration(0)
	for i := range n {
		done, _, _ := d.Run(now, job(uint64(i+1), "a"))
		took := done - now
		sum += took
		lo, hi = min(lo, took), max(hi, took)
		now = done
	}
	if mean := sum / n; mean < 97*time.Millisecond || mean > 103*time.Millisecond {
		t.Errorf("mean cost %v, want about 100ms", mean)
	}
	if lo > 40*time.Millisecond || hi < 300*time.Millisecond {
		t.Errorf("costs from %v to %v: not spread", lo, hi)
	}
}

// TestTimelineSumsToReport: the timeline's steps add up to the report's
// counts, and a step's latency is within the run's.
func TestTimelineSumsToReport(t *testing.T) {
	cfg := shortReference(3)
	cfg.TimelineEvery = time.Second
	rep := mustRun(t, cfg)
	if len(rep.Timeline) != 5 {
		t.Fatalf("%d steps over 5 s, want 5", len(rep.Timeline))
	}
	var offered, completed int64
	for _, s := range rep.Timeline {
		offered += s.Offered
		completed += s.Completed
		if s.LatencyMs.Max > rep.LatencyMs.Max+0.01 || s.LatencyMs.P50 <= 0 {
			t.Errorf("step %v: latency %+v outside the run's %+v", s.FromS, s.LatencyMs, rep.LatencyMs)
		}
	}
	if offered != rep.Requests.Offered || completed != rep.Requests.Completed {
		t.Errorf("timeline: %d offered, %d completed; report: %d, %d", offered, completed, rep.Requests.Offered, rep.Requests.Completed)
	}
	// Goodput counts the completions of the drain too; it cannot pass
	// all completions over the safety phase.
	if rep.GoodputRPS <= 0 || rep.GoodputRPS > float64(rep.Requests.Completed)/5 {
		t.Errorf("goodput %v against %d completions in 5 s", rep.GoodputRPS, rep.Requests.Completed)
	}
	if v, ok := rep.Versions["m@v1"]; !ok || v.Offered != rep.Requests.Offered {
		t.Errorf("versions %v: want all requests under m@v1", rep.Versions)
	}
	// The devices' busy fractions average to the fleet's utilisation.
	if len(rep.DeviceBusy) != cfg.Devices {
		t.Fatalf("%d device busy fractions for %d devices", len(rep.DeviceBusy), cfg.Devices)
	}
	mean := 0.0
	for _, b := range rep.DeviceBusy {
		mean += b / float64(cfg.Devices)
	}
	if math.Abs(mean-rep.DeviceUtilization) > 0.001 {
		t.Errorf("device busy %v: mean %.4f, utilisation %.4f", rep.DeviceBusy, mean, rep.DeviceUtilization)
	}
}
