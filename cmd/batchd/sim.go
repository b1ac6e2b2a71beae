package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/schema"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/fidelity"
	"github.com/batchd/batchd/scenarios"
	"github.com/batchd/batchd/sim"
)

// runSim is `batchd sim [SCENARIO]`: flags map onto sim.Config, whose
// defaults are the flags' defaults, so the two cannot drift apart. The
// defaults are the seeds' reference workload, or those of a named
// experiment, or those of a scenario (a file or a built-in name); flags
// given explicitly still override them, so a scenario can be asked "what
// if" (--devices 8).
func runSim(args []string, stdout, stderr io.Writer) error {
	name, args := scenarioArg(args)
	cfg := sim.DefaultConfig()
	experiment := flagArg(args, "experiment")
	configArg := flagArg(args, "config")
	var serveFile *config.File
	var sc *scenarios.Scenario
	var err error
	if configArg != "" {
		if serveFile, err = fidelity.LoadServeConfig(configArg); err != nil {
			return usageError{fmt.Errorf("--config: %w", err)}
		}
	}
	switch {
	case name != "" && experiment != "":
		return usagef("--experiment and a scenario (%s): give one", name)
	case serveFile != nil && experiment != "":
		return usagef("--experiment and --config: give one (an experiment states its own policy and devices)")
	case name != "":
		if sc, err = scenarios.Find(name); errors.Is(err, scenarios.ErrUnknown) {
			// Not a file, not a built-in: say it the way a stray argument
			// of the flag-driven mode is said.
			return usagef("unexpected argument %q: %w", name, err)
		} else if err != nil {
			return usageError{err}
		}
		cfg, err = sc.SimConfig(sc.Seed)
		if err == nil && serveFile != nil {
			// The scenario's traffic, timing, faults and expectations
			// against the file's server.
			err = fidelity.SimServer(&cfg, serveFile, false)
		}
		if err != nil {
			return usageError{err}
		}
	case serveFile != nil:
		if err := fidelity.SimServer(&cfg, serveFile, true); err != nil {
			return usageError{fmt.Errorf("--config %s: %w", configArg, err)}
		}
	case experiment != "":
		var ok bool
		if cfg, ok = sim.Experiment(experiment); !ok {
			return usagef("--experiment %q: want one of %s", experiment, strings.Join(sim.Experiments(), ", "))
		}
	}
	// The base (scenario or experiment) is read before the flags are
	// defined, as they take their defaults from cfg.
	f := newSimFlags(&cfg, experiment, configArg)
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.usage(stdout)
			return err
		}
		return usagef("%v (see 'batchd sim -h')", err)
	}
	if f.fs.NArg() > 0 {
		return usagef("unexpected argument %q (see 'batchd sim -h')", f.fs.Arg(0))
	}
	if err := f.apply(&cfg, name != "" || experiment != "" || serveFile != nil); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}

	debug.SetGCPercent(sim.GCPercent)
	if f.extras.sweep != "" {
		return runSweep(cfg, f.extras, *f.asJSON, stdout, stderr)
	}
	if sc != nil {
		return runScenario(sc, cfg, f, stdout, stderr)
	}
	rep, err := sim.Run(cfg)
	if err != nil {
		return err
	}
	if *f.asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	} else if err := rep.WriteTable(stdout); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := f.extras.writeCharts(rep, stderr); err != nil {
		return err
	}
	return rep.Check()
}

// simFlags are the flags of `batchd sim`, bound to a sim.Config; those
// that need work after parsing are kept here.
type simFlags struct {
	fs                     *flag.FlagSet
	policy, table, arrival *string
	latency, perItem       *time.Duration
	slowFactor             *float64
	asJSON                 *bool
	extras                 *simExtras
}

// newSimFlags defines the flags on a new FlagSet, with cfg's values as
// their defaults.
func newSimFlags(cfg *sim.Config, experiment, serveConfig string) *simFlags {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	f := &simFlags{fs: fs}
	fs.String("experiment", experiment, "start from a named experiment of the batching-policy study instead of the reference workload: "+strings.Join(sim.Experiments(), ", "))
	fs.String("config", serveConfig, "simulate what 'batchd serve --config FILE' runs: its policy, models, tenants and devices (count, latency model, supervision, warm models, fault rates); '"+fidelity.EmbeddedConfig+"' is the embedded default serve configuration, what 'batchd serve' runs without --config")
	f.policy = fs.String("policy", schema.KeyPolicyName(cfg.Batcher.KeyPolicy), "which due key a free device serves: fair or slack")
	fs.BoolVar(&cfg.Split, "split", cfg.Split, "one accumulator per model (a router in front, devices shared between the accumulators of the models they hold) instead of one batcher for all")
	fs.BoolVar(&cfg.Batcher.BucketMerge, "bucket-merge", cfg.Batcher.BucketMerge, "let a due batch take requests of shorter length buckets of its model version")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "offered load, requests per simulated second")
	fs.IntVar(&cfg.Devices, "devices", cfg.Devices, "number of emulated GPUs")
	fs.IntVar(&cfg.Batcher.BatchMax, "batch-max", cfg.Batcher.BatchMax, "most items in one batch")
	f.latency = fs.Duration("latency", cfg.Latency.Base, "fixed device time per batch")
	f.perItem = fs.Duration("latency-per-item", 0, "with --latency, an affine cost: latency + per-item time x batch size")
	f.table = fs.String("latency-table", "", "a measured profile file of batch_size,latency lines (replaces --latency)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "safety phase (traffic, faults) in simulated time")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "master seed")
	f.asJSON = fs.Bool("json", false, "print the report as JSON instead of a table")
	fs.DurationVar(&cfg.Batcher.SLO, "slo", cfg.Batcher.SLO, "latency target of requests without their own deadline")
	f.arrival = fs.String("arrival", cfg.Traffic.Arrival.String(), "arrival process: poisson or constant")
	fs.DurationVar(&cfg.NetDelay, "net-delay", cfg.NetDelay, "delivery delay of every message between actors")
	fs.DurationVar(&cfg.DrainMax, "drain-max", cfg.DrainMax, "bound on the liveness phase (drain) in simulated time")
	fs.Float64Var(&cfg.Faults.CrashRate, "crash-rate", cfg.Faults.CrashRate, "probability that a batch crashes its device")
	fs.Float64Var(&cfg.Faults.HangRate, "hang-rate", cfg.Faults.HangRate, "probability that a batch hangs its device")
	fs.Float64Var(&cfg.Faults.BatchErrorRate, "batch-error-rate", cfg.Faults.BatchErrorRate, "probability that a batch fails as a whole")
	fs.Float64Var(&cfg.Faults.ItemErrorRate, "item-error-rate", cfg.Faults.ItemErrorRate, "probability that one item fails on its own")
	fs.Float64Var(&cfg.Faults.SlowRate, "slow-rate", cfg.Faults.SlowRate, "probability that a batch runs slow")
	slowFactor := cfg.Faults.SlowFactor
	if slowFactor == 0 {
		slowFactor = 4
	}
	f.slowFactor = fs.Float64("slow-factor", slowFactor, "latency multiple of a slow batch")
	f.extras = bindSimExtras(fs) // --sweep, --replay, --fleet, --out (sweep.go)
	// The flag package's own messages are replaced by one line and a hint,
	// so an error is not buried under the list of flags.
	fs.SetOutput(io.Discard)
	return f
}

func (f *simFlags) usage(w io.Writer) {
	f.fs.SetOutput(w)
	fmt.Fprintln(w, "usage: batchd sim [SCENARIO] [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Simulates traffic into the batching actors on emulated GPUs and reports")
	fmt.Fprintln(w, "latency, throughput and every invariant the request ledger checks.")
	fmt.Fprintln(w, "Exits 1 if an invariant broke or a request was lost or answered twice.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "SCENARIO is a scenario file (YAML) or a built-in one:")
	fmt.Fprintf(w, "  %s\n", strings.Join(scenarios.Builtins(), ", "))
	fmt.Fprintln(w, "Its settings become the flags' defaults; it also exits 1 if one of its")
	fmt.Fprintln(w, "expectations fails. With --out DIR, report.json is written there too.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "--config FILE simulates the server 'batchd serve --config FILE' runs (the")
	fmt.Fprintf(w, "same batcher configuration, devices, models and tenants; --config %s: the\n", fidelity.EmbeddedConfig)
	fmt.Fprintln(w, "embedded default one). The traffic is the flags' (--rate, --arrival, ...), or")
	fmt.Fprintln(w, "a SCENARIO's (its traffic, faults and expectations; the server is the file's).")
	fmt.Fprintln(w, "Traffic for the stand-in model m goes to the file's models.")
	fmt.Fprintln(w)
	f.fs.PrintDefaults()
}

// apply turns the parsed flags into cfg. based says cfg came from an
// experiment or a scenario, whose latency model stands unless --latency
// is given.
func (f *simFlags) apply(cfg *sim.Config, based bool) error {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	flagLatency := set["latency"] || set["latency-per-item"] || !based
	if flagLatency {
		cfg.Latency = actors.FixedLatency(*f.latency)
		cfg.Latency.PerItem = *f.perItem
	}
	if *f.table != "" {
		data, err := os.ReadFile(*f.table)
		if err != nil {
			return usageError{fmt.Errorf("--latency-table: %w", err)}
		}
		if cfg.Latency, err = actors.ParseLatencyTable(data); err != nil {
			return usageError{fmt.Errorf("--latency-table %s: %w", *f.table, err)}
		}
	}
	if flagLatency || *f.table != "" {
		// The flags replace the cost model: the batcher and the devices
		// plan with and run cfg.Latency.
		cfg.Batcher.Latency, cfg.Device.Latency = actors.LatencyModel{}, actors.LatencyModel{}
	}
	if set["rate"] && len(cfg.Sources) > 0 {
		return usagef("--rate: the workload has traffic sources with rates of their own")
	}
	kp, ok := schema.KeyPolicies[*f.policy]
	if !ok {
		return usagef("--policy %q: want fair or slack", *f.policy)
	}
	cfg.Batcher.KeyPolicy = kp
	if cfg.Faults.SlowRate > 0 {
		cfg.Faults.SlowFactor = *f.slowFactor
	}
	switch *f.arrival {
	case "poisson":
		cfg.Traffic.Arrival = sim.Poisson
	case "constant":
		cfg.Traffic.Arrival = sim.Constant
	default:
		return usagef("--arrival %q: want poisson or constant", *f.arrival)
	}
	if set["arrival"] {
		for i := range cfg.Sources {
			cfg.Sources[i].Arrival = cfg.Traffic.Arrival
			cfg.Sources[i].RateCurve, cfg.Sources[i].BurstSize = nil, 0
		}
	}
	if set["devices"] && len(cfg.DeviceModels) > cfg.Devices {
		// Fewer devices than the scenario's nodes: the first keep their
		// warm models.
		cfg.DeviceModels = cfg.DeviceModels[:cfg.Devices]
	}
	return f.extras.apply(cfg, set)
}

// scenarioArg finds the scenario named among args (the one argument that
// is not a flag or a flag's value, before or after the flags) and returns
// it with the other arguments. The flags are parsed once on a scratch
// configuration to tell which take a value; a mistake in them is left for
// the real parse to report.
func scenarioArg(args []string) (string, []string) {
	scratch := sim.DefaultConfig()
	f := newSimFlags(&scratch, "", "")
	if err := f.fs.Parse(args); err != nil || f.fs.NArg() == 0 {
		return "", args
	}
	rest := f.fs.Args()
	before := args[:len(args)-len(rest)]
	if n := len(before); n > 0 && before[n-1] == "--" {
		before = before[:n-1] // "--" ended the flags; the scenario follows it
	}
	return rest[0], append(append([]string{}, before...), rest[1:]...)
}

// runScenario runs a scenario's configuration (changed by the flags) and
// prints its report and the outcome of its expectations; with --out it
// writes report.json (and the charts) there. A failed expectation or a
// broken invariant makes it exit 1.
func runScenario(sc *scenarios.Scenario, cfg sim.Config, f *simFlags, stdout, stderr io.Writer) error {
	if bar := newProgress(stderr, cfg, *f.asJSON); bar != nil {
		cfg.Observers = append(cfg.Observers, bar)
		defer bar.close()
	}
	res, err := sc.RunConfig(cfg)
	if err != nil {
		return err
	}
	if *f.asJSON {
		if err := writeJSON(stdout, res); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	} else if err := res.WriteTable(stdout); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if out := f.extras.out; out != "" {
		path, err := res.WriteFile(out)
		if err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		fmt.Fprintf(stderr, "wrote %s\n", path)
		if err := f.extras.writeCharts(res.Report, stderr); err != nil {
			return err
		}
	}
	if failures := res.Failures(); len(failures) > 0 {
		return fmt.Errorf("%w: scenario %s: %d of %d expectations failed, or invariants broke:\n  %s",
			errScenarioFailed, sc.Name, len(failures), len(res.Checks), strings.Join(failures, "\n  "))
	}
	return nil
}

// errScenarioFailed is returned when a scenario's expectation fails.
var errScenarioFailed = errors.New("expectations failed")

// flagArg returns the value of the flag --name in args, or "" (the flag
// package then parses and checks it like the others): for the flags that
// choose the base the other flags take their defaults from.
func flagArg(args []string, name string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		flagName, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || flagName != name {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// progress is a progress bar on a terminal for a long run: an Observer
// that looks at the virtual clock once every progressEvery deliveries, so
// it costs one counter increment per event (the bar itself redraws at
// most every 100 ms of wall time).
type progress struct {
	bar   *progressbar.ProgressBar
	total time.Duration
	n     uint32
}

// progressEvery is how many deliveries pass between two looks at the
// clock: a few hundred per second of wall time at millions of events a
// second.
const progressEvery = 1 << 14

// progressMin is the shortest safety phase that gets a bar: shorter runs
// finish before a bar would be read.
const progressMin = 5 * time.Minute

// newProgress returns a bar for the run, or nil when stderr is not a
// terminal, the output is JSON or the run is short.
func newProgress(stderr io.Writer, cfg sim.Config, asJSON bool) *progress {
	file, ok := stderr.(*os.File)
	if asJSON || !ok || !term.IsTerminal(int(file.Fd())) || cfg.Duration < progressMin {
		return nil
	}
	bar := progressbar.NewOptions64(int64(cfg.Duration/time.Second),
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetDescription("simulated seconds"),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	return &progress{bar: bar, total: cfg.Duration}
}

// Deliver implements sim.Observer.
func (p *progress) Deliver(at time.Duration, _, _ actors.Address, _ actors.Message) {
	p.n++
	if p.n%progressEvery != 0 {
		return
	}
	_ = p.bar.Set64(int64(min(at, p.total) / time.Second))
}

// close finishes and clears the bar.
func (p *progress) close() { _ = p.bar.Finish() }
