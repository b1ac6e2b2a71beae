package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/ledger"
)

// ArrivalProcess is how a traffic source spaces its requests.
type ArrivalProcess uint8

const (
	// Poisson spaces requests by exponential gaps: independent clients, the
	// usual model of open traffic and the one the closed forms (M/D/c)
	// assume.
	Poisson ArrivalProcess = iota
	// Constant spaces requests exactly 1/Rate apart: a metronome, useful to
	// isolate the batcher's own behaviour from arrival noise.
	Constant
)

func (p ArrivalProcess) String() string {
	switch p {
	case Poisson:
		return "poisson"
	case Constant:
		return "constant"
	case Diurnal:
		return "diurnal"
	case Burst:
		return "burst"
	}
	return "unknown"
}

// ModelMix is one model version in a traffic mix.
type ModelMix struct {
	Model   string
	Version string
	// Weight is this entry's share of the requests, relative to the sum of
	// all weights. Must be positive.
	Weight float64
}

// Bounds on a traffic source, so that a typo in a scenario cannot exhaust
// memory.
const (
	// InputLenLimit is the longest input a source generates, 1 MiB.
	InputLenLimit = 1 << 20
	// inputPoolBytesMax bounds the memory of the input pool, 64 MiB.
	inputPoolBytesMax = 64 << 20
	// inputPoolLimit bounds the number of distinct inputs.
	inputPoolLimit = 1 << 20
	// idStepLimit bounds IDStep: it is the number of interleaved sources,
	// and a larger step only spreads the IDs past what the ledger tracks.
	idStepLimit = SourcesLimit
	// PoisonInputsLimit bounds TrafficConfig.PoisonInputs.
	PoisonInputsLimit = 1 << 16
)

// TrafficConfig configures a Traffic source.
type TrafficConfig struct {
	// Rate is the mean arrival rate in requests per simulated second. Zero
	// sends nothing.
	Rate float64
	// Arrival is the arrival process; Poisson (the zero value) by default.
	Arrival ArrivalProcess
	// RateCurve shapes a Diurnal source's rate: multiples of Rate in
	// [0, 1], evenly spaced from Start to Stop and joined by straight
	// lines, so Rate is the peak (see DiurnalCurve). Only for Diurnal.
	RateCurve []float64
	// BurstSize is the number of requests in each group of a Burst source.
	// Only for Burst.
	BurstSize int
	// Start is when the first gap starts counting: no request arrives
	// before Start.
	Start time.Duration
	// Stop is when arrivals end: no request arrives at or after Stop. Zero
	// means no end (RequestsMax still bounds the source).
	Stop time.Duration
	// RequestsMax caps the number of requests sent; zero means no cap.
	// sim.Run sets it to the ledger's capacity.
	RequestsMax int64
	// Mix is the weighted set of model versions requests ask for.
	Mix []ModelMix
	// Tenants are drawn uniformly for each request.
	Tenants []string
	// InputLenMin and InputLenMax bound each input's length in bytes,
	// drawn uniformly (inclusive). Lengths matter once the latency model
	// charges for padding.
	InputLenMin, InputLenMax int
	// InputPool is how many distinct inputs the source pre-generates at
	// Start and then picks from, so that sending a request allocates no
	// string. It is reduced if the pool would pass 64 MiB. Default 4096.
	InputPool int
	// Timeout is each request's own deadline after its arrival. Zero
	// leaves Deadline zero, so the batcher applies its SLO.
	Timeout time.Duration
	// Target is the batcher that receives Submit and Cancel.
	Target actors.Address
	// ReplyTo is where each request's Reply goes (the ledger, in sim.Run).
	ReplyTo actors.Address
	// CancelRate is the probability that a request is withdrawn by a
	// Cancel sent CancelAfter its arrival (whether or not it is still
	// queued then: a late cancel must be harmless).
	CancelRate float64
	// CancelAfter is the delay between a request and its Cancel.
	CancelAfter time.Duration
	// Priority is every request's priority level (actors.PriorityLow to
	// actors.PriorityHigh); 0, normal, by default.
	Priority int8
	// Params are every request's computation parameters: requests with
	// different Params never share a batch. Empty by default.
	Params string
	// PoisonShare is the fraction of requests, of PoisonTenants (all
	// tenants when empty), whose input is a poison one instead of one of
	// the pool: PoisonPrefix followed by a number below PoisonInputs (drawn
	// uniformly), so that a FaultPlan with the same PoisonPrefix fails
	// every batch that holds one. Zero, the default, sends none and draws
	// nothing more than before. Pool inputs are lowercase letters: a
	// prefix with another character can never match one of them.
	PoisonShare float64
	// PoisonPrefix starts every poison input; required with PoisonShare.
	PoisonPrefix string
	// PoisonInputs is the number of distinct poison inputs; zero means 1.
	PoisonInputs int
	// PoisonTenants are the tenants (of Tenants) that send poison; empty
	// means all of them.
	PoisonTenants []string
	// IDFirst and IDStep number the requests IDFirst, IDFirst+IDStep, ...:
	// several sources in one run interleave their IDs (source k of S uses
	// k+1 and S) so that IDs stay unique and dense, as the ledger indexes
	// them. Zero means 1 for both (sim.Run sets them for Config.Sources).
	IDFirst, IDStep uint64
}

// DefaultTrafficConfig returns the seeds' reference traffic: 1000 req/s,
// Poisson, one model version, one tenant, inputs of 16 to 64 bytes (short
// prompts; the fixed latency model ignores their length anyway). Target and
// ReplyTo are left for the caller (sim.Run fills them).
func DefaultTrafficConfig() TrafficConfig {
	return TrafficConfig{
		Rate:        1000,
		Arrival:     Poisson,
		Mix:         []ModelMix{{Model: "m", Version: "v1", Weight: 1}},
		Tenants:     []string{"t"},
		InputLenMin: 16,
		InputLenMax: 64,
		InputPool:   4096,
	}
}

// Validate reports the first field that makes the configuration unusable.
func (c TrafficConfig) Validate() error {
	switch {
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("traffic config: Rate %v: must be a finite number >= 0", c.Rate)
	case c.Arrival > Burst:
		return fmt.Errorf("traffic config: Arrival %d: unknown process", c.Arrival)
	case c.Start < 0 || (c.Stop != 0 && c.Stop < c.Start):
		return fmt.Errorf("traffic config: Start %v, Stop %v: need 0 <= Start <= Stop (or Stop 0)", c.Start, c.Stop)
	case c.RequestsMax < 0:
		return fmt.Errorf("traffic config: RequestsMax %d: must not be negative", c.RequestsMax)
	case len(c.Mix) == 0:
		return errors.New("traffic config: Mix is empty")
	case len(c.Tenants) == 0:
		return errors.New("traffic config: Tenants is empty")
	case c.InputLenMin < 1 || c.InputLenMax < c.InputLenMin || c.InputLenMax > InputLenLimit:
		return fmt.Errorf("traffic config: InputLenMin %d, InputLenMax %d: need 1 <= min <= max <= %d", c.InputLenMin, c.InputLenMax, InputLenLimit)
	case c.InputPool < 0 || c.InputPool > inputPoolLimit:
		return fmt.Errorf("traffic config: InputPool %d: need 0 (default) to %d", c.InputPool, inputPoolLimit)
	case c.Timeout < 0 || c.CancelAfter < 0:
		return errors.New("traffic config: Timeout and CancelAfter must not be negative")
	case !(c.CancelRate >= 0 && c.CancelRate <= 1):
		return fmt.Errorf("traffic config: CancelRate %v: must be in [0, 1]", c.CancelRate)
	case c.Target.IsZero() || c.ReplyTo.IsZero():
		return errors.New("traffic config: Target and ReplyTo must be set")
	case c.Priority < actors.PriorityLow || c.Priority > actors.PriorityHigh:
		return fmt.Errorf("traffic config: Priority %d: need %d to %d", c.Priority, actors.PriorityLow, actors.PriorityHigh)
	case c.IDStep > idStepLimit || c.IDFirst > ledger.RequestsLimit:
		return fmt.Errorf("traffic config: IDFirst %d, IDStep %d: need at most %d and %d", c.IDFirst, c.IDStep, ledger.RequestsLimit, idStepLimit)
	}
	if err := c.validatePoison(); err != nil {
		return err
	}
	for i, m := range c.Mix {
		if m.Model == "" || !(m.Weight > 0) || math.IsInf(m.Weight, 0) {
			return fmt.Errorf("traffic config: Mix[%d]: need a model and a finite weight > 0", i)
		}
	}
	return c.validateArrival()
}

// validatePoison checks the poison fields.
func (c TrafficConfig) validatePoison() error {
	switch {
	case !(c.PoisonShare >= 0 && c.PoisonShare <= 1):
		return fmt.Errorf("traffic config: PoisonShare %v: must be in [0, 1]", c.PoisonShare)
	case c.PoisonInputs < 0 || c.PoisonInputs > PoisonInputsLimit:
		return fmt.Errorf("traffic config: PoisonInputs %d: need 0 (one) to %d", c.PoisonInputs, PoisonInputsLimit)
	case c.PoisonShare == 0 && (c.PoisonPrefix != "" || c.PoisonInputs != 0 || len(c.PoisonTenants) > 0):
		return errors.New("traffic config: PoisonPrefix, PoisonInputs and PoisonTenants need a PoisonShare")
	case c.PoisonShare == 0:
		return nil
	case c.PoisonPrefix == "":
		return errors.New("traffic config: PoisonShare needs a PoisonPrefix")
	case len(c.PoisonPrefix)+len(strconv.Itoa(max(c.PoisonInputs, 1)-1)) > InputLenLimit:
		return fmt.Errorf("traffic config: PoisonPrefix of %d bytes: a poison input would pass %d bytes", len(c.PoisonPrefix), InputLenLimit)
	}
	for i, name := range c.PoisonTenants {
		if !slices.Contains(c.Tenants, name) {
			return fmt.Errorf("traffic config: PoisonTenants[%d] %q: not one of Tenants", i, name)
		}
	}
	return nil
}

// Traffic is an open-loop traffic source actor: it sends Submit to the
// batcher at the configured rate, regardless of replies (real clients do not
// slow down because the server is slow, which is what makes overload
// interesting). It draws everything from ctx.Rand and schedules itself with
// ctx.After, so a run is a function of the seed.
type Traffic struct {
	cfg TrafficConfig
	// cum holds the cumulative mix weights, for one draw per request.
	cum []float64
	// pool holds the pre-generated inputs; each is a substring of one
	// buffer.
	pool []string
	// poison holds the poison inputs (TrafficConfig.PoisonShare).
	poison []string
	// gapMean is the mean inter-arrival gap in seconds.
	gapMean float64
	nextID  uint64
	idStep  uint64
	offered int64
	cancels int64
	stopped bool
	// groupLeft is the requests of the current Burst group still to come.
	groupLeft int
}

// arrive is the source's own timer: the next request is due.
type arrive struct{}

// cancelDue is the source's own timer: withdraw request ID.
type cancelDue struct{ ID uint64 }

// NewTraffic returns a source for a valid configuration.
func NewTraffic(cfg TrafficConfig) (*Traffic, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.InputPool == 0 {
		cfg.InputPool = 4096
	}
	t := &Traffic{cfg: cfg, nextID: max(cfg.IDFirst, 1), idStep: max(cfg.IDStep, 1)}
	total := 0.0
	for _, m := range cfg.Mix {
		total += m.Weight
		t.cum = append(t.cum, total)
	}
	if cfg.Rate > 0 {
		t.gapMean = 1 / cfg.Rate
	}
	if cfg.PoisonShare > 0 {
		t.poison = make([]string, max(cfg.PoisonInputs, 1))
		for k := range t.poison {
			t.poison[k] = cfg.PoisonPrefix + strconv.Itoa(k)
		}
	}
	return t, nil
}

// Offered is the number of requests sent so far.
func (t *Traffic) Offered() int64 { return t.offered }

// Cancels is the number of Cancel messages sent so far.
func (t *Traffic) Cancels() int64 { return t.cancels }

// Receive implements actors.Actor.
func (t *Traffic) Receive(ctx actors.Context, msg actors.Message) {
	switch m := msg.(type) {
	case actors.Start:
		t.start(ctx)
	case arrive:
		t.send(ctx)
	case cancelDue:
		t.cancels++
		ctx.Send(t.cfg.Target, actors.Cancel{ID: m.ID})
	}
}

func (t *Traffic) start(ctx actors.Context) {
	t.fillPool(ctx)
	if t.cfg.Rate == 0 {
		t.stopped = true
		return
	}
	first := t.gap(ctx)
	if now := ctx.Now(); now < t.cfg.Start {
		first += t.cfg.Start - now
	}
	t.schedule(ctx, first)
}

// fillPool draws the input pool: one buffer of random lowercase letters,
// cut into strings of random lengths, so the pool costs two allocations.
func (t *Traffic) fillPool(ctx actors.Context) {
	r := ctx.Rand()
	lo, hi := t.cfg.InputLenMin, t.cfg.InputLenMax
	n := min(t.cfg.InputPool, max(1, inputPoolBytesMax/hi))
	lens := make([]int, n)
	total := 0
	for i := range lens {
		lens[i] = lo + r.IntN(hi-lo+1)
		total += lens[i]
	}
	buf := make([]byte, total)
	for i := 0; i < total; {
		u := r.Uint64()
		for j := 0; j < 8 && i < total; j++ {
			buf[i] = 'a' + byte(u%26)
			u >>= 8
			i++
		}
	}
	all := string(buf)
	t.pool = make([]string, n)
	off := 0
	for i, l := range lens {
		t.pool[i] = all[off : off+l]
		off += l
	}
}

// sendsPoison reports whether tenant is one of PoisonTenants (all when
// empty).
func (t *Traffic) sendsPoison(tenant string) bool {
	return len(t.cfg.PoisonTenants) == 0 || slices.Contains(t.cfg.PoisonTenants, tenant)
}

// gap draws the time to the next arrival.
func (t *Traffic) gap(ctx actors.Context) time.Duration {
	switch t.cfg.Arrival {
	case Diurnal:
		return t.diurnalGap(ctx)
	case Burst:
		return t.burstGap(ctx)
	}
	s := t.gapMean
	if t.cfg.Arrival == Poisson {
		s *= ctx.Rand().ExpFloat64()
	}
	// At least 1 ns, so that two arrivals never share an instant by
	// accident and time always moves. A gap too long for a Duration (a
	// tiny rate) means no further arrival, not an overflow.
	if ns := s * float64(time.Second); ns < float64(gapNever) {
		return max(time.Duration(ns), 1)
	}
	return gapNever
}

// gapNever is the gap that stands for "no further arrival": far past any
// run, with room to add it to the clock without overflow.
const gapNever = time.Duration(math.MaxInt64 / 4)

// schedule sets the next arrival d from now, unless it would fall at or
// after Stop; the source then ends without leaving a timer behind.
func (t *Traffic) schedule(ctx actors.Context, d time.Duration) {
	if t.cfg.Stop != 0 && ctx.Now()+d >= t.cfg.Stop {
		t.stopped = true
		return
	}
	ctx.After(d, arrive{})
}

func (t *Traffic) send(ctx actors.Context) {
	if t.stopped {
		return
	}
	if t.cfg.RequestsMax > 0 && t.offered >= t.cfg.RequestsMax {
		t.stopped = true
		return
	}
	r := ctx.Rand()
	now := ctx.Now()
	mix := t.cfg.Mix[0]
	if len(t.cum) > 1 {
		x := r.Float64() * t.cum[len(t.cum)-1]
		i := 0
		for i < len(t.cum)-1 && x >= t.cum[i] {
			i++
		}
		mix = t.cfg.Mix[i]
	}
	tenant := t.cfg.Tenants[0]
	if len(t.cfg.Tenants) > 1 {
		tenant = t.cfg.Tenants[r.IntN(len(t.cfg.Tenants))]
	}
	req := actors.Request{
		ID:       t.nextID,
		Tenant:   tenant,
		Model:    mix.Model,
		Version:  mix.Version,
		Params:   t.cfg.Params,
		Priority: t.cfg.Priority,
		Arrival:  now,
		ReplyTo:  t.cfg.ReplyTo,
	}
	// The poison draw comes only with a PoisonShare, so that the draws of
	// a source without one, and its runs' trace hashes, stay as they were.
	if t.poison != nil && t.sendsPoison(tenant) && r.Float64() < t.cfg.PoisonShare {
		req.Input = t.poison[0]
		if len(t.poison) > 1 {
			req.Input = t.poison[r.IntN(len(t.poison))]
		}
	} else {
		req.Input = t.pool[r.IntN(len(t.pool))]
	}
	if t.cfg.Timeout > 0 {
		req.Deadline = now + t.cfg.Timeout
	}
	t.nextID += t.idStep
	t.offered++
	ctx.Send(t.cfg.Target, actors.Submit{Req: req})
	if t.cfg.CancelRate > 0 && r.Float64() < t.cfg.CancelRate {
		ctx.After(t.cfg.CancelAfter, cancelDue{ID: req.ID})
	}
	t.schedule(ctx, t.gap(ctx))
}
