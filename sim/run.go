package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/ledger"
)

// The fixed addresses of a Run's actors. Devices take DeviceAddrBase+i.
var (
	BatcherAddr = actors.Address{ID: 1}
	LedgerAddr  = actors.Address{ID: 2}
	TrafficAddr = actors.Address{ID: 3}
)

// DeviceAddrBase is the ID of the first device's address.
const DeviceAddrBase = 100

// SourceAddrBase + k is the address ID of Config.Sources[k] for k >= 1;
// Sources[0] is at TrafficAddr, so that a run with one source is the run
// with Traffic (same addresses, same random streams, same trace hash). It is
// past the last device's ID.
const SourceAddrBase = DeviceAddrBase + DevicesLimit + 1000

// SourceAddr is the address of Config.Sources[k].
func SourceAddr(k int) actors.Address {
	if k == 0 {
		return TrafficAddr
	}
	return actors.Address{ID: SourceAddrBase + uint64(k)}
}

// Bounds on a Run's configuration.
const (
	// DevicesLimit bounds the devices of one run.
	DevicesLimit = 4096
	// DurationLimit bounds the safety phase: a day of virtual time.
	DurationLimit = 24 * time.Hour
	// SourcesLimit bounds Config.Sources: each is an actor with an input
	// pool of its own, and request IDs interleave over all of them.
	SourcesLimit = 256
	// WindowsLimit bounds Config.Windows.
	WindowsLimit = 64
	// DeviceModelsLimit bounds the warm models of one device.
	DeviceModelsLimit = 1024
)

// GCPercent is the garbage collector setting `batchd sim` runs with. A
// simulation allocates a few hundred bytes per request and keeps a small,
// bounded live heap, so the default GOGC=100 collects very often; at 400 the
// reference workload runs about a fifth faster on one core for a few more MB.
const GCPercent = 400

// Config configures a simulated run: traffic into one batcher with a pool of
// emulated devices, a safety phase (traffic, faults) and then a liveness
// phase (arrivals stopped, faults healed, everything must drain).
type Config struct {
	// Seed is the master seed: the run is a function of it and the rest of
	// the configuration.
	Seed uint64
	// Rate is the offered load in requests per simulated second; it
	// replaces Traffic.Rate. With Sources, each has its own rate and Run
	// sets Rate to their sum.
	Rate float64
	// Devices is the number of emulated GPUs.
	Devices int
	// Duration is the length of the safety phase: traffic arrives during
	// it, and faults (unless Faults.HealAt says otherwise) stop at its end.
	Duration time.Duration
	// Traffic shapes the requests. Rate, Target and ReplyTo are set by
	// Run; Stop defaults to Duration.
	Traffic TrafficConfig
	// Sources, when not empty, replace Traffic and Rate: each is a traffic
	// source actor of its own, with its own tenants, rate, Start and Stop,
	// priority, parameters, input lengths and model mix, so that one run
	// can hold a steady tenant and another's burst. Run sets each one's
	// Target and ReplyTo; a Stop of zero means Duration (a later one is
	// refused: the liveness phase has no arrivals); IDFirst and IDStep
	// left zero become k+1 and len(Sources), so that IDs interleave,
	// unique and dense; RequestsMax left zero keeps the IDs within the
	// ledger. Rate becomes the sum of the sources' rates.
	Sources []TrafficConfig
	// Replay, when not empty, replaces Traffic and Sources: these requests
	// (see ReadReplay) arrive at their times, in order, all before
	// Duration. Rate becomes their number per second of Duration.
	Replay []ReplayRequest
	// Batcher configures the batcher actor. A zero Latency means Latency.
	Batcher actors.BatcherConfig
	// Device configures every device actor. A zero Latency means Latency.
	Device actors.DeviceConfig
	// Latency is the emulated devices' true cost model, and the actors'
	// prediction unless Batcher.Latency or Device.Latency are set: a
	// mismatch between the two is how to test a wrong cost model.
	Latency actors.LatencyModel
	// Faults are the device faults switched on; HealAt defaults to
	// Duration, so the liveness phase runs without faults.
	Faults FaultPlan
	// NetDelay is the delivery delay of every message between actors.
	NetDelay time.Duration
	// DrainMax bounds the liveness phase in virtual time: a run whose
	// events have not all been delivered by Duration+DrainMax did not
	// drain, which the report flags as a violation.
	DrainMax time.Duration
	// EventsMax bounds the events of the whole run (see WorldConfig); zero
	// means the world's default.
	EventsMax int64
	// HealthyDevices is the number of devices, counted from the last, that
	// get no device faults (crash, hang, slow, batch or item errors): with
	// Devices-1 faulty ones it is the "one healthy device left" of
	// invariant 8. Poison inputs (Faults.PoisonPrefix) still fail on them,
	// as they are a property of the input, not of a device. Zero (the
	// default) puts the faults on every device.
	HealthyDevices int
	// DeviceModels, when set, gives device i the warm models
	// DeviceModels[i] (an empty list: any model); devices past its length
	// keep Device.Models. None by default.
	DeviceModels [][]string
	// SignalsEvery is how often, in virtual time, the report samples the
	// batcher's Signals (Report.Autoscale). Zero means every second; a
	// negative value switches the sampling off. Sampling only reads the
	// batcher, so it does not change the run.
	SignalsEvery time.Duration
	// Windows are increasing boundaries in virtual time: for each pair of
	// neighbours the report breaks down, per tenant, the requests that
	// arrived between them (Report.Windows). None by default.
	Windows []time.Duration
	// FaultSchedule are faults at given times on given devices (crash,
	// hang, slow; see ScheduledFault), next to Faults' faults at rates.
	// They strike whatever HealthyDevices says. None by default.
	FaultSchedule []ScheduledFault
	// LatencySpread is the σ of a log-normal factor of mean 1 on every
	// batch's true cost (see Device.SetLatencySpread): a backend whose
	// latency varies a lot while the actors plan with its mean. Zero, the
	// default, is the latency model exactly.
	LatencySpread float64
	// TimelineEvery, when positive, breaks the report down by arrival
	// time in steps of it (Report.Timeline): offered, completed, rejected
	// and latency percentiles per step. Zero, the default, leaves it out.
	TimelineEvery time.Duration
	// Reannounce gives the batcher its devices' addresses
	// (actors.BatcherConfig.Devices), as the live engine does: it then asks
	// them, when it starts, to announce themselves again
	// (actors.Reannounce), and those re-announcements cross the first
	// batches. Off by default, which keeps the traces of runs from before
	// it.
	Reannounce bool
	// Autoscale, when set, runs the autoscaler: a pool of
	// Autoscale.Policy.DevicesMax device slots of which the first Devices
	// start up, grown and shrunk by the policy (see AutoscaleConfig, and
	// Report.Scaling). Nil, the default, is the static fleet of Devices.
	Autoscale *AutoscaleConfig
	// Observers see every delivery of the run, after the ledger (see
	// World.Observe). Those with a method Finish(end time.Duration) have it
	// called once the run is over, with the time the world stopped. None by
	// default; they do not change the run.
	Observers []Observer
	// Split runs one accumulator per model instead of one Batcher for
	// all: an actors.Router at BatcherAddr sends each request to its
	// model's accumulator (a Batcher whose registry is that model alone,
	// at AccumulatorAddr(i)), and a device that holds several models is
	// shared between their accumulators (actors.NewSharedDevice: offers,
	// claimed in the order one batcher would pick). The models are
	// Batcher.Models', or those the traffic asks for with an open
	// registry. Each accumulator has Batcher's bounds (QueueTotalMax is
	// per model). Signals are sampled only with one model (of its one
	// accumulator), and Autoscale is refused.
	Split bool
}

// AccumulatorAddrBase + 1 + i is the address ID of the accumulator of the
// i-th model of a split run (Config.Split): past every source's ID.
const AccumulatorAddrBase = SourceAddrBase + SourcesLimit + 1000

// AccumulatorAddr is the address of a split run's i-th accumulator.
func AccumulatorAddr(i int) actors.Address {
	return actors.Address{ID: AccumulatorAddrBase + 1 + uint64(i)}
}

// splitModels is the models of a split run: the registry's, or those its
// traffic asks for, sorted.
func (c Config) splitModels() []string {
	var ms []string
	for _, m := range c.Batcher.Models {
		ms = append(ms, m.Name)
	}
	if len(ms) > 0 {
		return ms
	}
	for _, s := range c.sources() {
		for _, m := range s.Mix {
			ms = append(ms, m.Model)
		}
	}
	for _, r := range c.Replay {
		ms = append(ms, r.Model)
	}
	slices.Sort(ms)
	return slices.Compact(ms)
}

// DefaultConfig returns the seeds' reference workload: 1000 req/s Poisson
// into 6 devices running batches of up to 100 at a fixed 100 ms, for 60 s,
// seed 1, no faults. Capacity is 6 devices × 100 items / 100 ms = 6000
// req/s, so the load is 1/6 of it and the p95 target of 200 ms must hold.
func DefaultConfig() Config {
	b := actors.DefaultBatcherConfig()
	b.Latency = actors.LatencyModel{} // follow Latency
	d := actors.DefaultDeviceConfig()
	d.Latency = actors.LatencyModel{}
	return Config{
		Seed:     1,
		Rate:     1000,
		Devices:  6,
		Duration: 60 * time.Second,
		Traffic:  DefaultTrafficConfig(),
		Batcher:  b,
		Device:   d,
		Latency:  actors.FixedLatency(100 * time.Millisecond),
		// Long enough for the slowest legitimate tail: a request that
		// waits out TimeoutMax, or a device back from quarantine.
		DrainMax: 5 * time.Minute,
	}
}

// isZero reports a latency model left unset.
func isZero(m actors.LatencyModel) bool {
	return m.Base == 0 && m.PerItem == 0 && m.PerPaddedByte == 0 && len(m.Table) == 0 && !m.Fanout() && m.FanoutCall == 0
}

// resolved returns the configuration with its defaults and derived fields
// filled in: what Run actually runs.
func (c Config) resolved() Config {
	if isZero(c.Batcher.Latency) {
		c.Batcher.Latency = c.Latency
	}
	if isZero(c.Device.Latency) {
		c.Device.Latency = c.Latency
	}
	if c.Faults.HealAt == 0 {
		c.Faults.HealAt = c.Duration
	}
	if c.SignalsEvery == 0 {
		c.SignalsEvery = time.Second
	}
	if c.Autoscale != nil && c.Autoscale.Every == 0 {
		a := *c.Autoscale
		a.Every = time.Second
		c.Autoscale = &a
	}
	if len(c.Replay) > 0 {
		c.Rate = float64(len(c.Replay)) / c.Duration.Seconds()
		c.Sources = nil
		return c
	}
	if len(c.Sources) > 0 {
		// A copy: the caller's slice is not written.
		srcs := slices.Clone(c.Sources)
		c.Rate = 0
		for k := range srcs {
			s := &srcs[k]
			s.Target, s.ReplyTo = BatcherAddr, LedgerAddr
			if s.Stop == 0 {
				s.Stop = c.Duration
			}
			if s.IDFirst == 0 && s.IDStep == 0 {
				s.IDFirst, s.IDStep = uint64(k+1), uint64(len(srcs))
			}
			if first, step := max(s.IDFirst, 1), max(s.IDStep, 1); s.RequestsMax == 0 && first < ledger.RequestsLimit {
				// The last ID, first+(max-1)*step, stays below the limit.
				s.RequestsMax = int64((ledger.RequestsLimit-1-first)/step + 1)
			}
			c.Rate += s.Rate
		}
		c.Sources = srcs
		return c
	}
	c.Traffic.Rate = c.Rate
	c.Traffic.Target, c.Traffic.ReplyTo = BatcherAddr, LedgerAddr
	if c.Traffic.Stop == 0 {
		c.Traffic.Stop = c.Duration
	}
	if c.Traffic.RequestsMax == 0 {
		c.Traffic.RequestsMax = ledger.RequestsLimit - 1
	}
	return c
}

// sources returns the traffic sources of a resolved configuration: Sources,
// or Traffic alone.
func (c Config) sources() []TrafficConfig {
	if len(c.Replay) > 0 {
		return nil
	}
	if len(c.Sources) > 0 {
		return c.Sources
	}
	return []TrafficConfig{c.Traffic}
}

// expected is the expected number of requests of a resolved source over
// a run of duration d, and the highest request ID that takes.
func (s TrafficConfig) expected(d time.Duration) (n float64, lastID float64) {
	stop := s.Stop
	if stop == 0 || stop > d {
		stop = d
	}
	n = s.Rate * max(stop-s.Start, 0).Seconds()
	return n, float64(max(s.IDFirst, 1)) + n*float64(max(s.IDStep, 1))
}

// Validate reports the first setting that makes the run impossible.
func (c Config) Validate() error {
	switch {
	case c.Devices < 1 || c.Devices > DevicesLimit:
		return fmt.Errorf("sim config: Devices %d: need 1 to %d", c.Devices, DevicesLimit)
	case c.Duration <= 0 || c.Duration > DurationLimit:
		return fmt.Errorf("sim config: Duration %v: need more than 0 and at most %v", c.Duration, DurationLimit)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("sim config: Rate %v: must be a finite number >= 0", c.Rate)
	case len(c.Sources) == 0 && len(c.Replay) == 0 && c.Rate*c.Duration.Seconds() > ledger.RequestsLimit/2:
		return fmt.Errorf("sim config: Rate %v over %v offers more than %d requests", c.Rate, c.Duration, ledger.RequestsLimit/2)
	case len(c.Sources) > SourcesLimit:
		return fmt.Errorf("sim config: %d Sources: at most %d", len(c.Sources), SourcesLimit)
	case len(c.DeviceModels) > c.Devices:
		return fmt.Errorf("sim config: DeviceModels has %d lists for %d devices", len(c.DeviceModels), c.Devices)
	case len(c.Windows) > WindowsLimit:
		return fmt.Errorf("sim config: %d Windows: at most %d", len(c.Windows), WindowsLimit)
	case c.NetDelay < 0:
		return fmt.Errorf("sim config: NetDelay %v: must not be negative", c.NetDelay)
	case c.DrainMax <= 0 || c.DrainMax > DurationLimit:
		return fmt.Errorf("sim config: DrainMax %v: need more than 0 and at most %v", c.DrainMax, DurationLimit)
	case c.EventsMax < 0:
		return fmt.Errorf("sim config: EventsMax %d: must not be negative", c.EventsMax)
	case c.HealthyDevices < 0 || c.HealthyDevices > c.Devices:
		return fmt.Errorf("sim config: HealthyDevices %d: need 0 to Devices (%d)", c.HealthyDevices, c.Devices)
	case !(c.LatencySpread >= 0 && c.LatencySpread <= LatencySpreadLimit):
		return fmt.Errorf("sim config: LatencySpread %v: need 0 to %v", c.LatencySpread, float64(LatencySpreadLimit))
	case c.TimelineEvery < 0 || (c.TimelineEvery > 0 && c.Duration/c.TimelineEvery > ledger.TimelineStepsLimit):
		return fmt.Errorf("sim config: TimelineEvery %v: need 0 (off) or at most %d steps over Duration", c.TimelineEvery, ledger.TimelineStepsLimit)
	}
	if err := validateSchedule(c.FaultSchedule, c.Devices, c.Duration); err != nil {
		return fmt.Errorf("sim config: %w", err)
	}
	if err := c.Latency.Validate(); err != nil {
		return fmt.Errorf("sim config: %w", err)
	}
	if err := validateReplay(c.Replay, c.Duration); err != nil {
		return fmt.Errorf("sim config: Replay: %w", err)
	}
	r := c.resolved()
	if r.Batcher.DevicesMax < c.Devices {
		return fmt.Errorf("sim config: Devices %d exceeds Batcher.DevicesMax %d", c.Devices, r.Batcher.DevicesMax)
	}
	var total, lastID float64
	for k, s := range r.sources() {
		if err := s.Validate(); err != nil {
			if len(c.Sources) > 0 {
				return fmt.Errorf("sim config: Sources[%d]: %w", k, err)
			}
			return fmt.Errorf("sim config: %w", err)
		}
		if len(c.Sources) > 0 && s.Stop > c.Duration {
			return fmt.Errorf("sim config: Sources[%d]: Stop %v after Duration %v: arrivals end with the safety phase", k, s.Stop, c.Duration)
		}
		n, last := s.expected(c.Duration)
		total += n
		lastID = max(lastID, last)
	}
	if total > ledger.RequestsLimit/2 || lastID > ledger.RequestsLimit/2 {
		return fmt.Errorf("sim config: the sources offer %.0f requests, IDs up to %.0f: more than the ledger's %d", total, lastID, ledger.RequestsLimit/2)
	}
	for i, ms := range c.DeviceModels {
		if len(ms) > DeviceModelsLimit || slices.Contains(ms, "") {
			return fmt.Errorf("sim config: DeviceModels[%d]: more than %d models, or an empty name", i, DeviceModelsLimit)
		}
	}
	for i, w := range c.Windows {
		if w < 0 || (i > 0 && w <= c.Windows[i-1]) {
			return fmt.Errorf("sim config: Windows must be increasing and not negative")
		}
	}
	if c.Split {
		switch n := len(r.splitModels()); {
		case c.Autoscale != nil:
			return fmt.Errorf("sim config: Split with Autoscale: not supported")
		case n > actors.SplitModelsMax:
			return fmt.Errorf("sim config: Split of %d models: at most %d", n, actors.SplitModelsMax)
		}
	}
	if c.Autoscale != nil {
		if err := c.Autoscale.validate(c.Devices, r.Batcher.DevicesMax); err != nil {
			return fmt.Errorf("sim config: %w", err)
		}
	}
	if err := r.Batcher.Validate(); err != nil {
		return fmt.Errorf("sim config: %w", err)
	}
	if err := r.Device.Validate(); err != nil {
		return fmt.Errorf("sim config: %w", err)
	}
	if err := r.Faults.Validate(); err != nil {
		return fmt.Errorf("sim config: %w", err)
	}
	return nil
}

// Run simulates one run and reports it. The error is for a run that could
// not be built or that broke a limit of the world (events, queue); broken
// invariants are not errors but the report's violations, so that a caller
// sees what happened.
func Run(cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	cfg = cfg.resolved()
	wall := time.Now()

	wc := DefaultWorldConfig(cfg.Seed)
	wc.NetDelay = cfg.NetDelay
	if cfg.EventsMax > 0 {
		wc.EventsMax = cfg.EventsMax
	}
	w := NewWorld(wc)

	if cfg.Reannounce {
		cfg.Batcher.Devices = make([]actors.Address, cfg.Devices)
		for i := range cfg.Batcher.Devices {
			cfg.Batcher.Devices[i] = actors.Address{ID: DeviceAddrBase + uint64(i)}
		}
	}
	batcher, err := actors.NewBatcher(cfg.Batcher)
	if err != nil {
		return Report{}, fmt.Errorf("sim: %w", err)
	}
	var sp *split
	if cfg.Split {
		if sp, err = newSplit(cfg); err != nil {
			return Report{}, fmt.Errorf("sim: %w", err)
		}
	}
	srcs := cfg.sources()
	traffic := make([]*Traffic, len(srcs))
	var hint, lastID float64
	for k, s := range srcs {
		if traffic[k], err = NewTraffic(s); err != nil {
			return Report{}, fmt.Errorf("sim: %w", err)
		}
		n, last := s.expected(cfg.Duration)
		hint += n
		// Poisson counts stay within a few standard deviations of the
		// mean; 5% over it covers every run long enough to matter.
		lastID = max(lastID, last+0.05*n*float64(max(s.IDStep, 1)))
	}
	var replay *replaySource
	if len(cfg.Replay) > 0 {
		replay = newReplaySource(cfg.Replay, BatcherAddr, LedgerAddr)
		lastID = float64(len(cfg.Replay))
	}
	lc := ledger.Config{
		Batcher:       BatcherAddr,
		BatchMax:      cfg.Batcher.BatchMax,
		AttemptMax:    cfg.Batcher.AttemptMax,
		QueueTotalMax: cfg.Batcher.QueueTotalMax,
		SLO:           cfg.Batcher.SLO,
		Probe:         batcher.Stats,
		SelfCheck:     batcher.Check,
		RequestsMax:   ledger.RequestsLimit,
		RequestsHint:  int(lastID) + 1024,
		Models:        cfg.Batcher.Models,
		BucketMerge:   cfg.Batcher.BucketMerge,
	}
	if sp != nil {
		lc.QueueTotalMax *= len(sp.accs)
		lc.Probe, lc.SelfCheck = sp.stats, sp.check
	}
	led, err := ledger.New(lc)
	if err != nil {
		return Report{}, fmt.Errorf("sim: %w", err)
	}

	if sp != nil {
		w.Observe(sp)
	}
	w.Observe(led)
	switch {
	case cfg.SignalsEvery <= 0:
	case sp == nil:
		led.SampleSignals(batcher, cfg.SignalsEvery)
	case len(sp.accs) == 1:
		led.SampleSignals(sp.accs[0], cfg.SignalsEvery)
	}
	for _, o := range cfg.Observers {
		w.Observe(o)
	}
	if sp != nil {
		w.Spawn(BatcherAddr, sp.router)
		for i, a := range sp.accs {
			w.Spawn(AccumulatorAddr(i), a)
		}
	} else {
		w.Spawn(BatcherAddr, batcher)
	}
	w.Spawn(LedgerAddr, led)
	for k, t := range traffic {
		w.Spawn(SourceAddr(k), t)
	}
	if replay != nil {
		w.Spawn(TrafficAddr, replay)
	}
	pool := cfg.Devices
	var prov *provisioner
	if a := cfg.Autoscale; a != nil {
		pool = a.Policy.DevicesMax
		scaler, err := actors.NewAutoscaler(a.Policy, ProvisionerAddr, cfg.Devices)
		if err != nil {
			return Report{}, fmt.Errorf("sim: %w", err)
		}
		prov = newProvisioner(batcher, *a, cfg.Devices, cfg.Duration)
		w.Spawn(AutoscalerAddr, scaler)
		w.Spawn(ProvisionerAddr, prov)
	}
	devices := make([]*Device, pool)
	for i := range devices {
		addr := actors.Address{ID: DeviceAddrBase + uint64(i)}
		dc := cfg.Device
		if i < len(cfg.DeviceModels) {
			dc.Models = cfg.DeviceModels[i]
		}
		var a *actors.Device
		if sp != nil {
			if dc.OfferWindow == 0 {
				// One node: the offers of one round come at once.
				dc.OfferWindow = time.Microsecond
			}
			a, err = actors.NewSharedDevice(dc, sp.batchersOf(dc.Models))
		} else {
			a, err = actors.NewDevice(dc, BatcherAddr)
		}
		if err != nil {
			return Report{}, fmt.Errorf("sim: device %d: %w", i, err)
		}
		faults := cfg.Faults
		if i >= cfg.Devices-cfg.HealthyDevices {
			faults = FaultPlan{PoisonPrefix: cfg.Faults.PoisonPrefix}
		}
		devices[i] = NewDevice(cfg.Latency, faults, w.Stream(fmt.Sprintf("device/%d", i)))
		devices[i].SetSchedule(i, cfg.FaultSchedule)
		devices[i].SetLatencySpread(cfg.LatencySpread)
		w.SetExecutor(addr, devices[i])
		if prov == nil {
			w.Spawn(addr, a)
			continue
		}
		sl := &slot{i: i, cold: cfg.Autoscale.Policy.ColdStart, dev: a}
		if i < cfg.Devices {
			sl.phase = slotActive
		}
		w.Spawn(addr, sl)
	}

	// Safety phase: traffic and faults.
	if err := w.RunUntil(cfg.Duration); err != nil {
		return Report{}, fmt.Errorf("sim: safety phase: %w", err)
	}
	// Liveness phase: arrivals have stopped and faults healed; everything
	// must drain, and a run that keeps making events for DrainMax did not.
	if err := w.RunUntil(cfg.Duration + cfg.DrainMax); err != nil {
		return Report{}, fmt.Errorf("sim: liveness phase: %w", err)
	}
	var extra []string
	var extraKinds []ledger.ViolationKind
	if n := w.Pending(); n > 0 {
		extra = append(extra, fmt.Sprintf("not drained: %d events still pending %v after arrivals stopped", n, cfg.DrainMax))
		extraKinds = append(extraKinds, ledger.ViolationDrain)
	}
	// RunUntil leaves the clock at its limit; the run really ended at its
	// last delivery.
	end := max(led.Last(), cfg.Duration)
	led.Finish(end)
	for _, o := range cfg.Observers {
		if f, ok := o.(interface{ Finish(time.Duration) }); ok {
			f.Finish(w.Now())
		}
	}

	var busy time.Duration
	perDevice := make([]time.Duration, len(devices))
	for i, d := range devices {
		busy += d.BusyTime()
		perDevice[i] = d.BusyTime()
		if n := d.Overlaps(); n > 0 {
			extra = append(extra, fmt.Sprintf("device %d started %d jobs while one was running", i, n))
			extraKinds = append(extraKinds, ledger.ViolationBatch)
		}
	}
	var offered int64
	inputLenMax := 0
	for k, t := range traffic {
		offered += t.Offered()
		inputLenMax = max(inputLenMax, srcs[k].InputLenMax)
	}
	if replay != nil {
		offered = replay.Offered()
		for _, r := range cfg.Replay {
			inputLenMax = max(inputLenMax, r.InputLen)
		}
	}
	if sub := led.Counts().Submitted; sub != offered {
		extra = append(extra, fmt.Sprintf("traffic sent %d requests, the batcher received %d", offered, sub))
		extraKinds = append(extraKinds, ledger.ViolationOther)
	}
	rep := led.Report(ledger.ReportInput{
		Seed:      cfg.Seed,
		TraceHash: w.TraceHash(),
		Workload: ledger.Workload{
			RateRPS:   cfg.Rate,
			Devices:   cfg.Devices,
			BatchMax:  cfg.Batcher.BatchMax,
			LatencyMs: ms(cfg.Latency.Predict(cfg.Batcher.BatchMax, inputLenMax)),
			SLOMs:     ms(cfg.Batcher.SLO),
			DurationS: cfg.Duration.Seconds(),
			Faults:    cfg.Faults.Any() || len(cfg.FaultSchedule) > 0,
		},
		TimelineEvery: cfg.TimelineEvery,
		Offered:       offered,
		Weight:        tenantWeights(cfg.Batcher),
		Windows:       cfg.Windows,
		Busy:          busy,
		PerDevice:     perDevice,
		Devices:       len(devices),
		Safety:        cfg.Duration,
		Simulated:     end,
		Wall:          time.Since(wall),
		Events:        w.Events(),
		BatchMax:      cfg.Batcher.BatchMax,
		Extra:         extra,
		ExtraKinds:    extraKinds,
	})
	if prov != nil {
		rep.Scaling = prov.finish(cfg.Devices)
	}
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// tenantWeights returns the weight the batcher gives a tenant, as its
// configuration says (TenantConfig.Weight, zero meaning 1).
func tenantWeights(b actors.BatcherConfig) func(name string) float64 {
	return func(name string) float64 {
		w := b.DefaultTenant.Weight
		for _, t := range b.Tenants {
			if t.Name == name {
				w = t.Weight
			}
		}
		return float64(max(w, 1))
	}
}
