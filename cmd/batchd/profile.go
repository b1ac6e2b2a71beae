package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"

	"github.com/batchd/batchd/cudabridge"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/server"
)

// intList parses "1,2,4" (spaces allowed).
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// profileOptions is a profiling run and, with --config, the serve
// configuration whose backend it measures.
type profileOptions struct {
	cudabridge.ProfileRun
	file *config.File
}

// parseProfile reads `batchd profile`'s command line into a run.
func parseProfile(args []string, stdout io.Writer) (profileOptions, error) {
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := profileOptions{}
	fs.StringVar(&o.Backend, "backend", "cuda", "what to measure: cuda (every visible GPU, or --device) or cpu (the Go backend); with --config, the file's devices.backend (worker, upstream, fanout, ...)")
	path := fs.String("config", "", "a serve configuration file: measure device 0 of its devices.backend (a worker process, an upstream server) on its first model, as serve would run it")
	fs.StringVar(&o.Out, "out", "", "profile file to write (with several GPUs, one per GPU: FILE.gpuN); empty: print only the summary")
	fs.IntVar(&o.Device, "device", -1, "with --backend cuda, only this GPU (-1: all)")
	fs.BoolVar(&o.Graphs, "cuda-graphs", cudabridge.DefaultDeviceConfig(0).Graphs, "with --backend cuda: run each batch as one CUDA graph launch (as devices.cuda_graphs; false: one launch a kernel)")
	sizes := fs.String("sizes", joinInts(cudabridge.DefaultProfileSizes()), "batch sizes to measure, increasing, 1 to 100")
	lengths := fs.String("lengths", "16,128,1024", "input lengths in bytes to measure, 0 to 1024")
	fs.IntVar(&o.TableLen, "table-length", 0, "input length whose latencies make the table: one of --lengths (default: the one closest to 128)")
	fs.IntVar(&o.Config.Reps, "reps", 11, "timed runs per point (the median is the table's latency)")
	fs.IntVar(&o.Config.Warmup, "warmup", 2, "untimed runs before each point's timed runs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: batchd profile [--backend cuda|cpu | --config FILE] [--out FILE] [--sizes 1,2,...,100] [--lengths 16,128,1024] [--reps N]")
			fmt.Fprintln(stdout)
			fmt.Fprintln(stdout, "Measures the bytenet model's batch latency against batch size and input length")
			fmt.Fprintln(stdout, "on each GPU (or the CPU), or your model's behind any backend a serve config")
			fmt.Fprintln(stdout, "names (--config: worker, upstream, fanout), and writes a latency table that 'batchd sim")
			fmt.Fprintln(stdout, "--latency-table FILE' and devices.latency_model.table read; the other lengths'")
			fmt.Fprintln(stdout, "points are kept in the file as comments.")
			fmt.Fprintln(stdout)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return o, err
		}
		return o, usagef("%v (see 'batchd profile -h')", err)
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q (see 'batchd profile -h')", fs.Arg(0))
	}
	c := &o.Config
	var err error
	if c.Sizes, err = intList(*sizes); err != nil {
		return o, usagef("--sizes: %v", err)
	}
	if c.Lengths, err = intList(*lengths); err != nil {
		return o, usagef("--lengths: %v", err)
	}
	backendSet, tableSet, graphsSet := false, false, false
	fs.Visit(func(f *flag.Flag) {
		backendSet = backendSet || f.Name == "backend"
		tableSet = tableSet || f.Name == "table-length"
		graphsSet = graphsSet || f.Name == "cuda-graphs"
	})
	switch {
	case *path != "":
		data, err := os.ReadFile(*path)
		if err != nil {
			return o, usagef("--config: %w", err)
		}
		if o.file, err = config.Decode(*path, data); err != nil {
			return o, usageError{err}
		}
		kind := cmp.Or(o.file.Devices.Backend, config.BackendEmulated)
		if backendSet && o.Backend != kind {
			return o, usagef("--backend %s, but %s says devices.backend %s", o.Backend, *path, kind)
		}
		o.Backend = kind
		if !graphsSet {
			o.Graphs = o.file.Devices.CUDAGraphs
		}
	case o.Backend != "cuda" && o.Backend != "cpu":
		return o, usagef("--backend %q: want cuda or cpu, or --config FILE whose devices say how to reach the backend", o.Backend)
	default:
		if err := c.Validate(cudabridge.DefaultLimits()); err != nil {
			return o, usageError{err}
		}
	}
	if o.Backend != config.BackendCUDA {
		if graphsSet {
			return o, usagef("--cuda-graphs: only with --backend cuda, not %s", o.Backend)
		}
		o.Graphs = false // the other backends have no kernels
	}
	if !tableSet {
		o.TableLen = cudabridge.TableLength(c.Lengths)
	} else if !slices.Contains(c.Lengths, o.TableLen) {
		return o, usagef("--table-length %d: must be one of --lengths (%s)", o.TableLen, *lengths)
	}
	target := "--backend " + o.Backend
	if *path != "" {
		target = "--config " + *path
	}
	o.Command = fmt.Sprintf("batchd profile %s --sizes %s --lengths %s --reps %d --warmup %d",
		target, joinInts(c.Sizes), joinInts(c.Lengths), c.Reps, c.Warmup)
	if o.Backend == config.BackendCUDA && !o.Graphs {
		o.Command += " --cuda-graphs=false"
	}
	return o, nil
}

// runProfile is `batchd profile`.
func runProfile(args []string, stdout, stderr io.Writer) error {
	o, err := parseProfile(args, stdout)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.file != nil {
		t, closeAll, err := server.ProfileTarget(o.file, slog.New(slog.NewTextHandler(stderr, nil)))
		if err != nil {
			return err
		}
		defer closeAll()
		o.Target = &t
	}
	return o.Run(ctx, stdout)
}
