package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/batchd/batchd/sim"
)

// Param is the setting a sweep varies.
type Param string

const (
	// Rate is the offered load in requests per second. With several
	// traffic sources, their rates are scaled together to the total.
	Rate Param = "rate"
	// Devices is the number of devices.
	Devices Param = "devices"
	// BatchMax is the most items in one batch.
	BatchMax Param = "batch-max"
	// Linger caps the linger (BatcherConfig.LingerMax); its values are in
	// milliseconds, and 0 means dispatch as soon as a device is free.
	Linger Param = "linger"
)

// Params lists the settings a sweep can vary.
var Params = []Param{Rate, Devices, BatchMax, Linger}

// PointsMax bounds the points of one sweep (each is a whole simulated
// run, once per policy).
const PointsMax = 200

// ErrSpec is wrapped by ParseSpec's errors.
var ErrSpec = errors.New("bad sweep")

// Spec is a parsed sweep: Param from From to To (inclusive) by Step.
type Spec struct {
	Param          Param
	From, To, Step float64
}

// ParseSpec reads "PARAM=FROM:TO:STEP", e.g. "rate=100:5000:100",
// "devices=1:16:1", "batch-max=10:100:10" or "linger=0ms:50ms:5ms"
// (linger takes durations, the others numbers; devices and batch-max
// whole ones). At most PointsMax points.
func ParseSpec(s string) (Spec, error) {
	name, rng, ok := strings.Cut(s, "=")
	if !ok {
		return Spec{}, fmt.Errorf("%w %q: want PARAM=FROM:TO:STEP, e.g. rate=100:5000:100", ErrSpec, s)
	}
	sp := Spec{Param: Param(strings.TrimSpace(name))}
	known := false
	for _, p := range Params {
		known = known || p == sp.Param
	}
	if !known {
		return Spec{}, fmt.Errorf("%w %q: unknown setting %q: want one of rate, devices, batch-max, linger", ErrSpec, s, name)
	}
	parts := strings.Split(rng, ":")
	if len(parts) != 3 {
		return Spec{}, fmt.Errorf("%w %q: want FROM:TO:STEP after %s=", ErrSpec, s, name)
	}
	var vals [3]float64
	for i, p := range parts {
		v, err := sp.parseValue(strings.TrimSpace(p))
		if err != nil {
			return Spec{}, fmt.Errorf("%w %q: %q: %w", ErrSpec, s, p, err)
		}
		vals[i] = v
	}
	sp.From, sp.To, sp.Step = vals[0], vals[1], vals[2]
	switch {
	case sp.Step <= 0:
		return Spec{}, fmt.Errorf("%w %q: STEP must be positive", ErrSpec, s)
	case sp.To < sp.From:
		return Spec{}, fmt.Errorf("%w %q: TO is below FROM", ErrSpec, s)
	case (sp.Param == Devices || sp.Param == BatchMax) && sp.From < 1:
		return Spec{}, fmt.Errorf("%w %q: %s starts at 1", ErrSpec, s, sp.Param)
	}
	if n := (sp.To-sp.From)/sp.Step + 1; n > PointsMax {
		return Spec{}, fmt.Errorf("%w %q: %.0f points, at most %d", ErrSpec, s, math.Floor(n), PointsMax)
	}
	return sp, nil
}

// parseValue reads one number of the spec in the param's unit.
func (sp Spec) parseValue(p string) (float64, error) {
	if sp.Param == Linger {
		d, err := time.ParseDuration(p)
		if err != nil {
			return 0, errors.New("want a duration such as 5ms")
		}
		if d < 0 {
			return 0, errors.New("must not be negative")
		}
		return float64(d) / float64(time.Millisecond), nil
	}
	v, err := strconv.ParseFloat(p, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, errors.New("want a finite number >= 0")
	}
	if (sp.Param == Devices || sp.Param == BatchMax) && v != math.Trunc(v) {
		return 0, errors.New("want a whole number")
	}
	return v, nil
}

// Values are the spec's points, From, From+Step, ... up to To.
func (sp Spec) Values() []float64 {
	n := int(math.Floor((sp.To-sp.From)/sp.Step+1e-9)) + 1
	out := make([]float64, 0, n)
	for i := range n {
		// From+i*Step, not a running sum: no drift over 200 steps.
		out = append(out, sp.From+float64(i)*sp.Step)
	}
	return out
}

// Policy is a flush policy the sweep compares.
type Policy struct {
	Name string
	// Apply changes a configuration to follow the policy.
	Apply func(*sim.Config)
}

// The flush policies of our batcher that a sweep compares. A batch leaves
// when a device is free and it is full, or its oldest request has waited
// the linger, or a request's slack is used up; the linger is what a
// policy can choose.
var (
	// Derived is the batcher's own rule: the linger derived from the SLO
	// and the devices (BatcherConfig.Linger), or the configuration's
	// LingerMax cap if it has one.
	Derived = Policy{Name: "derived", Apply: func(*sim.Config) {}}
	// Eager dispatches as soon as a device is free (a linger of 1 ns):
	// the least latency at low load, the smallest batches, and so the
	// least capacity under load.
	Eager = Policy{Name: "eager", Apply: func(c *sim.Config) { c.Batcher.LingerMax = time.Nanosecond }}
)

// DefaultPolicies are the policies a sweep compares unless told otherwise.
var DefaultPolicies = []Policy{Derived, Eager}

// Result is one point of one policy's curve.
type Result struct {
	Policy string `json:"policy"`
	Param  Param  `json:"param"`
	// Value is the swept setting (req/s, devices, items, or ms of linger).
	Value      float64 `json:"value"`
	OfferedRPS float64 `json:"offered_rps"`
	// ThroughputRPS and GoodputRPS are the report's: completions, and
	// completions by the deadline, per second of the safety phase.
	ThroughputRPS float64 `json:"throughput_rps"`
	GoodputRPS    float64 `json:"goodput_rps"`
	P50Ms         float64 `json:"p50_ms"`
	P95Ms         float64 `json:"p95_ms"`
	P99Ms         float64 `json:"p99_ms"`
	SLOAttainment float64 `json:"slo_attainment"`
	Rejected      int64   `json:"rejected"`
	Expired       int64   `json:"expired"`
	// RejectedFrac is Rejected over offered.
	RejectedFrac  float64 `json:"rejected_frac"`
	BatchSizeMean float64 `json:"batch_size_mean"`
	// CapacityRPS is the fleet's physical bound on throughput: devices x
	// batch max / the latency of a full batch. No policy can exceed it.
	CapacityRPS float64 `json:"capacity_rps"`
	// FloorMs is the physical bound on latency: one item alone on a free
	// device, no queue, no linger. No request can be faster.
	FloorMs    float64 `json:"floor_ms"`
	Violations int64   `json:"violations"`
	TraceHash  string  `json:"trace_hash"`
}

// Options configure Run.
type Options struct {
	// Policies are the curves; DefaultPolicies when empty. A linger sweep
	// sets the linger itself, so it draws one curve ("linger") and
	// ignores them.
	Policies []Policy
	// Parallel bounds the runs at once; zero means GOMAXPROCS.
	Parallel int
}

// point is one run of the sweep.
type point struct {
	policy Policy
	value  float64
}

// Run runs base at every point of spec under every policy and returns the
// results ordered by point, then policy. A point whose configuration is
// invalid fails the sweep before anything runs. ctx stops the sweep
// between runs (a run, once started, finishes).
func Run(ctx context.Context, base sim.Config, spec Spec, opts Options) ([]Result, error) {
	pols := opts.Policies
	if len(pols) == 0 {
		pols = DefaultPolicies
	}
	if spec.Param == Linger {
		pols = []Policy{{Name: "linger", Apply: func(*sim.Config) {}}}
	}
	var points []point
	var cfgs []sim.Config
	for _, v := range spec.Values() {
		for _, p := range pols {
			cfg, err := Configure(base, spec.Param, v)
			if err != nil {
				return nil, err
			}
			p.Apply(&cfg)
			if err := cfg.Validate(); err != nil {
				return nil, fmt.Errorf("sweep: %s=%g, policy %s: %w", spec.Param, v, p.Name, err)
			}
			points = append(points, point{p, v})
			cfgs = append(cfgs, cfg)
		}
	}
	par := opts.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	par = min(par, len(points))

	out := make([]Result, len(points))
	errs := make([]error, len(points))
	next := make(chan int)
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rep, err := sim.Run(cfgs[i])
				if err != nil {
					errs[i] = fmt.Errorf("sweep: %s=%g, policy %s: %w", spec.Param, points[i].value, points[i].policy.Name, err)
					continue
				}
				out[i] = result(points[i], spec.Param, cfgs[i], rep)
			}
		}()
	}
	var stopped error
feed:
	for i := range points {
		// Checked first: select picks at random among ready cases.
		if stopped = ctx.Err(); stopped != nil {
			break
		}
		select {
		case next <- i:
		case <-ctx.Done():
			stopped = ctx.Err()
			break feed
		}
	}
	close(next)
	wg.Wait()
	if stopped != nil {
		return nil, fmt.Errorf("sweep: %w", stopped)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Configure returns base with param set to v, or an error wrapping
// ErrSpec when the setting cannot be swept on this workload.
func Configure(base sim.Config, param Param, v float64) (sim.Config, error) {
	cfg := base
	switch param {
	case Rate:
		switch {
		case len(cfg.Replay) > 0:
			return cfg, fmt.Errorf("%w: rate: a replay's arrivals are recorded; sweep devices, batch-max or linger instead", ErrSpec)
		case len(cfg.Sources) > 0:
			total := 0.0
			for _, s := range cfg.Sources {
				total += s.Rate
			}
			if total <= 0 {
				return cfg, fmt.Errorf("%w: rate: the traffic sources offer nothing to scale", ErrSpec)
			}
			// A copy: the base's sources are shared by every point.
			cfg.Sources = append([]sim.TrafficConfig(nil), cfg.Sources...)
			for i := range cfg.Sources {
				cfg.Sources[i].Rate *= v / total
			}
		default:
			cfg.Rate = v
		}
	case Devices:
		cfg.Devices = int(v)
	case BatchMax:
		cfg.Batcher.BatchMax = int(v)
	case Linger:
		// Zero would mean "derived"; the sweep means "none".
		cfg.Batcher.LingerMax = max(time.Duration(v*float64(time.Millisecond)), time.Nanosecond)
	default:
		return cfg, fmt.Errorf("%w: unknown setting %q", ErrSpec, param)
	}
	return cfg, nil
}

func result(p point, param Param, cfg sim.Config, rep sim.Report) Result {
	r := Result{
		Policy:        p.policy.Name,
		Param:         param,
		Value:         p.value,
		OfferedRPS:    rep.Workload.RateRPS,
		ThroughputRPS: rep.ThroughputRPS,
		GoodputRPS:    rep.GoodputRPS,
		P50Ms:         rep.LatencyMs.P50,
		P95Ms:         rep.LatencyMs.P95,
		P99Ms:         rep.LatencyMs.P99,
		SLOAttainment: rep.SLOAttainment,
		Rejected:      rep.Requests.Rejected,
		Expired:       rep.Requests.Expired,
		BatchSizeMean: rep.BatchSizeMean,
		Violations:    rep.Violations.Count,
		TraceHash:     rep.TraceHash,
	}
	if rep.Requests.Offered > 0 {
		r.RejectedFrac = float64(rep.Requests.Rejected) / float64(rep.Requests.Offered)
	}
	r.CapacityRPS, r.FloorMs = Bound(cfg, rep.Workload.LatencyMs)
	return r
}

// Bound is the fleet's physical bound: capacity = devices x batch max /
// the latency of a full batch (fullMs, as the report's workload gives it
// for the longest input), and the latency floor, one shortest item alone
// on a device.
func Bound(cfg sim.Config, fullMs float64) (capacityRPS, floorMs float64) {
	if fullMs > 0 {
		capacityRPS = float64(cfg.Devices*cfg.Batcher.BatchMax) / (fullMs / 1e3)
	}
	floor := cfg.Latency.Predict(1, 0)
	return capacityRPS, float64(floor) / float64(time.Millisecond)
}

// WriteTable prints the results as an aligned table, one row per point and
// policy, with the physical bound of the fleet on each row.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	param := "value"
	if len(rs) > 0 {
		param = string(rs[0].Param)
		if rs[0].Param == Linger {
			param = "linger ms"
		}
	}
	fmt.Fprintf(tw, "%s\tpolicy\toffered/s\tthroughput/s\tgoodput/s\tp50 ms\tp95 ms\tp99 ms\tSLO\trejected\texpired\tbatch\tcapacity/s\tfloor ms\t\n", param)
	for _, r := range rs {
		fmt.Fprintf(tw, "%g\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.4f\t%.2f%%\t%d\t%.1f\t%.0f\t%.1f\t\n",
			r.Value, r.Policy, r.OfferedRPS, r.ThroughputRPS, r.GoodputRPS, r.P50Ms, r.P95Ms, r.P99Ms,
			r.SLOAttainment, 100*r.RejectedFrac, r.Expired, r.BatchSizeMean, r.CapacityRPS, r.FloorMs)
	}
	return tw.Flush()
}
