package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batchd/batchd/cudabridge"
)

// profileOptions is `batchd profile`'s command line.
type profileOptions struct {
	backend  string
	out      string
	device   int
	cfg      cudabridge.ProfileConfig
	tableLen int
}

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

func parseProfile(args []string, stdout io.Writer) (profileOptions, error) {
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := profileOptions{}
	fs.StringVar(&o.backend, "backend", "cuda", "what to measure: cuda (every visible GPU, or --device) or cpu (the Go backend)")
	fs.StringVar(&o.out, "out", "", "profile file to write (with several GPUs, one per GPU: FILE.gpuN); empty: print only the summary")
	fs.IntVar(&o.device, "device", -1, "with --backend cuda, only this GPU (-1: all)")
	sizes := fs.String("sizes", joinInts(cudabridge.DefaultProfileSizes()), "batch sizes to measure, increasing, 1 to 100")
	lengths := fs.String("lengths", "16,128,1024", "input lengths in bytes to measure, 0 to 1024")
	fs.IntVar(&o.tableLen, "table-length", 0, "input length whose latencies make the table: one of --lengths (default: the one closest to 128)")
	fs.IntVar(&o.cfg.Reps, "reps", 11, "timed runs per point (the median is the table's latency)")
	fs.IntVar(&o.cfg.Warmup, "warmup", 2, "untimed runs before each point's timed runs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: batchd profile [--backend cuda|cpu] [--out FILE] [--sizes 1,2,...,100] [--lengths 16,128,1024] [--reps N]")
			fmt.Fprintln(stdout)
			fmt.Fprintln(stdout, "Measures the bytenet model's batch latency against batch size and input length")
			fmt.Fprintln(stdout, "on each GPU (or the CPU) and writes a latency table that 'batchd sim")
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
	var err error
	if o.cfg.Sizes, err = intList(*sizes); err != nil {
		return o, usagef("--sizes: %v", err)
	}
	if o.cfg.Lengths, err = intList(*lengths); err != nil {
		return o, usagef("--lengths: %v", err)
	}
	if o.backend != "cuda" && o.backend != "cpu" {
		return o, usagef("--backend %q: want cuda or cpu", o.backend)
	}
	if err := o.cfg.Validate(cudabridge.DefaultLimits()); err != nil {
		return o, usageError{err}
	}
	tableSet := false
	fs.Visit(func(f *flag.Flag) { tableSet = tableSet || f.Name == "table-length" })
	if !tableSet {
		o.tableLen = closestLength(o.cfg.Lengths, tableLengthDefault)
	} else if !slices.Contains(o.cfg.Lengths, o.tableLen) {
		return o, usagef("--table-length %d: must be one of --lengths (%s)", o.tableLen, *lengths)
	}
	return o, nil
}

// tableLengthDefault is the input length the latency table is made for
// when --table-length is not given, or the nearest of --lengths.
const tableLengthDefault = 128

// closestLength is the one of lengths (not empty) closest to want, the
// larger on a tie.
func closestLength(lengths []int, want int) int {
	best := lengths[0]
	for _, n := range lengths[1:] {
		d, bd := abs(n-want), abs(best-want)
		if d < bd || (d == bd && n > best) {
			best = n
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// profileTarget is one thing to measure.
type profileTarget struct {
	name string // for the file header and the summary
	out  string // the file, or ""
	f    cudabridge.Forwarder
}

// runProfile is `batchd profile`.
func runProfile(args []string, stdout, _ io.Writer) error {
	o, err := parseProfile(args, stdout)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	targets, closeAll, err := profileTargets(o)
	if err != nil {
		return err
	}
	defer closeAll()
	for _, t := range targets {
		fmt.Fprintf(stdout, "profiling %s: %d sizes × %d lengths × %d runs\n", t.name, len(o.cfg.Sizes), len(o.cfg.Lengths), o.cfg.Reps+o.cfg.Warmup)
		points, err := cudabridge.Profile(ctx, t.f, cudabridge.DefaultLimits(), o.cfg, time.Now)
		if err != nil {
			return err
		}
		if err := printProfile(stdout, t.name, o, points); err != nil {
			return err
		}
		if t.out == "" {
			continue
		}
		var b strings.Builder
		header := []string{
			fmt.Sprintf("batchd profile: %s, %s", t.name, time.Now().UTC().Format(time.RFC3339)),
			fmt.Sprintf("host: %s/%s, %d CPUs, GOMAXPROCS %d", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0)),
			fmt.Sprintf("command: batchd profile --backend %s --sizes %s --lengths %s --reps %d --warmup %d",
				o.backend, joinInts(o.cfg.Sizes), joinInts(o.cfg.Lengths), o.cfg.Reps, o.cfg.Warmup),
		}
		if err := cudabridge.WriteLatencyTable(&b, header, points, o.tableLen); err != nil {
			return err
		}
		if err := os.WriteFile(t.out, []byte(b.String()), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (use: batchd sim --latency-table %s, or batchd serve --backend %s --latency-table %s)\n", t.out, t.out, o.backend, t.out)
	}
	return nil
}

// profileTargets opens what o asks to measure.
func profileTargets(o profileOptions) ([]profileTarget, func(), error) {
	if o.backend == "cpu" {
		c, err := cudabridge.NewCPU(cudabridge.DefaultLimits())
		if err != nil {
			return nil, nil, err
		}
		name := fmt.Sprintf("cpu backend (pure Go, one batch at a time, GOMAXPROCS %d)", runtime.GOMAXPROCS(0))
		return []profileTarget{{name: name, out: o.out, f: c}}, func() {}, nil
	}
	_, infos, err := cudabridge.ListDevices()
	if err != nil {
		return nil, nil, err
	}
	if o.device >= 0 {
		if o.device >= len(infos) {
			return nil, nil, fmt.Errorf("--device %d: the driver sees %d GPUs: %w", o.device, len(infos), cudabridge.ErrNoDevice)
		}
		infos = infos[o.device : o.device+1]
	}
	var targets []profileTarget
	var devs []*cudabridge.Device
	closeAll := func() {
		for _, d := range devs {
			_ = d.Close()
		}
	}
	for _, info := range infos {
		d, err := cudabridge.OpenDevice(cudabridge.DefaultDeviceConfig(info.Ordinal))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		devs = append(devs, d)
		out := o.out
		if out != "" && len(infos) > 1 {
			ext := filepath.Ext(out)
			out = fmt.Sprintf("%s.gpu%d%s", strings.TrimSuffix(out, ext), info.Ordinal, ext)
		}
		targets = append(targets, profileTarget{name: fmt.Sprintf("GPU %d (%s)", info.Ordinal, info.Name), out: out, f: d})
	}
	return targets, closeAll, nil
}

// printProfile prints the median latency per size (rows) and length
// (columns), and batch 100 (or the largest) against batch 1.
func printProfile(w io.Writer, name string, o profileOptions, points []cudabridge.ProfilePoint) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: median batch latency\n%8s", name, "size")
	for _, l := range o.cfg.Lengths {
		fmt.Fprintf(&b, " %14s", fmt.Sprintf("len %d", l))
	}
	b.WriteString("\n")
	at := map[[2]int]cudabridge.ProfilePoint{}
	for _, p := range points {
		at[[2]int{p.BatchSize, p.InputLen}] = p
	}
	for _, n := range o.cfg.Sizes {
		fmt.Fprintf(&b, "%8d", n)
		for _, l := range o.cfg.Lengths {
			fmt.Fprintf(&b, " %14v", at[[2]int{n, l}].Median.Round(time.Microsecond))
		}
		b.WriteString("\n")
	}
	first, last := o.cfg.Sizes[0], o.cfg.Sizes[len(o.cfg.Sizes)-1]
	for _, l := range o.cfg.Lengths {
		p1, pn := at[[2]int{first, l}], at[[2]int{last, l}]
		fmt.Fprintf(&b, "len %d: batch %d costs %.2fx batch %d; %.0f items/s at batch %d\n",
			l, last, pn.Median.Seconds()/p1.Median.Seconds(), first, pn.ItemsPerSecond(), last)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
