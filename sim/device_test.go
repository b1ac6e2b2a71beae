package sim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

func job(id uint64, inputs ...string) actors.Job {
	return actors.Job{ID: id, Model: "m", Version: "v1", Inputs: inputs}
}

func TestDeviceNoFaults(t *testing.T) {
	lat := actors.LatencyModel{Base: 50 * time.Millisecond, PerItem: time.Millisecond, PerPaddedByte: time.Microsecond}
	d := NewDevice(lat, FaultPlan{}, NewStream(1, "d"))
	inputs := []string{"short", "a much longer input", "x"}
	done, res, hang := d.Run(time.Second, job(3, inputs...))
	if hang || res.Fault || res.Err != "" || res.ItemErrs != nil || res.ID != 3 {
		t.Fatalf("fault-free run failed: hang=%v %+v", hang, res)
	}
	if want := time.Second + lat.Predict(3, len("a much longer input")); done != want {
		t.Fatalf("done at %v, want %v (the latency model's prediction)", done, want)
	}
	for i, in := range inputs {
		if want := actors.EmulatedOutput("m", "v1", in); res.Outputs[i] != want {
			t.Fatalf("output %d = %q, want %q", i, res.Outputs[i], want)
		}
	}
	if d.Jobs() != 1 || d.BusyTime() != done-time.Second || d.Overlaps() != 0 {
		t.Fatalf("jobs %d busy %v overlaps %d", d.Jobs(), d.BusyTime(), d.Overlaps())
	}
	expectPanic(t, "no inputs", func() { d.Run(2*time.Second, job(4)) })
}

// runMany runs n back-to-back jobs of size items and tallies the outcomes.
type tally struct {
	hang, crash, batchErr, slow, items, itemErrs, jobs int
}

func runMany(t *testing.T, d *Device, start time.Duration, n, size int, base time.Duration) (tally, time.Duration) {
	t.Helper()
	var c tally
	now := start
	inputs := make([]string, size)
	for i := range inputs {
		inputs[i] = strings.Repeat("i", i%7+1)
	}
	for i := range n {
		done, res, hang := d.Run(now, job(uint64(i+1), inputs...))
		c.jobs++
		switch {
		case hang:
			c.hang++
			now += base // the actor's watchdog restarts the device
			continue
		case res.Fault:
			c.crash++
			if done <= now || done > now+base*10 {
				t.Fatalf("crash at %v for a job started at %v", done, now)
			}
		case res.Err != "":
			c.batchErr++
		default:
			c.items += size
			for j, e := range res.ItemErrs {
				if e != "" {
					c.itemErrs++
					if res.Outputs[j] != "" {
						t.Fatalf("failed item %d has output %q", j, res.Outputs[j])
					}
				} else if res.Outputs[j] != actors.EmulatedOutput("m", "v1", inputs[j]) {
					t.Fatalf("good item %d has the wrong output", j)
				}
			}
			if res.ItemErrs == nil {
				for j, in := range inputs {
					if res.Outputs[j] != actors.EmulatedOutput("m", "v1", in) {
						t.Fatalf("item %d has the wrong output", j)
					}
				}
			}
		}
		if !res.Fault && done-now > base {
			c.slow++
		}
		now = done
	}
	return c, now
}

func near(t *testing.T, what string, got, n int, p float64) {
	t.Helper()
	// Five standard deviations of a binomial: fails by chance about once in
	// 3.5 million runs, and the streams are seeded, so not at all.
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(got)-float64(n)*p) > 5*sd+1 {
		t.Errorf("%s: %d of %d, want about %.0f (p=%v)", what, got, n, float64(n)*p, p)
	}
}

func TestDeviceFaultRates(t *testing.T) {
	plan := FaultPlan{
		CrashRate: 0.05, HangRate: 0.03, BatchErrorRate: 0.1,
		SlowRate: 0.2, SlowFactor: 4, ItemErrorRate: 0.02,
	}
	base := 100 * time.Millisecond
	d := NewDevice(actors.FixedLatency(base), plan, NewStream(3, "device"))
	const n, size = 20_000, 10
	c, _ := runMany(t, d, 0, n, size, base)
	near(t, "hangs", c.hang, n, plan.HangRate)
	near(t, "crashes", c.crash, n, plan.CrashRate)
	near(t, "batch errors", c.batchErr, n, plan.BatchErrorRate)
	// Slowness is observable on runs that end at full latency.
	near(t, "slow runs", c.slow, n-c.hang-c.crash, plan.SlowRate)
	near(t, "item errors", c.itemErrs, c.items, plan.ItemErrorRate)
	if d.Overlaps() != 0 {
		t.Fatalf("%d overlaps on back-to-back jobs", d.Overlaps())
	}
}

func TestDeviceHeals(t *testing.T) {
	plan := FaultPlan{CrashRate: 0.3, HangRate: 0.3, BatchErrorRate: 0.3, SlowRate: 0.5, SlowFactor: 2, ItemErrorRate: 0.5, HealAt: time.Hour}
	base := 10 * time.Millisecond
	d := NewDevice(actors.FixedLatency(base), plan, NewStream(4, "device"))
	c, _ := runMany(t, d, 0, 200, 5, base)
	if c.hang == 0 || c.crash == 0 || c.batchErr == 0 || c.itemErrs == 0 || c.slow == 0 {
		t.Fatalf("before HealAt, some fault never happened: %+v", c)
	}
	c, _ = runMany(t, d, time.Hour, 2000, 5, base)
	if c.hang+c.crash+c.batchErr+c.itemErrs+c.slow != 0 {
		t.Fatalf("faults after HealAt: %+v", c)
	}
}

func TestDevicePoison(t *testing.T) {
	plan := FaultPlan{PoisonPrefix: "POISON", HealAt: time.Second}
	d := NewDevice(actors.FixedLatency(time.Millisecond), plan, NewStream(5, "device"))
	for i, now := range []time.Duration{0, time.Hour} { // before and after HealAt
		done, res, hang := d.Run(now, job(uint64(i+1), "ok", "POISON:x", "fine"))
		if hang || res.Fault || res.Err != ErrTextPoison || res.Outputs != nil {
			t.Fatalf("poison batch at %v: hang=%v %+v, want Err %q", now, hang, res, ErrTextPoison)
		}
		if done != now+time.Millisecond {
			t.Fatalf("poison batch done at %v, want at full latency", done)
		}
		_, res, _ = d.Run(done, job(uint64(i+10), "ok", "fine"))
		if res.Err != "" || res.Outputs[1] != actors.EmulatedOutput("m", "v1", "fine") {
			t.Fatalf("batch without the poison input failed: %+v", res)
		}
	}
}

func TestDeviceOverlaps(t *testing.T) {
	base := 100 * time.Millisecond
	d := NewDevice(actors.FixedLatency(base), FaultPlan{}, NewStream(6, "device"))
	d.Run(0, job(1, "a"))
	d.Run(base/2, job(2, "a")) // while job 1 runs
	d.Run(base/2+base, job(3, "a"))
	if d.Overlaps() != 1 {
		t.Fatalf("Overlaps() = %d, want 1", d.Overlaps())
	}

	// After a hang, the device has been restarted: no overlap.
	h := NewDevice(actors.FixedLatency(base), FaultPlan{HangRate: 1}, NewStream(6, "device"))
	h.Run(0, job(1, "a"))
	h.Run(1, job(2, "a"))
	if h.Overlaps() != 0 || h.BusyTime() != 0 {
		t.Fatalf("hung device: %d overlaps, busy %v; want 0, 0", h.Overlaps(), h.BusyTime())
	}

	// After a crash, a job started at or after the crash is no overlap.
	c := NewDevice(actors.FixedLatency(base), FaultPlan{CrashRate: 1}, NewStream(6, "device"))
	done, res, _ := c.Run(0, job(1, "a"))
	if !res.Fault {
		t.Fatal("CrashRate 1 did not crash")
	}
	c.Run(done, job(2, "a"))
	if c.Overlaps() != 0 {
		t.Fatalf("job after a crash counted as an overlap")
	}
}

func TestDeviceDeterministic(t *testing.T) {
	plan := FaultPlan{CrashRate: 0.1, HangRate: 0.1, BatchErrorRate: 0.1, SlowRate: 0.3, SlowFactor: 3, ItemErrorRate: 0.1}
	run := func(seed uint64) []actors.JobDone {
		d := NewDevice(actors.FixedLatency(time.Millisecond), plan, NewStream(seed, "device"))
		var out []actors.JobDone
		for i := range 100 {
			done, res, hang := d.Run(time.Duration(i)*time.Second, job(uint64(i), "a", "b", "c"))
			if !hang {
				res.ID = uint64(done) // fold the time in
			}
			out = append(out, res)
		}
		return out
	}
	a, b := run(9), run(9)
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Fault != b[i].Fault || a[i].Err != b[i].Err || len(a[i].ItemErrs) != len(b[i].ItemErrs) {
			t.Fatalf("job %d differs between runs with one seed: %+v vs %+v", i, a[i], b[i])
		}
	}
}

func TestFaultPlanValidate(t *testing.T) {
	bad := []FaultPlan{
		{CrashRate: -0.1},
		{HangRate: 1.5},
		{ItemErrorRate: math.NaN()},
		{CrashRate: 0.6, HangRate: 0.6},
		{SlowRate: 0.1, SlowFactor: 0.5},
		{SlowRate: 0.1},
		{HealAt: -1},
	}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("%+v: Validate() = nil, want an error", p)
		}
	}
	good := []FaultPlan{{}, {CrashRate: 0.5, HangRate: 0.5}, {SlowRate: 1, SlowFactor: 1}, {PoisonPrefix: "P", HealAt: time.Second}}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: Validate() = %v, want nil", p, err)
		}
	}
}
