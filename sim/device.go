package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/batchd/batchd/actors"
)

// FaultPlan says which device faults are switched on for a run, as
// probabilities per batch. Each seed can switch on a different subset, so a
// sweep of seeds explores different failure mixes.
//
// The batch-level outcomes are exclusive and drawn from one number, so each
// rate is exactly the probability of its outcome: a batch hangs with
// HangRate, else crashes with CrashRate, else fails whole with
// BatchErrorRate; their sum must not exceed 1. Slowness and item errors are
// drawn on their own and combine with the rest.
type FaultPlan struct {
	// CrashRate is the probability that the device crashes during a batch:
	// the job ends with JobDone{Fault: true} at a uniform fraction of its
	// latency, and no output is valid.
	CrashRate float64
	// HangRate is the probability that a batch hangs: it never completes
	// and no JobDone is delivered; only the device actor's watchdog notices.
	HangRate float64
	// SlowRate is the probability that a batch runs slow.
	SlowRate float64
	// SlowFactor multiplies the latency of a slow batch (a crash in a slow
	// batch happens within the slow latency). Must be at least 1 when
	// SlowRate is positive; 4 models a straggler beyond a watchdog at 3x.
	SlowFactor float64
	// BatchErrorRate is the probability that the whole batch fails with an
	// error at its full latency while the device stays usable
	// (JobDone.Err).
	BatchErrorRate float64
	// ItemErrorRate is the probability that one item fails on its own
	// (JobDone.ItemErrs); the other items of the batch are good. Drawn per
	// item, in batches that do not fail as a whole.
	ItemErrorRate float64
	// PoisonPrefix marks poison inputs: a batch holding an input that starts
	// with it fails whole with an error, every time, at its full latency,
	// healed or not, so splitting the batch is the only way to serve the
	// other items. Empty switches poison off.
	PoisonPrefix string
	// HealAt ends the fault phase: only jobs started before it can crash,
	// hang, run slow or fail at random (poison still fails). It lets a run
	// check safety under faults, then liveness once they stop. Zero means
	// the faults never heal.
	HealAt time.Duration
}

// Validate reports the first field that makes the plan unusable.
func (p FaultPlan) Validate() error {
	rates := []struct {
		name string
		v    float64
	}{
		{"CrashRate", p.CrashRate}, {"HangRate", p.HangRate}, {"SlowRate", p.SlowRate},
		{"BatchErrorRate", p.BatchErrorRate}, {"ItemErrorRate", p.ItemErrorRate},
	}
	for _, r := range rates {
		if !(r.v >= 0 && r.v <= 1) { // also catches NaN
			return fmt.Errorf("fault plan: %s %v: must be in [0, 1]", r.name, r.v)
		}
	}
	if sum := p.HangRate + p.CrashRate + p.BatchErrorRate; sum > 1 {
		return fmt.Errorf("fault plan: HangRate+CrashRate+BatchErrorRate %v: must not exceed 1", sum)
	}
	if p.SlowRate > 0 && !(p.SlowFactor >= 1 && !math.IsInf(p.SlowFactor, 1)) {
		return fmt.Errorf("fault plan: SlowFactor %v: must be finite and at least 1 when SlowRate is set", p.SlowFactor)
	}
	if p.HealAt < 0 {
		return fmt.Errorf("fault plan: HealAt %v: must not be negative", p.HealAt)
	}
	return nil
}

// Error texts of injected failures, so a reader of a reply can tell an
// injected failure from a bug.
const (
	ErrTextPoison     = "sim: poison input"
	ErrTextBatchFault = "sim: injected batch error"
	ErrTextItemFault  = "sim: injected item error"
)

// Device is an Executor that emulates the seeds' GPU: one batch at a time,
// costed by a latency model, answering with actors.EmulatedOutput, with the
// faults of a FaultPlan. It also watches invariant 3 from below: it counts
// jobs started while its previous job was still running (Overlaps).
type Device struct {
	latency actors.LatencyModel
	faults  FaultPlan
	rng     *rand.Rand

	jobs     int
	busy     time.Duration
	overlaps int
	// busyUntil is when the running job ends, for overlap detection; zero
	// when the device is known to be restarted before the next job (after a
	// hang) or the running job is a slow one (see Overlaps).
	busyUntil time.Duration

	// schedule holds this device's scheduled faults sorted by time, and
	// fired marks the crashes and hangs that have struck (schedule.go).
	schedule []ScheduledFault
	fired    []bool
	// spread is the σ of the log-normal latency factor; 0: none.
	spread float64
}

var _ Executor = (*Device)(nil)

// NewDevice returns a device with the given cost model and faults, drawing
// its faults from rng (give it a stream of its own, e.g.
// World.Stream("device/<id>")). It panics on an invalid model or plan:
// both are validated where they are read.
func NewDevice(latency actors.LatencyModel, faults FaultPlan, rng *rand.Rand) *Device {
	if err := latency.Validate(); err != nil {
		panic("sim: NewDevice: " + err.Error())
	}
	if err := faults.Validate(); err != nil {
		panic("sim: NewDevice: " + err.Error())
	}
	if rng == nil {
		panic("sim: NewDevice: nil rng")
	}
	return &Device{latency: latency, faults: faults, rng: rng}
}

// Run runs job at now and returns when it ends and how.
//
// The random numbers are drawn in a fixed order and number per job (batch
// outcome, slowness, crash point, then one per item when ItemErrorRate is
// set), whatever the outcome and whether healed or not, so a job's fate
// depends only on the seed and how many jobs ran before it.
func (d *Device) Run(now time.Duration, job actors.Job) (time.Duration, actors.JobDone, bool) {
	n := len(job.Inputs)
	if n < 1 {
		panic(fmt.Sprintf("sim: device job %d has no inputs", job.ID))
	}
	d.jobs++
	if now < d.busyUntil {
		d.overlaps++
	}

	uOutcome := d.rng.Float64()
	uSlow := d.rng.Float64()
	uCrashAt := 1 - d.rng.Float64() // (0, 1]: a crash takes some time
	faulty := d.faults.HealAt == 0 || now < d.faults.HealAt

	maxLen := 0
	poison := false
	for _, in := range job.Inputs {
		maxLen = max(maxLen, len(in))
		if d.faults.PoisonPrefix != "" && strings.HasPrefix(in, d.faults.PoisonPrefix) {
			poison = true
		}
	}
	latency := d.latency.Predict(n, maxLen)
	slow := faulty && uSlow < d.faults.SlowRate
	if slow {
		latency = time.Duration(float64(latency) * d.faults.SlowFactor)
	}

	var itemFail []bool
	if d.faults.ItemErrorRate > 0 {
		itemFail = make([]bool, n)
		for i := range itemFail {
			itemFail[i] = d.rng.Float64() < d.faults.ItemErrorRate
		}
	}
	// The scheduled faults and the spread come last and only when set, so
	// a run without them draws exactly the numbers it always drew.
	if d.spread > 0 {
		if x := d.spreadFactor(); x != 1 {
			latency = max(time.Duration(float64(latency)*x), 1)
			// A long draw may pass the watchdog, which restarts the
			// device before the job ends: as with a slow run, the next
			// job is then no overlap.
			slow = slow || x > 1
		}
	}
	var struck ScheduledFault
	var strikes bool
	if len(d.schedule) > 0 {
		if x := d.slowBy(now); x != 1 {
			latency = time.Duration(float64(latency) * x)
			slow = true
		}
		struck, strikes = d.strike(now, now+latency)
	}

	res := actors.JobDone{ID: job.ID}
	f := d.faults
	switch {
	case strikes && struck.Kind == FaultHang:
		d.busyUntil = 0
		return 0, actors.JobDone{}, true
	case strikes:
		// A crash mid-batch: at its time if the job is running then, else
		// halfway through the job it waited for.
		done := struck.At
		if done <= now {
			done = now + max(latency/2, 1)
		}
		d.account(done-now, slow, done)
		res.Fault = true
		return done, res, false
	case poison:
		res.Err = ErrTextPoison
	case faulty && uOutcome < f.HangRate:
		// The device is stuck until its actor restarts it; any later job
		// runs on a restarted device.
		d.busyUntil = 0
		return 0, actors.JobDone{}, true
	case faulty && uOutcome < f.HangRate+f.CrashRate:
		done := now + time.Duration(uCrashAt*float64(latency))
		d.account(done-now, slow, done)
		res.Fault = true
		return done, res, false
	case faulty && uOutcome < f.HangRate+f.CrashRate+f.BatchErrorRate:
		res.Err = ErrTextBatchFault
	default:
		res.Outputs = make([]string, n)
		for i, in := range job.Inputs {
			if faulty && itemFail != nil && itemFail[i] {
				if res.ItemErrs == nil {
					res.ItemErrs = make([]string, n)
				}
				res.ItemErrs[i] = ErrTextItemFault
				continue
			}
			res.Outputs[i] = actors.EmulatedOutput(job.Model, job.Version, in)
		}
	}
	done := now + latency
	d.account(latency, slow, done)
	return done, res, false
}

func (d *Device) account(took time.Duration, slow bool, done time.Duration) {
	d.busy += took
	if slow {
		// The actor's watchdog may declare a straggler hung and restart the
		// device before it ends, which the executor cannot see; a job then
		// started would be no overlap.
		d.busyUntil = 0
	} else {
		d.busyUntil = done
	}
}

// BusyTime is the total run time of the jobs that end (complete, fail or
// crash), counted in full when each starts; a hung job adds nothing, as its
// end is unknown. Divided by the elapsed time it is the utilisation, exact
// once the last job has ended.
func (d *Device) BusyTime() time.Duration { return d.busy }

// Jobs is the number of jobs run, hung ones included.
func (d *Device) Jobs() int { return d.jobs }

// Overlaps counts jobs started while the device's previous job was still
// running: violations of invariant 3 (a device runs one batch at a time).
// A job after a hang is none (the device was restarted), nor is a job
// after a crash's instant. A job that starts during a slow run is not
// counted either, because the device actor's watchdog may legitimately
// have restarted the device; so the check assumes a normal-speed run ends
// before the watchdog fires.
func (d *Device) Overlaps() int { return d.overlaps }
