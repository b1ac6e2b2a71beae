package sim

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// FaultKind is what a ScheduledFault does to its device.
type FaultKind uint8

const (
	// FaultCrash crashes the device in the middle of a batch: the job
	// running at the fault's time ends then with JobDone{Fault: true}; if
	// the device is idle then, the next job it starts crashes halfway
	// through. The device actor restarts it with backoff and the batcher
	// re-queues the batch with attempt+1.
	FaultCrash FaultKind = iota + 1
	// FaultHang hangs the device: the job running at the fault's time (or
	// the next one started) never completes, and only the device actor's
	// watchdog notices.
	FaultHang
	// FaultSlow multiplies by Factor the latency of every job the device
	// starts in [At, At+For): a thermally throttled or noisy-neighbour GPU.
	FaultSlow
)

func (k FaultKind) String() string {
	switch k {
	case FaultCrash:
		return "crash"
	case FaultHang:
		return "hang"
	case FaultSlow:
		return "slow"
	}
	return "unknown"
}

// ScheduledFault is a fault at a given virtual time on a given device,
// next to FaultPlan's faults at rates: the way to put a crash in the middle
// of a batch at a known moment and watch the recovery.
type ScheduledFault struct {
	// At is when the fault strikes, in the safety phase.
	At time.Duration
	// Device is the index of the device, 0 to Config.Devices-1.
	Device int
	Kind   FaultKind
	// For and Factor are a FaultSlow's span and latency multiple.
	For    time.Duration
	Factor float64
}

// ScheduledFaultsLimit bounds Config.FaultSchedule.
const ScheduledFaultsLimit = 1024

// LatencySpreadLimit bounds Config.LatencySpread: at a σ of 2 the slowest
// of a thousand batches already runs hundreds of times its median.
const LatencySpreadLimit = 2

// spreadFactorMax caps one job's latency multiple under LatencySpread, so
// a draw far in the tail cannot stall a run for a simulated day.
const spreadFactorMax = 50

// validateSchedule checks a fault schedule against a run of the given
// devices and safety phase.
func validateSchedule(s []ScheduledFault, devices int, safety time.Duration) error {
	if len(s) > ScheduledFaultsLimit {
		return fmt.Errorf("%d scheduled faults: at most %d", len(s), ScheduledFaultsLimit)
	}
	for i, f := range s {
		switch {
		case f.At < 0 || f.At >= safety:
			return fmt.Errorf("FaultSchedule[%d]: At %v: need 0 <= At < Duration (%v)", i, f.At, safety)
		case f.Device < 0 || f.Device >= devices:
			return fmt.Errorf("FaultSchedule[%d]: Device %d: need 0 to %d", i, f.Device, devices-1)
		case f.Kind < FaultCrash || f.Kind > FaultSlow:
			return fmt.Errorf("FaultSchedule[%d]: unknown kind %d", i, f.Kind)
		case f.Kind == FaultSlow && (f.For <= 0 || !(f.Factor >= 1) || math.IsInf(f.Factor, 1)):
			return fmt.Errorf("FaultSchedule[%d]: a slow fault needs For > 0 and a finite Factor >= 1", i)
		}
	}
	return nil
}

// SetSchedule gives the device the scheduled faults of its own (those
// whose Device is any other are ignored: the caller passes the run's whole
// schedule with the device's index). They strike whatever FaultPlan says
// and whether or not it has healed, and they draw no random number, so a
// run without them draws exactly as before.
func (d *Device) SetSchedule(index int, all []ScheduledFault) {
	d.schedule = d.schedule[:0]
	for _, f := range all {
		if f.Device == index {
			d.schedule = append(d.schedule, f)
		}
	}
	slices.SortStableFunc(d.schedule, func(a, b ScheduledFault) int {
		return int(min(max(a.At-b.At, -1), 1))
	})
	d.fired = make([]bool, len(d.schedule))
}

// SetLatencySpread makes the device's batch latency vary: each job's cost
// is multiplied by exp(σZ − σ²/2), Z standard normal, a log-normal factor
// of mean 1 (the cost model stays right on average, wrong on each batch),
// capped at 50. σ of zero, the default, switches it off and draws nothing.
func (d *Device) SetLatencySpread(sigma float64) {
	if !(sigma >= 0 && sigma <= LatencySpreadLimit) {
		panic(fmt.Sprintf("sim: SetLatencySpread(%v): need 0 to %v", sigma, float64(LatencySpreadLimit)))
	}
	d.spread = sigma
}

// spreadFactor draws the latency multiple of one job.
func (d *Device) spreadFactor() float64 {
	z := d.rng.NormFloat64()
	return min(math.Exp(d.spread*z-d.spread*d.spread/2), spreadFactorMax)
}

// slowBy returns the product of the factors of the slow faults whose span
// holds now.
func (d *Device) slowBy(now time.Duration) float64 {
	f := 1.0
	for _, s := range d.schedule {
		if s.Kind == FaultSlow && s.At <= now && now < s.At+s.For {
			f *= s.Factor
		}
	}
	return f
}

// strike returns the first crash or hang not yet fired that falls before
// the end of a job running [now, end), marking it fired: a fault whose time
// has passed while the device was idle strikes the next job.
func (d *Device) strike(now, end time.Duration) (ScheduledFault, bool) {
	for i, s := range d.schedule {
		if d.fired[i] || s.Kind == FaultSlow {
			continue
		}
		if s.At < end {
			d.fired[i] = true
			return s, true
		}
		break // sorted by At: the rest are later still
	}
	return ScheduledFault{}, false
}
