package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/devicemodel"
)

// FaultPlan says which device faults are switched on for a run, as
// probabilities per batch: the one device model's (devicemodel.FaultPlan), which
// the live emulated backend runs too. Each seed can switch on a different
// subset, so a sweep of seeds explores different failure mixes.
type FaultPlan = devicemodel.FaultPlan

// Error texts of injected failures, so a reader of a reply can tell an
// injected failure from a bug.
const (
	ErrTextPoison     = "sim: poison input"
	ErrTextBatchFault = "sim: injected batch error"
	ErrTextItemFault  = "sim: injected item error"
)

// Device is an Executor that emulates the seeds' GPU: one batch at a time,
// each batch's fate drawn from an devicemodel.Model (its cost model, the
// faults of a FaultPlan, scheduled faults, latency spread), answering with
// actors.EmulatedOutput. It also watches invariant 3 from below: it counts
// jobs started while its previous job was still running (Overlaps).
type Device struct {
	model *devicemodel.Model
	rng   *rand.Rand

	jobs     int
	busy     time.Duration
	overlaps int
	// busyUntil is when the running job ends, for overlap detection; zero
	// when the device is known to be restarted before the next job (after a
	// hang) or the running job is a slow one (see Overlaps).
	busyUntil time.Duration
	// lastEnd is when the last job that ends ends (LastEnd).
	lastEnd time.Duration
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
	m, err := devicemodel.New(latency, faults)
	if err != nil {
		panic("sim: NewDevice: " + err.Error())
	}
	if rng == nil {
		panic("sim: NewDevice: nil rng")
	}
	return &Device{model: m, rng: rng}
}

// SetSchedule gives the device the scheduled faults of its own (see
// devicemodel.Model.SetSchedule).
func (d *Device) SetSchedule(index int, all []ScheduledFault) { d.model.SetSchedule(index, all) }

// SetLatencySpread makes the device's batch latency vary (see
// devicemodel.Model.SetLatencySpread); it panics on a σ out of range,
// which is validated where it is read.
func (d *Device) SetLatencySpread(sigma float64) {
	if err := d.model.SetLatencySpread(sigma); err != nil {
		panic("sim: " + err.Error())
	}
}

// Run runs job at now and returns when it ends and how; its fate is the
// device model's draw (devicemodel.Model.Draw).
func (d *Device) Run(now time.Duration, job actors.Job) (time.Duration, actors.JobDone, bool) {
	n := len(job.Inputs)
	if n < 1 {
		panic(fmt.Sprintf("sim: device job %d has no inputs", job.ID))
	}
	d.jobs++
	if now < d.busyUntil {
		d.overlaps++
	}
	fate := d.model.Draw(now, d.rng, job.Inputs)
	res := actors.JobDone{ID: job.ID}
	switch fate.Kind {
	case devicemodel.FateHang:
		// The device is stuck until its actor restarts it; any later job
		// runs on a restarted device.
		d.busyUntil = 0
		return 0, actors.JobDone{}, true
	case devicemodel.FateCrash:
		res.Fault = true
	case devicemodel.FatePoison:
		res.Err = ErrTextPoison
	case devicemodel.FateBatchError:
		res.Err = ErrTextBatchFault
	default:
		res.Outputs = make([]string, n)
		for i, in := range job.Inputs {
			if fate.ItemFail != nil && fate.ItemFail[i] {
				if res.ItemErrs == nil {
					res.ItemErrs = make([]string, n)
				}
				res.ItemErrs[i] = ErrTextItemFault
				continue
			}
			res.Outputs[i] = actors.EmulatedOutput(job.Model, job.Version, in)
		}
	}
	done := now + fate.Took
	d.account(fate.Took, fate.Slow, done)
	return done, res, false
}

func (d *Device) account(took time.Duration, slow bool, done time.Duration) {
	d.busy += took
	d.lastEnd = max(d.lastEnd, done)
	if slow {
		// The actor's watchdog may declare a straggler hung and restart the
		// device before it ends, which the executor cannot see; a job then
		// started would be no overlap.
		d.busyUntil = 0
	} else {
		d.busyUntil = done
	}
}

// LastEnd is when the last job that ends (completes, fails or crashes)
// ends: after it the device runs nothing (a hung job aside).
func (d *Device) LastEnd() time.Duration { return d.lastEnd }

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
