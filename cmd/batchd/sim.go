package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
)

// runSim is `batchd sim`: flags map onto sim.Config, whose defaults (the
// seeds' reference workload) are the flags' defaults, so the two cannot
// drift apart.
func runSim(args []string, stdout, stderr io.Writer) error {
	cfg := sim.DefaultConfig()
	// An experiment replaces the defaults, so it is read before the flags
	// that take their defaults from cfg; flags given explicitly still
	// override it.
	experiment := experimentArg(args)
	if experiment != "" {
		var ok bool
		if cfg, ok = sim.Experiment(experiment); !ok {
			return usagef("--experiment %q: want one of %s", experiment, strings.Join(sim.Experiments(), ", "))
		}
	}
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.String("experiment", experiment, "start from a named experiment of issue 3 instead of the reference workload: "+strings.Join(sim.Experiments(), ", "))
	policy := fs.String("policy", policyName(cfg.Batcher.KeyPolicy), "which due key a free device serves: fair or slack")
	fs.BoolVar(&cfg.Batcher.BucketMerge, "bucket-merge", cfg.Batcher.BucketMerge, "let a due batch take requests of shorter length buckets of its model version")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "offered load, requests per simulated second")
	fs.IntVar(&cfg.Devices, "devices", cfg.Devices, "number of emulated GPUs")
	fs.IntVar(&cfg.Batcher.BatchMax, "batch-max", cfg.Batcher.BatchMax, "most items in one batch")
	latency := fs.Duration("latency", cfg.Latency.Base, "fixed device time per batch")
	perItem := fs.Duration("latency-per-item", 0, "with --latency, an affine cost: latency + per-item time x batch size")
	table := fs.String("latency-table", "", "a measured profile file of batch_size,latency lines (replaces --latency)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "safety phase (traffic, faults) in simulated time")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "master seed")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of a table")
	fs.DurationVar(&cfg.Batcher.SLO, "slo", cfg.Batcher.SLO, "latency target of requests without their own deadline")
	arrival := fs.String("arrival", cfg.Traffic.Arrival.String(), "arrival process: poisson or constant")
	fs.DurationVar(&cfg.NetDelay, "net-delay", cfg.NetDelay, "delivery delay of every message between actors")
	fs.DurationVar(&cfg.DrainMax, "drain-max", cfg.DrainMax, "bound on the liveness phase (drain) in simulated time")
	fs.Float64Var(&cfg.Faults.CrashRate, "crash-rate", 0, "probability that a batch crashes its device")
	fs.Float64Var(&cfg.Faults.HangRate, "hang-rate", 0, "probability that a batch hangs its device")
	fs.Float64Var(&cfg.Faults.BatchErrorRate, "batch-error-rate", 0, "probability that a batch fails as a whole")
	fs.Float64Var(&cfg.Faults.ItemErrorRate, "item-error-rate", 0, "probability that one item fails on its own")
	fs.Float64Var(&cfg.Faults.SlowRate, "slow-rate", 0, "probability that a batch runs slow")
	slowFactor := fs.Float64("slow-factor", 4, "latency multiple of a slow batch")
	extras := bindSimExtras(fs) // --sweep, --replay, --fleet, --out (sweep.go)

	// The flag package's own messages are replaced by one line and a hint,
	// so an error is not buried under the list of flags.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "usage: batchd sim [flags]")
			fmt.Fprintln(stdout)
			fmt.Fprintln(stdout, "Simulates traffic into the batching actors on emulated GPUs and reports")
			fmt.Fprintln(stdout, "latency, throughput and every invariant the request ledger checks.")
			fmt.Fprintln(stdout, "Exits 1 if an invariant broke or a request was lost or answered twice.")
			fmt.Fprintln(stdout)
			fs.PrintDefaults()
			return err
		}
		return usagef("%v (see 'batchd sim -h')", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (see 'batchd sim -h')", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["latency"] || experiment == "" {
		cfg.Latency = actors.FixedLatency(*latency)
		cfg.Latency.PerItem = *perItem
	}
	if *table != "" {
		data, err := os.ReadFile(*table)
		if err != nil {
			return usageError{fmt.Errorf("--latency-table: %w", err)}
		}
		if cfg.Latency, err = actors.ParseLatencyTable(data); err != nil {
			return usageError{fmt.Errorf("--latency-table %s: %w", *table, err)}
		}
	}
	if set["rate"] && len(cfg.Sources) > 0 {
		return usagef("--rate: experiment %q has traffic sources with rates of their own", experiment)
	}
	switch *policy {
	case "fair":
		cfg.Batcher.KeyPolicy = actors.PolicyFair
	case "slack":
		cfg.Batcher.KeyPolicy = actors.PolicySlack
	default:
		return usagef("--policy %q: want fair or slack", *policy)
	}
	if cfg.Faults.SlowRate > 0 {
		cfg.Faults.SlowFactor = *slowFactor
	}
	switch *arrival {
	case "poisson":
		cfg.Traffic.Arrival = sim.Poisson
	case "constant":
		cfg.Traffic.Arrival = sim.Constant
	default:
		return usagef("--arrival %q: want poisson or constant", *arrival)
	}
	if set["arrival"] {
		for i := range cfg.Sources {
			cfg.Sources[i].Arrival = cfg.Traffic.Arrival
		}
	}
	if err := extras.apply(&cfg, set); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}

	debug.SetGCPercent(sim.GCPercent)
	if extras.sweep != "" {
		return runSweep(cfg, extras, *asJSON, stdout, stderr)
	}
	rep, err := sim.Run(cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	} else if err := rep.WriteTable(stdout); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := extras.writeCharts(rep, stderr); err != nil {
		return err
	}
	return rep.Check()
}

// experimentArg returns the value of --experiment in args, or "" (the
// flag package then parses and checks it like the others).
func experimentArg(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "experiment" {
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

func policyName(p actors.KeyPolicy) string {
	if p == actors.PolicySlack {
		return "slack"
	}
	return "fair"
}
