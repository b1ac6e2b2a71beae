package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/batchd/batchd/engine/fidelity"
)

// fidelityOptions is `batchd fidelity`'s command line: one workload, run
// live and in the simulator.
type fidelityOptions struct {
	cfg    fidelity.Config
	asJSON bool
	// nodes, past 1, runs the workload on a cluster of that many nodes of
	// cfg.Devices devices each (fidelity.RunCluster).
	nodes       int
	linkLatency time.Duration
}

func parseFidelity(args []string, stdout io.Writer) (fidelityOptions, error) {
	o := fidelityOptions{cfg: fidelity.DefaultConfig()}
	c := &o.cfg
	fs := flag.NewFlagSet("fidelity", flag.ContinueOnError)
	fs.StringVar(&c.ServeConfig, "config", fidelity.EmbeddedConfig, "the serve configuration both sides run (the flags below applied over it): a file, or '"+fidelity.EmbeddedConfig+"', the embedded default; the simulated side is what 'batchd sim --config' builds from it")
	fs.Float64Var(&c.RateRPS, "rate", c.RateRPS, "offered load, requests per second (Poisson), live and simulated")
	fs.IntVar(&c.Devices, "devices", c.Devices, "emulated devices")
	fs.DurationVar(&c.Latency, "latency", c.Latency, "fixed time per batch (a real sleep live)")
	fs.IntVar(&c.BatchMax, "batch-max", c.BatchMax, "most items in one batch")
	fs.DurationVar(&c.SLO, "slo", c.SLO, "latency target")
	fs.DurationVar(&c.Duration, "duration", c.Duration, fmt.Sprintf("how long requests are sent (at most %v)", fidelity.DurationMax))
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "first part of --duration left out of both sides' figures")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the live arrivals and of the simulation")
	fs.Float64Var(&c.CrashRate, "crash-rate", c.CrashRate, "probability that a batch crashes its device, live and simulated (one device model)")
	fs.IntVar(&c.InputLen, "input-len", c.InputLen, "bytes per input")
	netDelay := fs.String("net-delay", "auto", "the simulator's delay per message hop; auto: half the live run's mean HTTP overhead (client latency - server latency), as a lingering request pays two hops (dispatch, reply; the submit hop falls inside a linger counted from arrival)")
	fs.Float64Var(&c.TargetPct, "target", c.TargetPct, "allowed relative error at p50/p95/p99, percent; exit 1 past it")
	fs.StringVar(&c.Server, "server", "", "the batchd binary to serve with (default: this one)")
	fs.BoolVar(&o.asJSON, "json", false, "print the comparison as JSON")
	fs.IntVar(&o.nodes, "nodes", 1, fmt.Sprintf("nodes: past 1 (at most %d), a live cluster of that many batchd serve nodes of --devices each (the load spread evenly over their fronts) against the cluster simulator (sim/cluster); the embedded serve configuration, no faults", fidelity.ClusterNodesMax))
	fs.DurationVar(&o.linkLatency, "link-latency", fidelity.DefaultClusterConfig().LinkLatency, "with --nodes: the simulated one-way delay between two nodes")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fidelityUsage(stdout, fs)
			return o, err
		}
		return o, usagef("%v (see 'batchd fidelity -h')", err)
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q (see 'batchd fidelity -h')", fs.Arg(0))
	}
	if *netDelay == "auto" {
		c.NetDelay = -1
	} else {
		d, err := time.ParseDuration(*netDelay)
		if err != nil || d < 0 {
			return o, usagef("--net-delay %q: want auto or a duration >= 0", *netDelay)
		}
		c.NetDelay = d
	}
	switch {
	case !(c.RateRPS > 0 && c.RateRPS <= fidelity.RateMax):
		return o, usagef("--rate %v: need more than 0 and at most %d", c.RateRPS, fidelity.RateMax)
	case c.Devices < 1 || c.Devices > fidelity.DevicesMax:
		return o, usagef("--devices %d: need 1 to %d", c.Devices, fidelity.DevicesMax)
	case c.Latency <= 0 || c.SLO <= 0:
		return o, usagef("--latency and --slo must be positive")
	case c.BatchMax < 1:
		return o, usagef("--batch-max %d: must be positive", c.BatchMax)
	case c.Duration <= 0 || c.Duration > fidelity.DurationMax:
		return o, usagef("--duration %v: need more than 0 and at most %v", c.Duration, fidelity.DurationMax)
	case c.Warmup < 0 || c.Warmup >= c.Duration:
		return o, usagef("--warmup %v: need 0 <= warmup < duration", c.Warmup)
	case c.InputLen < 1 || c.InputLen > fidelity.InputLenMax:
		return o, usagef("--input-len %d: need 1 to %d", c.InputLen, fidelity.InputLenMax)
	case !(c.CrashRate >= 0 && c.CrashRate < 1):
		return o, usagef("--crash-rate %v: must be in [0, 1)", c.CrashRate)
	case !(c.TargetPct > 0):
		return o, usagef("--target %v: must be positive", c.TargetPct)
	case o.nodes < 1 || o.nodes > fidelity.ClusterNodesMax:
		return o, usagef("--nodes %d: need 1 to %d", o.nodes, fidelity.ClusterNodesMax)
	case o.nodes > 1 && c.CrashRate != 0:
		return o, usagef("--nodes %d with --crash-rate: the cluster run is fault-free", o.nodes)
	case o.nodes > 1 && c.ServeConfig != fidelity.EmbeddedConfig && c.ServeConfig != "":
		return o, usagef("--nodes %d with --config %s: the cluster run serves the embedded configuration", o.nodes, c.ServeConfig)
	case o.linkLatency < 0:
		return o, usagef("--link-latency %v: must not be negative", o.linkLatency)
	}
	return o, nil
}

func fidelityUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: batchd fidelity [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Runs one workload twice and compares: live (a 'batchd serve' process with")
	fmt.Fprintln(w, "emulated devices that really sleep, real HTTP on loopback, the open-loop")
	fmt.Fprintln(w, "generator of 'batchd load' measuring each request from its intended send")
	fmt.Fprintln(w, "time) and in the simulator (same rate, Poisson arrivals, devices, batch max,")
	fmt.Fprintln(w, "latency, SLO and duration). The warm-up is left out of both. It prints")
	fmt.Fprintln(w, "p50/p95/p99 of completed requests and their throughput on each side, and the")
	fmt.Fprintln(w, "simulator's relative error against live; exit 1 if a percentile is off by")
	fmt.Fprintln(w, "more than --target percent. It takes --duration of real time and more.")
	fmt.Fprintln(w, "With --nodes N (2 or more) the live side is N batchd serve nodes of --devices")
	fmt.Fprintln(w, "each that batch together on loopback, the load spread over their fronts, and")
	fmt.Fprintln(w, "the simulated side the cluster simulator; it prints all requests and each")
	fmt.Fprintln(w, "front (the model's owner's and the others') side by side.")
	fmt.Fprintln(w)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// runFidelity is `batchd fidelity`.
func runFidelity(args []string, stdout, stderr io.Writer) error {
	o, err := parseFidelity(args, stdout)
	if err != nil {
		return err
	}
	if o.cfg.Server == "" {
		if o.cfg.Server, err = os.Executable(); err != nil {
			return fmt.Errorf("find own binary: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if o.nodes > 1 {
		return runFidelityCluster(ctx, o, stdout, stderr)
	}
	res, err := fidelity.Run(ctx, o.cfg, stderr)
	if err != nil {
		return err
	}
	return writeFidelity(res, res.Pass, o, "a percentile", stdout)
}

// writeFidelity prints a fidelity result as a table, or as JSON, and fails
// when it did not pass: of is what was off ("a percentile").
func writeFidelity(res interface{ WriteTable(io.Writer) error }, pass bool, o fidelityOptions, of string, stdout io.Writer) error {
	if o.asJSON {
		if err := writeJSON(stdout, res); err != nil {
			return fmt.Errorf("write fidelity: %w", err)
		}
	} else if err := res.WriteTable(stdout); err != nil {
		return fmt.Errorf("write fidelity: %w", err)
	}
	if !pass {
		return fmt.Errorf("%s is off by more than %g%%", of, o.cfg.TargetPct)
	}
	return nil
}

// runFidelityCluster is `batchd fidelity --nodes N`.
func runFidelityCluster(ctx context.Context, o fidelityOptions, stdout, stderr io.Writer) error {
	cfg := fidelity.ClusterConfig{Config: o.cfg, Nodes: o.nodes, LinkLatency: o.linkLatency}
	res, err := fidelity.RunCluster(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	return writeFidelity(res, res.Pass, o, "a percentile over the cluster's requests", stdout)
}
