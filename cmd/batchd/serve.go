package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/record"
	"github.com/batchd/batchd/engine/server"
)

// serveOptions is `batchd serve`'s command line: the configuration (file,
// then flags over it) and what the command itself does.
type serveOptions struct {
	file        *config.File
	printConfig bool
	logLevel    slog.Level
	// record is --record and its companions (bindRecord).
	record server.RecordOptions
	// cpuProfile is --cpuprofile: a file to write a CPU profile of the
	// whole run to (go tool pprof), for finding where a request's CPU goes.
	cpuProfile string
}

// serveFlag is a flag that overrides one key of the configuration file.
type serveFlag struct {
	name, path, usage string
	// bind registers the flag on fs with the file's default as its
	// default; set copies the parsed value into f.
	bind func(fs *flag.FlagSet, name, usage string, f *config.File) (set func(f *config.File))
}

// fileFlag binds a flag that define (a FlagSet method: Int, Duration,
// ...) registers, to the key of the file that get points at.
func fileFlag[T any](define func(*flag.FlagSet, string, T, string) *T, get func(*config.File) *T) func(*flag.FlagSet, string, string, *config.File) func(*config.File) {
	return func(fs *flag.FlagSet, name, usage string, d *config.File) func(*config.File) {
		v := define(fs, name, *get(d), usage)
		return func(f *config.File) { *get(f) = *v }
	}
}

// serveFlags are the common settings; everything else is in the file.
// Their defaults shown by --help are the embedded file's.
var serveFlags = []serveFlag{
	{"addr", "http.addr", "listen address (host:port; port 0 picks a free one)",
		fileFlag((*flag.FlagSet).String, func(f *config.File) *string { return &f.HTTP.Addr })},
	{"grpc-addr", "grpc.addr", "gRPC listen address of the Open Inference Protocol (host:port; port 0 picks a free one; empty: no gRPC)",
		fileFlag((*flag.FlagSet).String, func(f *config.File) *string { return &f.GRPC.Addr })},
	{"backend", "devices.backend", "what runs the batches: emulated (batchstring), cpu or cuda (the bytenet model; cuda: every visible GPU), or worker (--worker-cmd)",
		fileFlag((*flag.FlagSet).String, func(f *config.File) *string { return &f.Devices.Backend })},
	{"worker-cmd", "devices.worker.cmd", "with --backend worker: the program each device runs, and its arguments, split at spaces (\"python3 model.py\"; an argument with a space needs the file)",
		func(fs *flag.FlagSet, name, usage string, d *config.File) func(*config.File) {
			v := fs.String(name, strings.Join(d.Devices.Worker.Cmd, " "), usage)
			return func(f *config.File) { f.Devices.Worker.Cmd = strings.Fields(*v) }
		}},
	{"node", "cluster.node", "this node's name in a cluster of batchd nodes (empty: a single node)",
		fileFlag((*flag.FlagSet).String, func(f *config.File) *string { return &f.Cluster.Node })},
	{"join", "cluster.join", "with --node: members to join, host:port or DNS names, comma-separated",
		func(fs *flag.FlagSet, name, usage string, d *config.File) func(*config.File) {
			v := fs.String(name, strings.Join(d.Cluster.Join, ","), usage)
			return func(f *config.File) {
				f.Cluster.Join = strings.FieldsFunc(*v, func(r rune) bool { return r == ',' || r == ' ' })
			}
		}},
	{"cluster-bind", "cluster.bind", "with --node: where the node gossips (host:port, UDP and TCP; port 0 picks a free one)",
		fileFlag((*flag.FlagSet).String, func(f *config.File) *string { return &f.Cluster.Bind })},
	{"data-addr", "cluster.data_addr", "with --node: where the node's data plane listens (host:port; needs cluster.secret_key_env): the engine batches each model at its owner across nodes (empty: membership only)",
		fileFlag((*flag.FlagSet).String, func(f *config.File) *string { return &f.Cluster.DataAddr })},
	{"cuda-graphs", "devices.cuda_graphs", "with --backend cuda: run each batch's kernels as one CUDA graph launch",
		fileFlag((*flag.FlagSet).Bool, func(f *config.File) *bool { return &f.Devices.CUDAGraphs })},
	{"park-after", "http.park_after", "with the fast lane: a kept-alive connection idle this long (up to twice as long) gives up its goroutine and read buffer until its client sends again (0: never)",
		fileFlag((*flag.FlagSet).Duration, func(f *config.File) *time.Duration { return &f.HTTP.ParkAfter })},
	{"cuda-wait-sleep", "devices.cuda_wait_sleep", "with --backend cuda: a batch's wait for the GPU sleeps most of it (keeping its processor) instead of polling it all, and the process gets one more GOMAXPROCS a GPU",
		fileFlag((*flag.FlagSet).Bool, func(f *config.File) *bool { return &f.Devices.CUDAWaitSleep })},
	{"ask-ahead", "devices.ask_ahead", "a device takes its next batch while one runs, a full one at once and a partial one this long before the running one's predicted end, and starts it as soon as that one ends: the hand-over to hide, e.g. 200us (0: once idle)",
		fileFlag((*flag.FlagSet).Duration, func(f *config.File) *time.Duration { return &f.Devices.AskAhead })},
	{"devices", "devices.count", "number of emulated GPUs",
		fileFlag((*flag.FlagSet).Int, func(f *config.File) *int { return &f.Devices.Count })},
	{"latency", "devices.latency", "fixed emulated time per batch (replaces the file's latency_model)",
		func(fs *flag.FlagSet, name, usage string, d *config.File) func(*config.File) {
			v := fs.Duration(name, d.Devices.Latency, usage)
			return func(f *config.File) { f.Devices.Latency, f.Devices.LatencyModel = *v, nil }
		}},
	{"batch-max", "policy.batch_max", "most items in one batch",
		fileFlag((*flag.FlagSet).Int, func(f *config.File) *int { return &f.Policy.BatchMax })},
	{"slo", "policy.slo", "latency target of requests without their own timeout_ms",
		fileFlag((*flag.FlagSet).Duration, func(f *config.File) *time.Duration { return &f.Policy.SLO })},
	{"queue-max", "policy.queue_max", "items queued under one key (model, version, bucket)",
		fileFlag((*flag.FlagSet).Int, func(f *config.File) *int { return &f.Policy.QueueMax })},
	{"key-policy", "policy.key_policy", "which due queue a free device serves: fair or slack",
		fileFlag((*flag.FlagSet).String, func(f *config.File) *string { return &f.Policy.KeyPolicy })},
	{"crash-rate", "devices.faults.crash_rate", "probability that a batch crashes its device (demos)",
		fileFlag((*flag.FlagSet).Float64, func(f *config.File) *float64 { return &f.Devices.Faults.CrashRate })},
	{"hang-rate", "devices.faults.hang_rate", "probability that a batch hangs its device (demos)",
		fileFlag((*flag.FlagSet).Float64, func(f *config.File) *float64 { return &f.Devices.Faults.HangRate })},
	{"shutdown-timeout", "http.shutdown_timeout", "bound on the graceful stop after SIGTERM or SIGINT",
		fileFlag((*flag.FlagSet).Duration, func(f *config.File) *time.Duration { return &f.HTTP.ShutdownTimeout })},
	{"data-dir", "jobs.dir", "directory of the durable job store jobs.db (empty: $XDG_STATE_HOME/batchd, else ~/.local/state/batchd)",
		fileFlag((*flag.FlagSet).String, func(f *config.File) *string { return &f.Jobs.Dir })},
	{"seed", "engine.seed", "seed of the actors' and emulated backends' random streams",
		fileFlag((*flag.FlagSet).Uint64, func(f *config.File) *uint64 { return &f.Engine.Seed })},
}

// parseServe reads the command line: the file (--config, or the embedded
// default), then the flags the user set over it, then validates.
func parseServe(args []string, stdout io.Writer) (serveOptions, error) {
	// Defaults shown in --help are the embedded file's; a --config file's
	// own values win over them unless the flag is given.
	embedded, err := config.LoadEmbedded()
	if err != nil {
		return serveOptions{}, fmt.Errorf("embedded config: %w", err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := fs.String("config", "", "YAML configuration file (default: the embedded one, see --print-config)")
	printConfig := fs.Bool("print-config", false, "print the effective configuration (file and flags) as YAML and exit")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof), until the server stops")
	latencyTable := fs.String("latency-table", "", "a measured batch-latency table (batchd profile --out FILE) the devices' cost model plans with, in place of devices.latency and latency_model")
	var rec server.RecordOptions
	bindRecord(fs, &rec)
	setters := map[string]func(*config.File){}
	for _, sf := range serveFlags {
		setters[sf.name] = sf.bind(fs, sf.name, sf.usage+" ["+sf.path+"]", embedded)
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			serveUsage(stdout, fs)
			return serveOptions{}, err
		}
		return serveOptions{}, usagef("%v (see 'batchd serve -h')", err)
	}
	if fs.NArg() > 0 {
		return serveOptions{}, usagef("unexpected argument %q (see 'batchd serve -h')", fs.Arg(0))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return serveOptions{}, usagef("--log-level %q: want debug, info, warn or error", *logLevel)
	}

	f := embedded
	if *path != "" {
		data, err := os.ReadFile(*path)
		if err != nil {
			return serveOptions{}, usagef("--config: %w", err)
		}
		if f, err = config.Decode(*path, data); err != nil {
			return serveOptions{}, usageError{err}
		}
	}
	byPath := map[string]string{}
	for _, sf := range serveFlags {
		byPath[sf.name] = sf.path
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) {
		given[fl.Name] = true
		if set := setters[fl.Name]; set != nil {
			set(f)
			f.SetBy(byPath[fl.Name], "--"+fl.Name)
		}
	})
	if *latencyTable != "" {
		if given["latency"] {
			return serveOptions{}, usagef("--latency-table and --latency: give one")
		}
		data, err := os.ReadFile(*latencyTable)
		if err != nil {
			return serveOptions{}, usagef("--latency-table: %w", err)
		}
		m, err := actors.ParseLatencyTable(data)
		if err != nil {
			return serveOptions{}, usagef("--latency-table %s: %w", *latencyTable, err)
		}
		f.SetLatencyTable(m, "--latency-table")
	}
	if err := f.Validate(); err != nil {
		return serveOptions{}, usageError{err}
	}
	if err := checkRecord(rec); err != nil {
		return serveOptions{}, err
	}
	return serveOptions{file: f, printConfig: *printConfig, logLevel: lvl, record: rec, cpuProfile: *cpuProfile}, nil
}

func serveUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: batchd serve [--config FILE] [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Serves inference over HTTP: requests are batched by the actors, run on")
	fmt.Fprintln(w, "emulated GPUs, and answered one by one. Without --config it serves the")
	fmt.Fprintln(w, "embedded default (4 devices at 100 ms, batches of up to 100, model \"echo\",")
	fmt.Fprintln(w, "127.0.0.1:8080). Flags override the file; the key each sets is in brackets.")
	fmt.Fprintln(w, "SIGTERM or SIGINT stops it gracefully: no new work is admitted, queued work")
	fmt.Fprintln(w, "is flushed and every request in flight is answered, within --shutdown-timeout;")
	fmt.Fprintln(w, "a second signal exits at once.")
	fmt.Fprintln(w)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// runServe is `batchd serve`.
func runServe(args []string, stdout, stderr io.Writer) error {
	opts, err := parseServe(args, stdout)
	if err != nil {
		return err
	}
	if opts.printConfig {
		out, err := opts.file.Marshal()
		if err != nil {
			return err
		}
		_, err = stdout.Write(out)
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: opts.logLevel}))
	server.ApplyGC(opts.file.Process, os.Getenv, log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// After the first signal the default action is back, so a second one
	// ends the process at once.
	context.AfterFunc(ctx, stop)
	stopProfile, err := startCPUProfile(opts.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	return server.Run(ctx, opts.file, server.Options{Logger: log, Record: opts.record}, stdout, nil)
}

// startCPUProfile starts --cpuprofile's CPU profile into path, if path is
// not empty; stop ends it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	pf, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); pf.Close() }, nil
}

// bindRecord registers `batchd serve --record FILE` and its companions
// on fs, into o.
func bindRecord(fs *flag.FlagSet, o *server.RecordOptions) {
	fs.StringVar(&o.Path, "record", "", "write one JSON line per request to this file (arrival, tenant, model, version, input length, outcome) for 'batchd sim --replay'")
	fs.BoolVar(&o.Inputs, "record-inputs", false, "with --record, also write each request's input text (the clients' data: off by default)")
	fs.Int64Var(&o.BytesMax, "record-max-bytes", record.BytesMaxDefault, "with --record, stop recording (with a warning) before the file passes this size")
}

// checkRecord refuses the combinations of the --record flags that make no
// sense.
func checkRecord(o server.RecordOptions) error {
	if o.BytesMax < 1 {
		return usagef("--record-max-bytes %d: must be positive", o.BytesMax)
	}
	if o.Path == "" && o.Inputs {
		return usagef("--record-inputs: needs --record FILE")
	}
	return nil
}
