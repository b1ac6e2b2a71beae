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

	"github.com/batchd/batchd/engine/loadgen"
)

// runLoad is `batchd load`: flags map onto loadgen.Config, whose defaults
// are the flags' defaults.
func runLoad(args []string, stdout, stderr io.Writer) error {
	cfg := loadgen.DefaultConfig()
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.StringVar(&cfg.URL, "url", cfg.URL, "server base URL (loopback only, unless --allow-remote)")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", false, "allow a URL that is not a loopback address")
	fs.StringVar(&cfg.GRPC, "grpc", "", "send the load over gRPC to this host:port (batchd serve --grpc-addr): the OIP's ModelInfer, raw contents, instead of --url")
	fs.BoolVar(&cfg.GRPCStream, "grpc-stream", false, "with --grpc: send over ModelStreamInfer streams (4, many requests in flight on each) instead of unary calls")
	fs.IntVar(&cfg.GRPCConns, "grpc-conns", cfg.GRPCConns, "with --grpc: connections to spread the load over (round robin; with --grpc-stream, 4 streams on each)")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "model to call: POST URL/v1/models/MODEL/infer")
	fs.StringVar(&cfg.Version, "version", "", "model version to pin (default: the server routes)")
	fs.StringVar(&cfg.APIKey, "api-key", "", "bearer token (default: $BATCHD_KEY)")
	fs.IntVar(&cfg.TimeoutMs, "timeout-ms", 0, "the requests' own timeout_ms (0: the server's SLO)")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "open loop: requests per second")
	arrival := fs.String("arrival", cfg.Arrival.String(), "open loop: arrival process, poisson or fixed")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, fmt.Sprintf("how long to send (at most %v)", loadgen.DurationMax))
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "first part of --duration that is sent but not counted")
	fs.IntVar(&cfg.InFlightMax, "in-flight-max", cfg.InFlightMax, fmt.Sprintf("open loop: most requests in flight (at most %d); later ones wait, and their wait counts", loadgen.InFlightMaxMax))
	fs.IntVar(&cfg.Connections, "connections", 0, fmt.Sprintf("closed loop: this many connections send as fast as answered (at most %d); 0: open loop", loadgen.ConnectionsMax))
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "client-side bound on one request")
	fs.IntVar(&cfg.InputLen, "input-len", cfg.InputLen, "bytes per input")
	fs.BoolVar(&cfg.Check, "check", cfg.Check, "check each output against the emulated backend's function of its input")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the Poisson arrivals")
	fs.DurationVar(&cfg.Interval, "interval", cfg.Interval, "width of the time series in --json")
	fs.IntVar(&cfg.RSSPID, "rss-pid", 0, "sample this process's resident memory and CPU time (/proc/PID) every --interval")
	fs.DurationVar(&cfg.SlowOver, "slow-over", 0, "split the time of the 200s slower than this (send lag, server, trip, read) in a row of its own; it reads each 200's own timeline, with or without --check")
	fs.IntVar(&cfg.IdleConns, "idle-conns", 0, fmt.Sprintf("open this many more kept-alive connections before the run (one request each, not counted) and hold them idle to its end (at most %d)", loadgen.ConnectionsMax))
	asJSON := fs.Bool("json", false, "print the report as JSON instead of a table")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the generator's run to this file (go tool pprof)")
	// Hidden: the engine-overhead yardstick (see loadgen.Baseline), and with
	// a wait, the same holding every answer until the next tick of that
	// period (loadgen.WaitingBaseline).
	baseline := fs.String("baseline-server", "", "")
	baselineWait := fs.Duration("baseline-wait", 0, "")

	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			loadUsage(stdout, fs)
			return err
		}
		return usagef("%v (see 'batchd load -h')", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (see 'batchd load -h')", fs.Arg(0))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *baseline != "" {
		if *baselineWait < 0 {
			return usagef("--baseline-wait %v: must not be negative", *baselineWait)
		}
		return loadgen.ServeBaseline(ctx, *baseline, *baselineWait, stdout)
	}
	a, err := loadgen.ParseArrival(*arrival)
	if err != nil {
		return usagef("--arrival: %v", err)
	}
	cfg.Arrival = a
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv("BATCHD_KEY")
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	// A Ctrl-C stops the sending and still prints what was measured; a
	// second one ends the process.
	context.AfterFunc(ctx, stop)
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	rep, err := loadgen.Run(ctx, cfg)
	stopProfile()
	if err != nil {
		return err
	}
	if *asJSON {
		if err := writeJSON(stdout, rep); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		return nil
	}
	return rep.WriteTable(stdout)
}

func loadUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: batchd load [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Sends POST /v1/models/MODEL/infer to a batchd server and reports latency")
	fmt.Fprintln(w, "percentiles (HdrHistogram), status codes and throughput.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Open loop (default): requests are due at --rate per second, fixed or Poisson,")
	fmt.Fprintln(w, "whether or not earlier ones were answered, and each one's latency is measured")
	fmt.Fprintln(w, "from when it was due, so a queue cannot hide (no coordinated omission).")
	fmt.Fprintln(w, "Closed loop (--connections N): N connections send as fast as they are")
	fmt.Fprintln(w, "answered, to find the saturation throughput.")
	fmt.Fprintln(w)
	printVisible(w, fs)
}

// printVisible is fs.PrintDefaults without the flags that have no usage.
func printVisible(w io.Writer, fs *flag.FlagSet) {
	vis := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage != "" {
			vis.Var(f.Value, f.Name, f.Usage)
		}
	})
	vis.SetOutput(w)
	vis.PrintDefaults()
}
