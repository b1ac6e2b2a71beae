package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/batchd/batchd/scenarios"
	"github.com/batchd/batchd/sim/cluster"
)

// simClusterFlags are the flags of `batchd sim-cluster`, bound to a
// cluster.Config whose values are their defaults (the default cluster's,
// or a scenario's), so a flag given explicitly overrides the scenario.
type simClusterFlags struct {
	fs             *flag.FlagSet
	models, faults *string
	asJSON         *bool
}

func newSimClusterFlags(cfg *cluster.Config) *simClusterFlags {
	fs := flag.NewFlagSet("sim-cluster", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "nodes (named n000, n001, ...), each with a front, an accumulator and devices")
	fs.IntVar(&cfg.DevicesPerNode, "devices-per-node", cfg.DevicesPerNode, "devices on every node")
	fs.IntVar(&cfg.Devices, "devices", cfg.Devices, "the fleet's devices, dealt round-robin over the nodes, instead of --devices-per-node (0: per node)")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "offered load, requests per second, spread evenly over the fronts")
	f := &simClusterFlags{fs: fs}
	f.models = fs.String("models", strings.Join(cfg.Models, ","), "models the traffic asks for in equal shares, comma-separated")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "simulated time of arrivals")
	fs.DurationVar(&cfg.Drain, "drain", cfg.Drain, "simulated time after arrivals for everything to be answered")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "master seed: the same seed gives the same trace")
	fs.DurationVar(&cfg.Link.Latency, "link-latency", cfg.Link.Latency, "one-way delay of every link between nodes")
	fs.Float64Var(&cfg.Link.Loss, "link-loss", cfg.Link.Loss, "each message's chance of being lost, in [0, 1)")
	f.faults = fs.String("faults", "", "true events, comma-separated, instead of a scenario's: crash:NODE@T, restart:NODE@T, leave:NODE@T, partition:A|B@T1-T2, oneway:A|B@T1-T2 (A, B: nodes joined by +)")
	fs.BoolVar(&cfg.PerNode, "per-node", cfg.PerNode, "per-node batching: every front sends to its own node's accumulator")
	fs.BoolVar(&cfg.Split, "split", cfg.Split, "one accumulator per model on every node (devices claim the accumulators' offers); false: one accumulator per node for the models it owns")
	f.asJSON = fs.Bool("json", false, "print the report (with a scenario: the result, checks included) as JSON")
	return f
}

// runSimCluster is `batchd sim-cluster [SCENARIO] [flags]`: it simulates
// a cluster of nodes (sim/cluster) and prints its report; with a cluster
// scenario (a file or a built-in name, package scenarios) it starts from
// the scenario's configuration and checks its expectations. The exit
// status is 1 if the checker found a violation or an expectation failed.
func runSimCluster(args []string, stdout, stderr io.Writer) error {
	name, args := clusterScenarioArg(args)
	cfg := cluster.DefaultConfig()
	var sc *scenarios.ClusterScenario
	if name != "" {
		var err error
		if sc, err = scenarios.FindCluster(name); errors.Is(err, scenarios.ErrUnknown) {
			return usagef("unexpected argument %q: %w", name, err)
		} else if err != nil {
			return usageError{err}
		}
		if cfg, err = sc.ClusterConfig(sc.Seed); err != nil {
			return usageError{err}
		}
	}
	f := newSimClusterFlags(&cfg)
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: batchd sim-cluster [SCENARIO] [flags]\n\nSimulates a cluster: fronts, per-model accumulators and devices on every\nnode, membership as SWIM learns it, a seeded network; checks that every\nrequest a live front accepted is answered exactly once with its own output.\nSCENARIO is a cluster scenario file (YAML with a cluster: section) or a\nbuilt-in one (%s); it exits 1 if an expectation fails. Flags given\noverride the scenario.\n\n", strings.Join(scenarios.ClusterBuiltins(), ", "))
			f.fs.SetOutput(stdout)
			f.fs.PrintDefaults()
			return err
		}
		return usagef("%v (see 'batchd sim-cluster -h')", err)
	}
	if f.fs.NArg() > 0 {
		return usagef("unexpected argument %q (see 'batchd sim-cluster -h')", f.fs.Arg(0))
	}
	cfg.Models = strings.Split(*f.models, ",")
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if given["faults"] || sc == nil {
		var err error
		if cfg.Events, err = cluster.ParseFaults(*f.faults); err != nil {
			return usageError{fmt.Errorf("--faults: %w", err)}
		}
	}
	if given["devices-per-node"] && !given["devices"] {
		cfg.Devices = 0 // --devices-per-node replaces a scenario's fleet
	}
	if sc != nil {
		return runClusterScenario(sc, cfg, *f.asJSON, stdout)
	}
	rep, err := cluster.Run(cfg)
	if err != nil {
		return usageError{err}
	}
	if *f.asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		fmt.Fprint(stdout, rep.Summary())
	}
	if rep.ViolationCount > 0 || rep.Lost > 0 {
		return fmt.Errorf("sim-cluster: %d violations, %d lost", rep.ViolationCount, rep.Lost)
	}
	return nil
}

// runClusterScenario runs a cluster scenario's configuration (changed by
// the flags), prints the result and fails on a failed expectation.
func runClusterScenario(sc *scenarios.ClusterScenario, cfg cluster.Config, asJSON bool, stdout io.Writer) error {
	res, err := sc.RunConfig(cfg)
	if err != nil {
		return usageError{err}
	}
	if asJSON {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else if err := res.WriteTable(stdout); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if failures := res.Failures(); len(failures) > 0 {
		return fmt.Errorf("%w: cluster scenario %s: %d of %d expectations failed, or the checker found violations:\n  %s",
			errScenarioFailed, sc.Name, len(failures), len(res.Checks), strings.Join(failures, "\n  "))
	}
	return nil
}

// clusterScenarioArg splits a cluster scenario's name or file, the first
// argument that is not a flag, from the flags around it.
func clusterScenarioArg(args []string) (string, []string) {
	scratch := cluster.DefaultConfig()
	f := newSimClusterFlags(&scratch)
	if err := f.fs.Parse(args); err != nil || f.fs.NArg() == 0 {
		return "", args
	}
	rest := f.fs.Args()
	before := args[:len(args)-len(rest)]
	if n := len(before); n > 0 && before[n-1] == "--" {
		before = before[:n-1]
	}
	return rest[0], append(append([]string{}, before...), rest[1:]...)
}
