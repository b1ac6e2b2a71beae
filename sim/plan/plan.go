package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/batchd/batchd/sim"
	"github.com/batchd/batchd/sim/ledger"
)

// Options are what a plan is asked for, besides the workload and server
// (a sim.Config).
type Options struct {
	// RPS is the steady offered rate, requests per second; the workload's
	// traffic mix is scaled to it.
	RPS float64
	// SLO is the p95 target of end-to-end latency. Zero means the
	// batcher's SLO. A model with an SLO of its own is held to that one.
	SLO time.Duration
	// Headroom is the utilisation the formula leaves the devices at:
	// devices / Headroom. 0.7 by default, as the seeds compute it.
	Headroom float64
	// Warmup is simulated before the measured window, Measure the window:
	// the requests that arrive in it are the probe's figures.
	Warmup, Measure time.Duration
	// UnservedMax is the most a fleet may leave unserved (rejected,
	// expired or failed), as a fraction of the window's requests.
	UnservedMax float64
	// DevicesMax bounds the fleets tried.
	DevicesMax int
}

// DefaultOptions are the seeds' case: 1,000 req/s, 70% headroom, 5 s of
// warm-up and 30 s measured, at most 0.1% unserved, up to 1,024 devices.
func DefaultOptions() Options {
	return Options{RPS: 1000, Headroom: 0.7, Warmup: 5 * time.Second, Measure: 30 * time.Second,
		UnservedMax: 0.001, DevicesMax: 1024}
}

// Bounds on the options.
const (
	// WindowLimit bounds Warmup + Measure, so a probe stays seconds long.
	WindowLimit = 10 * time.Minute
	// ProbesLimit bounds the simulated runs of one plan; the search needs
	// at most about 2·log2(DevicesMax) + 2.
	ProbesLimit = 32
)

// ErrInvalid wraps an error of the options or the workload: the plan's
// question, not its runs.
var ErrInvalid = errors.New("invalid plan")

// ErrNoFleet is returned when no fleet up to DevicesMax holds the target.
var ErrNoFleet = errors.New("no fleet holds the target")

// Validate reports the first option that makes the plan impossible.
func (o Options) Validate() error {
	switch {
	case !(o.RPS > 0) || math.IsInf(o.RPS, 0):
		return fmt.Errorf("%w: rps %v: need a finite rate above 0", ErrInvalid, o.RPS)
	case o.SLO < 0:
		return fmt.Errorf("%w: slo %v: must not be negative", ErrInvalid, o.SLO)
	case !(o.Headroom > 0 && o.Headroom <= 1):
		return fmt.Errorf("%w: headroom %v: need (0, 1]", ErrInvalid, o.Headroom)
	case o.Warmup < 0 || o.Measure <= 0 || o.Warmup+o.Measure > WindowLimit:
		return fmt.Errorf("%w: warm-up %v, measured %v: need warm-up >= 0, measured > 0, together at most %v", ErrInvalid, o.Warmup, o.Measure, WindowLimit)
	case !(o.UnservedMax >= 0 && o.UnservedMax < 1):
		return fmt.Errorf("%w: unserved bound %v: need [0, 1)", ErrInvalid, o.UnservedMax)
	case o.DevicesMax < 1 || o.DevicesMax > sim.DevicesLimit:
		return fmt.Errorf("%w: devices bound %d: need 1 to %d", ErrInvalid, o.DevicesMax, sim.DevicesLimit)
	}
	return nil
}

// Formula is the back-of-envelope figure.
type Formula struct {
	// LatencyMs is a full batch's cost, averaged over the traffic mix.
	LatencyMs float64 `json:"latency_ms"`
	BatchMax  int     `json:"batch_max"`
	// Raw is rps × latency / batch max, Devices its ceiling.
	Raw     float64 `json:"raw"`
	Devices int     `json:"devices"`
	// WithHeadroom is ceil(Devices / Headroom).
	Headroom     float64 `json:"headroom"`
	WithHeadroom int     `json:"with_headroom"`
	// Capacity is what one device carries with every batch at its most
	// efficient size (requests per second): no batching does better.
	Capacity float64 `json:"capacity_rps"`
	// Floor is the fewest devices that could hold the target at all: any
	// fewer carry less than the rate less the unserved bound, so they
	// must leave more unserved. The search starts here.
	Floor int `json:"floor"`
}

// Probe is one simulated fleet, measured over the window.
type Probe struct {
	Devices int  `json:"devices"`
	Holds   bool `json:"holds"`
	// Why says what broke, for a fleet that does not hold.
	Why   string  `json:"why,omitempty"`
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
	P99Ms float64 `json:"p99_ms"`
	// Unserved is the window's rejected, expired and failed requests
	// over its requests.
	Unserved float64 `json:"unserved"`
	// Utilization is the devices' mean busy fraction over the window.
	Utilization   float64 `json:"utilization"`
	BatchSizeMean float64 `json:"batch_size_mean"`
	// Keys is the most compatibility keys with traffic at once.
	Keys        int     `json:"keys"`
	Lost        int64   `json:"lost"`
	WallSeconds float64 `json:"wall_seconds"`
}

// Result is a plan.
type Result struct {
	RPS      float64 `json:"rps"`
	SLOMs    float64 `json:"slo_p95_ms"`
	Seed     uint64  `json:"seed"`
	WarmupS  float64 `json:"warmup_s"`
	MeasureS float64 `json:"measure_s"`
	// UnservedMax is the bound a fleet that holds stays under.
	UnservedMax float64 `json:"unserved_max"`
	Formula     Formula `json:"formula"`
	// Devices is the smallest fleet the simulator shows holding the
	// target, Fleet its probe.
	Devices int   `json:"devices"`
	Fleet   Probe `json:"fleet"`
	// Probes are every fleet simulated, in the order tried.
	Probes []Probe `json:"probes"`
	// ModelSLOs are the models held to an SLO of their own, in ms.
	ModelSLOs map[string]float64 `json:"model_slo_ms,omitempty"`
	Why       Why                `json:"why"`
}

// Plan sizes a fleet for base's server and traffic mix at opts.RPS: the
// formula, then a search over fleet sizes from the formula's floor. base
// gives the batcher, the devices' cost model and faults, the traffic
// (Traffic, or Sources whose rates give the mix) and the seed; its
// Devices, Duration, windows and scheduled faults are the plan's.
func Plan(base sim.Config, opts Options) (Result, error) {
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	if opts.SLO == 0 {
		opts.SLO = base.Batcher.SLO
	}
	cfg, shares, err := steady(base, opts)
	if err != nil {
		return Result{}, err
	}
	f := formula(cfg, shares, opts)
	res := Result{
		RPS: opts.RPS, SLOMs: ms(opts.SLO), Seed: base.Seed, UnservedMax: opts.UnservedMax,
		WarmupS: opts.Warmup.Seconds(), MeasureS: opts.Measure.Seconds(), Formula: f,
	}
	for _, m := range cfg.Batcher.Models {
		if m.SLO > 0 {
			if res.ModelSLOs == nil {
				res.ModelSLOs = map[string]float64{}
			}
			res.ModelSLOs[m.Name] = ms(m.SLO)
		}
	}
	if f.Floor > opts.DevicesMax {
		return res, fmt.Errorf("%w: the physical floor is %d devices, past the bound of %d", ErrNoFleet, f.Floor, opts.DevicesMax)
	}
	probed := map[int]int{} // devices → index in res.Probes
	probe := func(n int) (Probe, error) {
		if i, ok := probed[n]; ok {
			return res.Probes[i], nil
		}
		if len(res.Probes) >= ProbesLimit {
			return Probe{}, fmt.Errorf("plan: more than %d probes", ProbesLimit)
		}
		p, err := run(fleet(cfg, base, n), opts)
		if err != nil {
			return Probe{}, fmt.Errorf("plan: %d devices: %w", n, err)
		}
		probed[n] = len(res.Probes)
		res.Probes = append(res.Probes, p)
		return p, nil
	}
	// Exponential from the floor, then binary between the last fleet
	// that failed and the first that held; a fleet of more devices is
	// taken to hold whatever a smaller one holds.
	lo, hi := f.Floor-1, f.Floor
	for {
		p, err := probe(hi)
		if err != nil {
			return res, err
		}
		if p.Holds {
			break
		}
		if hi == opts.DevicesMax {
			return res, fmt.Errorf("%w: %d devices, the bound, do not: %s", ErrNoFleet, hi, p.Why)
		}
		lo = hi
		if hi == f.Floor {
			hi = max(hi+1, f.WithHeadroom)
		} else {
			hi *= 2
		}
		hi = min(hi, opts.DevicesMax)
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		p, err := probe(mid)
		if err != nil {
			return res, err
		}
		if p.Holds {
			hi = mid
		} else {
			lo = mid
		}
	}
	res.Devices, res.Fleet = hi, res.Probes[probed[hi]]
	var below *Probe
	if i, ok := probed[hi-1]; ok {
		below = &res.Probes[i]
	}
	res.Why = explain(res, opts, below, batchCost(cfg, shares, res.Fleet.BatchSizeMean))
	return res, nil
}

// share is one traffic source's part of the mix.
type share struct {
	src    sim.TrafficConfig
	weight float64 // fraction of the requests
}

// steady turns base into the plan's run: the traffic mix at opts.RPS,
// steady from the start, over the warm-up and the measured window.
func steady(base sim.Config, opts Options) (sim.Config, []share, error) {
	if len(base.Replay) > 0 {
		return sim.Config{}, nil, fmt.Errorf("%w: a replayed workload has no rate to scale", ErrInvalid)
	}
	cfg := base
	cfg.Duration = opts.Warmup + opts.Measure
	cfg.Windows = []time.Duration{opts.Warmup, cfg.Duration}
	cfg.TimelineEvery, cfg.SignalsEvery = 0, time.Second
	cfg.FaultSchedule, cfg.Observers = nil, nil
	srcs := base.Sources
	if len(srcs) == 0 {
		srcs = []sim.TrafficConfig{base.Traffic}
		srcs[0].Rate, srcs[0].Start, srcs[0].Stop = 1, 0, 0
	}
	var shares []share
	total := 0.0
	for _, s := range srcs {
		// A source's part is the requests it sends over base's run.
		stop := s.Stop
		if stop == 0 || stop > base.Duration {
			stop = base.Duration
		}
		w := s.Rate * curveMean(s) * max(stop-s.Start, 0).Seconds()
		if w > 0 {
			shares = append(shares, share{src: s, weight: w})
			total += w
		}
	}
	if total == 0 {
		return sim.Config{}, nil, fmt.Errorf("%w: the workload offers no traffic", ErrInvalid)
	}
	cfg.Sources = nil
	for i := range shares {
		sh := &shares[i]
		sh.weight /= total
		s := sh.src
		s.Rate = opts.RPS * sh.weight
		s.Start, s.Stop, s.RequestsMax, s.IDFirst, s.IDStep = 0, 0, 0, 0, 0
		if s.Arrival != sim.Constant {
			s.Arrival = sim.Poisson
		}
		s.RateCurve, s.BurstSize = nil, 0
		cfg.Sources = append(cfg.Sources, s)
		sh.src = s
	}
	if len(base.Sources) == 0 {
		cfg.Traffic, cfg.Sources, cfg.Rate = cfg.Sources[0], nil, opts.RPS
	}
	if err := fleet(cfg, base, 1).Validate(); err != nil {
		return sim.Config{}, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return cfg, shares, nil
}

// curveMean is the mean multiple of Rate a source sends: 1, or the mean
// of a diurnal curve (straight lines between evenly spaced points).
func curveMean(s sim.TrafficConfig) float64 {
	c := s.RateCurve
	if s.Arrival != sim.Diurnal || len(c) < 2 {
		return 1
	}
	sum := 0.0
	for i := 1; i < len(c); i++ {
		sum += (c[i-1] + c[i]) / 2
	}
	return sum / float64(len(c)-1)
}

// fleet is cfg with n devices; warm models, if base places them, repeat
// base's placement over the fleet.
func fleet(cfg, base sim.Config, n int) sim.Config {
	cfg.Devices = n
	cfg.Batcher.DevicesMax = max(cfg.Batcher.DevicesMax, n)
	cfg.HealthyDevices = min(cfg.HealthyDevices, n)
	if k := len(base.DeviceModels); k > 0 {
		cfg.DeviceModels = make([][]string, n)
		for i := range n {
			cfg.DeviceModels[i] = slices.Clone(base.DeviceModels[i%k])
		}
	}
	return cfg
}

// formula computes the back-of-envelope figures for the mix.
func formula(cfg sim.Config, shares []share, opts Options) Formula {
	b := cfg.Batcher.BatchMax
	var full, best float64 // seconds per item: full batches, best batches
	for _, sh := range shares {
		full += sh.weight * cfg.Latency.Predict(b, sh.src.InputLenMax).Seconds() / float64(b)
		perItem := math.Inf(1)
		for n := 1; n <= b; n++ {
			perItem = min(perItem, cfg.Latency.Predict(n, sh.src.InputLenMin).Seconds()/float64(n))
		}
		best += sh.weight * perItem
	}
	f := Formula{LatencyMs: round(full*float64(b)*1e3, 3), BatchMax: b, Headroom: opts.Headroom}
	f.Raw = opts.RPS * full
	f.Devices = ceil(f.Raw)
	f.WithHeadroom = ceil(float64(f.Devices) / opts.Headroom)
	f.Capacity = round(1/best, 3)
	f.Floor = max(1, ceil(opts.RPS*(1-opts.UnservedMax)*best))
	f.Raw = round(f.Raw, 6)
	return f
}

// batchCost is the cost of a batch of size (rounded) over the mix, in
// milliseconds: each source's inputs padded to its longest.
func batchCost(cfg sim.Config, shares []share, size float64) float64 {
	n := max(1, int(math.Round(size)))
	var cost float64
	for _, sh := range shares {
		cost += sh.weight * cfg.Latency.Predict(n, sh.src.InputLenMax).Seconds()
	}
	return round(cost*1e3, 3)
}

// ceil is math.Ceil forgiving of float error: 10.000000000000002 is 10.
func ceil(x float64) int { return int(math.Ceil(x - 1e-9)) }

// run simulates one fleet and measures it over the window.
func run(cfg sim.Config, opts Options) (Probe, error) {
	rep, err := sim.Run(cfg)
	if err != nil {
		return Probe{}, err
	}
	p := Probe{Devices: cfg.Devices, BatchSizeMean: rep.BatchSizeMean, Lost: rep.Requests.Lost, WallSeconds: rep.WallSeconds}
	if len(rep.Windows) != 1 {
		return p, fmt.Errorf("the report has %d windows, want 1", len(rep.Windows))
	}
	win := rep.Windows[0]
	all := win.All
	p.P50Ms, p.P95Ms, p.P99Ms = all.LatencyMs.P50, all.LatencyMs.P95, all.LatencyMs.P99
	if all.Offered > 0 {
		p.Unserved = round(float64(all.Rejected+all.Expired+all.Failed)/float64(all.Offered), 6)
	}
	var busy float64
	var samples int
	from, to := opts.Warmup.Seconds(), (opts.Warmup + opts.Measure).Seconds()
	for _, s := range rep.Autoscale {
		if s.T > from && s.T <= to {
			busy += s.BusyFractionMean
			samples++
			p.Keys = max(p.Keys, s.Keys)
		}
	}
	if samples > 0 {
		p.Utilization = round(busy/float64(samples), 4)
	}
	switch {
	case rep.Check() != nil:
		p.Why = rep.Check().Error()
	case all.Completed == 0:
		p.Why = "nothing completed in the window"
	case p.Unserved > opts.UnservedMax:
		p.Why = fmt.Sprintf("%.2f%% unserved (rejected %d, expired %d, failed %d), over %.2f%%",
			100*p.Unserved, all.Rejected, all.Expired, all.Failed, 100*opts.UnservedMax)
	default:
		p.Why = slowModel(cfg, win.Models, opts.SLO)
	}
	p.Holds = p.Why == ""
	return p, nil
}

// slowModel names a model whose p95 is past its target (its own SLO, or
// slo), or returns "".
func slowModel(cfg sim.Config, models map[string]ledger.NameStats, slo time.Duration) string {
	names := make([]string, 0, len(models))
	for name := range models {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		target := slo
		for _, m := range cfg.Batcher.Models {
			if m.Name == name && m.SLO > 0 {
				target = m.SLO
			}
		}
		if p95 := models[name].LatencyMs.P95; p95 > ms(target) {
			return fmt.Sprintf("model %s: p95 %.1f ms, over %.0f ms", name, p95, ms(target))
		}
	}
	return ""
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
