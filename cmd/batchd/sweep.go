package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"syscall"

	"github.com/batchd/batchd/sim"
	"github.com/batchd/batchd/sim/charts"
	"github.com/batchd/batchd/sim/sweep"
)

// sweepUsage is --sweep's help: what it varies, and what the two curves
// are and why those two.
const sweepUsage = `run the workload at every point of PARAM=FROM:TO:STEP and print the
throughput-latency curve (offered rate, throughput, p50/p95/p99, rejections)
next to the fleet's physical bound (capacity = devices x batch max / latency
of a full batch; the latency floor = one item alone on a free device).
PARAM is rate, devices, batch-max or linger (durations, e.g. linger=0ms:50ms:5ms);
at most 200 points, run in parallel on GOMAXPROCS workers, printed in order.
Two flush policies are compared, because the linger is the only flush setting
our batcher has (a batch leaves when full, when its oldest request has waited
the linger, or when a request's slack is used up): "derived", the batcher's
own linger (min of SLO - compute - margin and compute / devices), and
"eager", linger 0, dispatch as soon as a device is free: the least latency
at low load and the smallest batches, so the least capacity under load.
A linger sweep draws one curve. --policy (fair or slack) applies to both`

// simExtras are the `batchd sim` flags for sweeps, replays and plots.
type simExtras struct {
	sweep    string
	parallel int
	replay   string
	fleet    string
	out      string

	spec      sweep.Spec
	collector *charts.Collector
}

// bindSimExtras registers the flags on fs.
func bindSimExtras(fs *flag.FlagSet) *simExtras {
	x := &simExtras{}
	fs.StringVar(&x.sweep, "sweep", "", sweepUsage)
	fs.IntVar(&x.parallel, "sweep-parallel", 0, "with --sweep, runs at once (0: GOMAXPROCS)")
	fs.StringVar(&x.replay, "replay", "", "replay a recording of 'batchd serve --record FILE' (arrival times, tenants, models, versions, input lengths, and the inputs if recorded with --record-inputs) instead of generated traffic; the run lasts as long as the recording")
	fs.StringVar(&x.fleet, "fleet", "", "the fleet to try, as devices=N,latency=100ms,latency-per-item=1ms,batch-max=N (any of them; instead of --devices, --latency, --latency-per-item, --batch-max)")
	fs.StringVar(&x.out, "out", "", "write charts into this directory as PNG and SVG: latency CDF per tenant, latency and queue depth over time, batch sizes (with --sweep: the throughput-latency curves)")
	return x
}

// apply reads the recording and the fleet into cfg, checks the flags
// against each other, and with --out (and no sweep) adds the chart
// collector to cfg's observers. set holds the flags given explicitly.
func (x *simExtras) apply(cfg *sim.Config, set map[string]bool) error {
	if x.sweep != "" {
		sp, err := sweep.ParseSpec(x.sweep)
		if err != nil {
			return usagef("--sweep: %v", err)
		}
		x.spec = sp
	} else if set["sweep-parallel"] {
		return usagef("--sweep-parallel: needs --sweep")
	}
	if x.parallel < 0 {
		return usagef("--sweep-parallel %d: must not be negative", x.parallel)
	}
	if x.replay != "" {
		for _, f := range []string{"rate", "arrival", "duration"} {
			if set[f] {
				return usagef("--%s: a replay's arrivals and length are the recording's", f)
			}
		}
		if err := sim.LoadReplay(x.replay, cfg); err != nil {
			if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Op == "open" {
				return usagef("--replay: %w", err) // "open FILE: ..."
			}
			return usagef("--replay %w", err) // "FILE: replay: line N: ..."
		}
	}
	if x.fleet != "" {
		for _, f := range []string{"devices", "latency", "latency-per-item", "batch-max", "latency-table"} {
			if set[f] {
				return usagef("--%s and --fleet: give the fleet one way", f)
			}
		}
		if err := sweep.ParseFleet(x.fleet, cfg); err != nil {
			return usagef("--fleet %q: %w", x.fleet, err)
		}
	}
	if x.out != "" && x.sweep == "" {
		x.collector = charts.NewCollector(charts.BinFor(cfg.Duration), cfg.Batcher.BatchMax)
		cfg.Observers = append(cfg.Observers, x.collector)
	}
	return nil
}

// writeCharts writes a run's charts with --out and says where on stderr
// (stdout may be JSON).
func (x *simExtras) writeCharts(rep sim.Report, stderr io.Writer) error {
	if x.collector == nil {
		return nil
	}
	paths, err := charts.WriteRun(x.out, x.collector.Series(rep))
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %d chart files to %s\n", len(paths), x.out)
	return nil
}

// runSweep is `batchd sim --sweep`: cfg is the validated base workload.
func runSweep(cfg sim.Config, x *simExtras, asJSON bool, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	rs, err := sweep.Run(ctx, cfg, x.spec, sweep.Options{Parallel: x.parallel})
	if err != nil {
		if errors.Is(err, sweep.ErrSpec) {
			return usageError{err}
		}
		return err
	}
	if asJSON {
		if err := writeJSON(stdout, rs); err != nil {
			return fmt.Errorf("write sweep: %w", err)
		}
	} else if err := sweep.WriteTable(stdout, rs); err != nil {
		return fmt.Errorf("write sweep: %w", err)
	}
	if x.out != "" {
		paths, err := charts.WriteSweep(x.out, rs)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %d chart files to %s\n", len(paths), x.out)
	}
	var broken int64
	for _, r := range rs {
		broken += r.Violations
	}
	if broken > 0 {
		return fmt.Errorf("%w: %d violations over the sweep", sim.ErrViolations, broken)
	}
	return nil
}
