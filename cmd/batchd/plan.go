package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/fidelity"
	"github.com/batchd/batchd/scenarios"
	"github.com/batchd/batchd/sim"
	"github.com/batchd/batchd/sim/plan"
)

// runPlan is `batchd plan`: the formula's fleet beside the smallest one
// the simulator shows holding the p95 target (sim/plan). The server is
// the flags' (--latency, --batch-max, --slo-p95), or a serve config's,
// with a scenario's traffic mix if one is given; flags given explicitly
// override the config and the scenario.
func runPlan(args []string, stdout, stderr io.Writer) error {
	def, opts := sim.DefaultConfig(), plan.DefaultOptions()
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Float64Var(&opts.RPS, "rps", opts.RPS, "steady offered rate, requests per second (a scenario's traffic mix is scaled to it)")
	latency := fs.Duration("latency", def.Latency.Base, "fixed device time per batch")
	batchMax := fs.Int("batch-max", def.Batcher.BatchMax, "most items in one batch")
	slo := fs.Duration("slo-p95", def.Batcher.SLO, "p95 latency target, and the batcher's SLO (a model with its own SLO is held to it)")
	fs.Float64Var(&opts.Headroom, "headroom", opts.Headroom, "utilisation the formula leaves the devices at: devices / headroom")
	configArg := fs.String("config", "", "plan for the server 'batchd serve --config FILE' runs (its policy, models, tenants, latency model; no faults); '"+fidelity.EmbeddedConfig+"': the embedded one")
	scenarioArg := fs.String("scenario", "", "a scenario (file or built-in name) whose traffic mix, server and fault rates to plan for")
	seed := fs.Uint64("seed", def.Seed, "master seed of every probe (a scenario's own by default)")
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	fs.DurationVar(&opts.Warmup, "warmup", opts.Warmup, "simulated time before each probe's measured window")
	fs.DurationVar(&opts.Measure, "measure", opts.Measure, "each probe's measured window in simulated time")
	fs.Float64Var(&opts.UnservedMax, "unserved-max", opts.UnservedMax, "most a fleet that holds may leave rejected, expired or failed (fraction of requests)")
	fs.IntVar(&opts.DevicesMax, "devices-max", opts.DevicesMax, "largest fleet tried")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "usage: batchd plan [flags]\n\nPrints the formula's fleet, devices = ceil(rps × latency / batch) and with\nheadroom, beside the smallest fleet the simulator shows holding the p95\ntarget at that rate, and why they differ.")
			fs.PrintDefaults()
			return err
		}
		return usagef("%v (see 'batchd plan -h')", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (see 'batchd plan -h')", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })

	cfg := def
	cfg.Seed = *seed
	if *scenarioArg != "" {
		sc, err := scenarios.Find(*scenarioArg)
		if err != nil {
			return usageError{fmt.Errorf("--scenario: %w", err)}
		}
		if !set["seed"] {
			cfg.Seed = sc.Seed
		}
		if cfg, err = sc.SimConfig(cfg.Seed); err != nil {
			return usageError{fmt.Errorf("--scenario: %w", err)}
		}
	}
	if *configArg != "" {
		f, err := fidelity.LoadServeConfig(*configArg)
		if err == nil {
			err = fidelity.SimServer(&cfg, f, false)
		}
		if err != nil {
			return usageError{fmt.Errorf("--config %s: %w", *configArg, err)}
		}
	}
	based := *scenarioArg != "" || *configArg != ""
	if set["latency"] || !based {
		cfg.Latency = actors.FixedLatency(*latency)
		cfg.Batcher.Latency, cfg.Device.Latency = actors.LatencyModel{}, actors.LatencyModel{}
	}
	if set["batch-max"] || !based {
		cfg.Batcher.BatchMax = *batchMax
	}
	if set["slo-p95"] || !based {
		cfg.Batcher.SLO = *slo
		cfg.Batcher.TimeoutMax = max(cfg.Batcher.TimeoutMax, *slo)
	}

	debug.SetGCPercent(sim.GCPercent)
	start := time.Now()
	res, err := plan.Plan(cfg, opts)
	if errors.Is(err, plan.ErrInvalid) {
		return usageError{err}
	} else if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, res)
	}
	if err := res.WriteText(stdout); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	fmt.Fprintf(stderr, "%d probes in %.1fs\n", len(res.Probes), time.Since(start).Seconds())
	return nil
}
