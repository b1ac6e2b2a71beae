package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/batchd/batchd/sim/cluster"
)

// runSimCluster simulates a cluster of nodes (sim/cluster) and prints its
// report; the exit status is 1 if the checker found a violation.
func runSimCluster(args []string, stdout, stderr io.Writer) error {
	cfg := cluster.DefaultConfig()
	fs := flag.NewFlagSet("sim-cluster", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "nodes (named n000, n001, ...), each with a front, an accumulator and devices")
	fs.IntVar(&cfg.DevicesPerNode, "devices-per-node", cfg.DevicesPerNode, "devices on every node")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "offered load, requests per second, spread evenly over the fronts")
	models := fs.String("models", strings.Join(cfg.Models, ","), "models the traffic asks for in equal shares, comma-separated")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "simulated time of arrivals")
	fs.DurationVar(&cfg.Drain, "drain", cfg.Drain, "simulated time after arrivals for everything to be answered")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "master seed: the same seed gives the same trace")
	fs.DurationVar(&cfg.Link.Latency, "link-latency", cfg.Link.Latency, "one-way delay of every link between nodes")
	fs.Float64Var(&cfg.Link.Loss, "link-loss", cfg.Link.Loss, "each message's chance of being lost, in [0, 1)")
	faults := fs.String("faults", "", "true events, comma-separated: crash:NODE@T, restart:NODE@T, leave:NODE@T, partition:A|B@T1-T2, oneway:A|B@T1-T2 (A, B: nodes joined by +)")
	fs.BoolVar(&cfg.PerNode, "per-node", false, "per-node batching: every front sends to its own node's accumulator")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: batchd sim-cluster [flags]\n\nSimulates a cluster: fronts, per-model accumulators and devices on every\nnode, membership as SWIM learns it, a seeded network; checks that every\nrequest a live front accepted is answered exactly once with its own output.")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return err
		}
		return usagef("%v (see 'batchd sim-cluster -h')", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (see 'batchd sim-cluster -h')", fs.Arg(0))
	}
	cfg.Models = strings.Split(*models, ",")
	var err error
	if cfg.Events, err = cluster.ParseFaults(*faults); err != nil {
		return usageError{fmt.Errorf("--faults: %w", err)}
	}
	rep, err := cluster.Run(cfg)
	if err != nil {
		return usageError{err}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
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
