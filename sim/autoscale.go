package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/ledger"
)

// The autoscaled fleet in the simulator.
//
// A run with Config.Autoscale holds a pool of Policy.DevicesMax device
// slots at DeviceAddrBase+i; the first Config.Devices start up as always,
// the others are parked: spawned, but their device actor has not started.
// Every Autoscale.Every of the safety phase the provisioner reads the
// batcher's Signals and hands them to the actors.Autoscaler
// (ScaleSignals); its ScaleTo comes back to the provisioner, which boots
// parked slots (lowest first) or drains active ones (highest first).
//
// How the batcher learns of them, with no message of its own:
//   - A booted slot starts its device actor after Policy.ColdStart (or,
//     booted again later, asks it to Reannounce): the device announces
//     itself with DeviceReady, and the batcher registers it, or takes it
//     back from quarantine, as after any restart.
//   - A drained slot lets its device finish the batch it runs (BatchDone
//     goes out as always), then tells the batcher DeviceDown (Reason
//     "scaled down"): the batcher takes it off its ready list and its free
//     times, as a quarantined device, and counts it unhealthy. A batch the
//     batcher sent it between the two (after BatchDone, before DeviceDown)
//     is re-queued by the batcher when DeviceDown arrives; the parked slot
//     drops that RunBatch unrun and answers BatchAborted, which the
//     batcher ignores as stale (the device is out) and which tells the
//     checker the device is free. A parked slot swallows its device's
//     DeviceReady, so it announces itself no more.
//
// Device-hours count a slot from the moment it is asked to boot (the cold
// start is paid for) until its drain ends, over the safety phase.

// AutoscaleConfig switches the autoscaler on in a run.
type AutoscaleConfig struct {
	// Policy is the scaling policy; DevicesMax is the pool of slots, and
	// Config.Devices (within the bounds) the fleet the run starts with.
	Policy actors.AutoscalerConfig
	// Every is how often the policy reads the signals; zero means every
	// second.
	Every time.Duration
}

// The addresses of the autoscaler and its provisioner.
var (
	AutoscalerAddr  = actors.Address{ID: 4}
	ProvisionerAddr = actors.Address{ID: 5}
)

// scalingDecisionsMax bounds the decisions a report keeps.
const scalingDecisionsMax = 10_000

type slotPhase uint8

const (
	slotParked slotPhase = iota
	slotBooting
	slotActive
	slotDraining
)

// slotUp and slotDown are the provisioner's orders to a slot; slotBooted
// ends a cold start (gen tells a stale one); slotOff tells the
// provisioner a drain ended.
type (
	slotUp     struct{}
	slotDown   struct{}
	slotBooted struct{ gen uint64 }
	slotOff    struct{ slot int }
)

// slot wraps a device actor so that it can be booted and drained.
type slot struct {
	i       int
	cold    time.Duration
	dev     *actors.Device
	phase   slotPhase
	started bool // the device actor has had its Start
	busy    bool // a RunBatch went in and its end did not come out yet
	gen     uint64
}

// forever is a DeviceDown's Until for a drained device: it comes back
// only by announcing itself.
const forever = time.Duration(math.MaxInt64)

func (s *slot) Receive(ctx actors.Context, msg actors.Message) {
	switch m := msg.(type) {
	case actors.Start:
		if s.phase == slotActive {
			s.started = true
			s.dev.Receive(tap{ctx, s}, m)
		}
		return
	case slotUp:
		switch s.phase {
		case slotParked:
			s.phase = slotBooting
			s.gen++
			ctx.After(s.cold, slotBooted{gen: s.gen})
		case slotDraining:
			s.phase = slotActive // still registered: no cold start
		}
		return
	case slotDown:
		switch s.phase {
		case slotBooting:
			s.phase = slotParked
			s.gen++
			ctx.Send(ProvisionerAddr, slotOff{slot: s.i})
		case slotActive:
			s.phase = slotDraining
			if !s.busy {
				s.retire(ctx)
			}
		}
		return
	case slotBooted:
		if m.gen != s.gen || s.phase != slotBooting {
			return
		}
		s.phase = slotActive
		if !s.started {
			s.started = true
			s.dev.Receive(tap{ctx, s}, actors.Start{})
		} else {
			s.dev.Receive(tap{ctx, s}, actors.Reannounce{})
		}
		return
	case actors.RunBatch:
		if s.phase != slotActive && s.phase != slotDraining {
			// Sent before the batcher read DeviceDown, which re-queued
			// it: say it ended unrun. The batcher, which counts the
			// device out, takes this as stale; the checker sees the
			// device free again.
			pending := make([]uint64, len(m.Batch.Items))
			for k, it := range m.Batch.Items {
				pending[k] = it.Req.ID
			}
			ctx.Send(BatcherAddr, actors.BatchAborted{Device: ctx.Self(), BatchID: m.Batch.ID, Pending: pending, Reason: "scaled down before it ran"})
			return
		}
		s.busy = true
	}
	if !s.started {
		return // a parked slot that never ran: nothing inside to tell
	}
	s.dev.Receive(tap{ctx, s}, msg)
}

// retire ends a drain: the batcher counts the device out.
func (s *slot) retire(ctx actors.Context) {
	s.phase = slotParked
	s.gen++
	ctx.Send(BatcherAddr, actors.DeviceDown{Device: ctx.Self(), Until: forever, Reason: "scaled down"})
	ctx.Send(ProvisionerAddr, slotOff{slot: s.i})
}

// tap is the device's Context inside a slot: it sees what the device
// sends, to end a drain after the batch and to keep a parked device quiet.
type tap struct {
	actors.Context
	s *slot
}

func (t tap) Send(to actors.Address, msg actors.Message) {
	s := t.s
	switch msg.(type) {
	case actors.DeviceReady:
		switch s.phase {
		case slotActive:
		case slotDraining:
			if !s.busy {
				s.retire(t.Context)
			}
			return
		default:
			return
		}
	case actors.BatchDone, actors.BatchAborted:
		s.busy = false
		t.Context.Send(to, msg)
		if s.phase == slotDraining {
			s.retire(t.Context)
		}
		return
	}
	t.Context.Send(to, msg)
}

// provisioner feeds the policy the batcher's signals and carries out its
// decisions on the slots; it keeps the books of device-hours.
type provisioner struct {
	batcher *actors.Batcher
	every   time.Duration
	cold    time.Duration
	stop    time.Duration // the end of the safety phase
	phases  []slotPhase   // the provisioner's view: parked, booting (counts as up) or active
	// since[i] is when slot i was last asked to boot; up[i] says it counts.
	since []time.Duration
	up    []bool
	// draining[i]: slot i was told down and its drain has not ended.
	draining []bool
	paid     time.Duration
	report   ledger.ScalingReport
	ready    int // the batcher's healthy devices at the last reading
	target   int
}

type provisionerTick struct{}

func newProvisioner(b *actors.Batcher, cfg AutoscaleConfig, initial int, stop time.Duration) *provisioner {
	p := &provisioner{batcher: b, every: cfg.Every, cold: cfg.Policy.ColdStart, stop: stop, target: initial}
	n := cfg.Policy.DevicesMax
	p.since, p.up, p.draining = make([]time.Duration, n), make([]bool, n), make([]bool, n)
	for i := range initial {
		p.up[i] = true
	}
	return p
}

func (p *provisioner) count() int {
	n := 0
	for _, u := range p.up {
		if u {
			n++
		}
	}
	return n
}

func (p *provisioner) point(now time.Duration) {
	if len(p.report.Series) < scalingDecisionsMax*10 {
		p.report.Series = append(p.report.Series, ledger.ScalingPoint{T: now.Seconds(), Devices: p.count(), Ready: p.ready, Target: p.target})
	}
}

func (p *provisioner) Receive(ctx actors.Context, msg actors.Message) {
	now := ctx.Now()
	switch m := msg.(type) {
	case actors.Start:
		// The first reading one period in: at zero no device has
		// announced itself yet.
		ctx.After(p.every, provisionerTick{})
	case provisionerTick:
		if now >= p.stop {
			return // the safety phase is over: the fleet stays as it is
		}
		sig := p.batcher.Signals(now)
		p.ready = sig.DevicesHealthy
		p.point(now)
		ctx.Send(AutoscalerAddr, actors.ScaleSignals{Signals: sig})
		ctx.After(p.every, provisionerTick{})
	case actors.ScaleTo:
		p.target = m.Devices
		if len(p.report.Decisions) < scalingDecisionsMax {
			p.report.Decisions = append(p.report.Decisions, ledger.ScaleDecision{T: now.Seconds(), Devices: m.Devices, Reason: m.Reason})
		}
		for i := 0; i < len(p.up) && p.count() < m.Devices; i++ {
			if !p.up[i] {
				if p.draining[i] {
					// Back before its drain ended: pay what it ran.
					p.paid += min(now, p.stop) - min(p.since[i], p.stop)
					p.draining[i] = false
				}
				p.up[i], p.since[i] = true, now
				ctx.Send(slotAddr(i), slotUp{})
			}
		}
		for i := len(p.up) - 1; i >= 0 && p.count() > m.Devices; i-- {
			if p.up[i] {
				// Counted down now; paid for until the drain ends.
				p.up[i], p.draining[i] = false, true
				ctx.Send(slotAddr(i), slotDown{})
			}
		}
		p.point(now)
	case slotOff:
		if !p.draining[m.slot] {
			break // booted again meanwhile, and paid for then
		}
		p.draining[m.slot] = false
		p.paid += min(now, p.stop) - min(p.since[m.slot], p.stop)
	}
}

func slotAddr(i int) actors.Address { return actors.Address{ID: DeviceAddrBase + uint64(i)} }

// finish closes the books at the end of the safety phase: the slots still
// up are paid for until then.
func (p *provisioner) finish(static int) *ledger.ScalingReport {
	paid := p.paid
	for i, u := range p.up {
		if u || p.draining[i] {
			paid += p.stop - min(p.since[i], p.stop)
		}
	}
	r := p.report
	r.DeviceHours = paid.Hours()
	r.StaticDeviceHours = float64(static) * p.stop.Hours()
	if r.StaticDeviceHours > 0 {
		r.DeviceHoursRatio = r.DeviceHours / r.StaticDeviceHours
	}
	for i, pt := range r.Series {
		if i == 0 || pt.Devices > r.DevicesMax {
			r.DevicesMax = pt.Devices
		}
		if i == 0 || pt.Devices < r.DevicesMin {
			r.DevicesMin = pt.Devices
		}
	}
	return &r
}

func (c AutoscaleConfig) validate(devices int, batcherMax int) error {
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	switch {
	case c.Policy.DevicesMax > DevicesLimit:
		return fmt.Errorf("Autoscale: DevicesMax %d: at most %d", c.Policy.DevicesMax, DevicesLimit)
	case devices < c.Policy.DevicesMin || devices > c.Policy.DevicesMax:
		return fmt.Errorf("Autoscale: Devices %d: the fleet starts within DevicesMin %d and DevicesMax %d", devices, c.Policy.DevicesMin, c.Policy.DevicesMax)
	case c.Policy.DevicesMax > batcherMax:
		return fmt.Errorf("Autoscale: DevicesMax %d exceeds Batcher.DevicesMax %d", c.Policy.DevicesMax, batcherMax)
	case c.Every < 0 || c.Every > time.Hour:
		return fmt.Errorf("Autoscale: Every %v: need 0 (every second) to 1h", c.Every)
	}
	return nil
}
