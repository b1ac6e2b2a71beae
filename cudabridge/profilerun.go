package cudabridge

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// ProfileRun is one profiling run (`batchd profile`): what to measure, how,
// and where its latency tables go.
type ProfileRun struct {
	// Backend is "cuda" (every visible GPU, or Device) or "cpu" (the Go
	// backend), or the name of Target's backend.
	Backend string
	// Target, when set, is what to measure in place of Backend's bytenet
	// devices: one device of a configured backend (a worker process, an
	// upstream model server), opened by the caller.
	Target *Target
	// Device is, with cuda, the one GPU to measure (-1: all).
	Device int
	// Out is the latency table file to write (with several GPUs, one per
	// GPU: FILE.gpuN); "" prints only the summary.
	Out string
	// Config is the sizes, lengths and runs of each point.
	Config ProfileConfig
	// TableLen is the input length whose latencies make the table: one of
	// Config.Lengths (TableLength picks the default).
	TableLen int
	// Command is the command line the table's header names.
	Command string
	// Graphs runs the GPUs' batches as CUDA graphs (DeviceConfig.Graphs).
	Graphs bool
}

// TableLengthDefault is the input length a latency table is made for when
// none is asked for, or the nearest of the lengths measured.
const TableLengthDefault = 128

// TableLength is the one of lengths (not empty) closest to
// TableLengthDefault, the larger on a tie.
func TableLength(lengths []int) int {
	dist := func(n int) int { return max(n-TableLengthDefault, TableLengthDefault-n) }
	best := lengths[0]
	for _, n := range lengths[1:] {
		if d, bd := dist(n), dist(best); d < bd || (d == bd && n > best) {
			best = n
		}
	}
	return best
}

// Target is one device of any backend to profile: its name for the
// summary and the file's header, how to run a batch on it, and the batch
// sizes and input lengths it takes.
type Target struct {
	Name   string
	Run    BatchFunc
	Limits Limits
}

// profileTarget is one thing to measure.
type profileTarget struct {
	Target
	out string // the file, or ""
}

// Run measures every target of r in turn, printing its progress and a
// summary to w, and writes each target's latency table with r.Out.
func (r ProfileRun) Run(ctx context.Context, w io.Writer) error {
	targets, closeAll, err := r.targets()
	if err != nil {
		return err
	}
	defer closeAll()
	c := r.Config
	for _, t := range targets {
		fmt.Fprintf(w, "profiling %s: %d sizes × %d lengths × %d runs\n", t.Name, len(c.Sizes), len(c.Lengths), c.Reps+c.Warmup)
		points, err := Profile(ctx, t.Run, t.Limits, c, time.Now)
		if err != nil {
			return err
		}
		if err := WriteProfileSummary(w, t.Name, c, points); err != nil {
			return err
		}
		if t.out == "" {
			continue
		}
		var b strings.Builder
		header := []string{
			fmt.Sprintf("batchd profile: %s, %s", t.Name, time.Now().UTC().Format(time.RFC3339)),
			fmt.Sprintf("host: %s/%s, %d CPUs, GOMAXPROCS %d", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0)),
			"command: " + r.Command,
		}
		if err := WriteLatencyTable(&b, header, points, r.TableLen); err != nil {
			return err
		}
		if err := os.WriteFile(t.out, []byte(b.String()), 0o644); err != nil {
			return err
		}
		serve := "batchd serve --backend " + r.Backend
		if r.Target != nil {
			serve = "batchd serve --config FILE"
		}
		fmt.Fprintf(w, "wrote %s (use: batchd sim --latency-table %s, or %s --latency-table %s)\n", t.out, t.out, serve, t.out)
	}
	return nil
}

// targets opens what r asks to measure; closeAll closes it.
func (r ProfileRun) targets() (targets []profileTarget, closeAll func(), err error) {
	if r.Target != nil {
		return []profileTarget{{Target: *r.Target, out: r.Out}}, func() {}, nil
	}
	if r.Backend == "cpu" {
		c, err := NewCPU(DefaultLimits())
		if err != nil {
			return nil, nil, err
		}
		name := fmt.Sprintf("cpu backend (pure Go, one batch at a time, GOMAXPROCS %d)", runtime.GOMAXPROCS(0))
		return []profileTarget{{Target: Target{Name: name, Run: ForwardBatch(c), Limits: DefaultLimits()}, out: r.Out}}, func() {}, nil
	}
	_, infos, err := ListDevices()
	if err != nil {
		return nil, nil, err
	}
	if r.Device >= 0 {
		if r.Device >= len(infos) {
			return nil, nil, fmt.Errorf("--device %d: the driver sees %d GPUs: %w", r.Device, len(infos), ErrNoDevice)
		}
		infos = infos[r.Device : r.Device+1]
	}
	var devs []*Device
	closeAll = func() {
		for _, d := range devs {
			_ = d.Close()
		}
	}
	for _, info := range infos {
		cfg := DefaultDeviceConfig(info.Ordinal)
		cfg.Graphs = r.Graphs
		d, err := OpenDevice(cfg)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		devs = append(devs, d)
		out := r.Out
		if out != "" && len(infos) > 1 {
			ext := filepath.Ext(out)
			out = fmt.Sprintf("%s.gpu%d%s", strings.TrimSuffix(out, ext), info.Ordinal, ext)
		}
		name := fmt.Sprintf("GPU %d (%s)", info.Ordinal, info.Name)
		targets = append(targets, profileTarget{Target: Target{Name: name, Run: ForwardBatch(d), Limits: DefaultLimits()}, out: out})
	}
	return targets, closeAll, nil
}

// WriteProfileSummary writes the median latency per size (rows) and
// length (columns) of c's points, and batch 100 (or the largest) against
// batch 1.
func WriteProfileSummary(w io.Writer, name string, c ProfileConfig, points []ProfilePoint) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: median batch latency\n%8s", name, "size")
	for _, l := range c.Lengths {
		fmt.Fprintf(&b, " %14s", fmt.Sprintf("len %d", l))
	}
	b.WriteString("\n")
	at := map[[2]int]ProfilePoint{}
	for _, p := range points {
		at[[2]int{p.BatchSize, p.InputLen}] = p
	}
	for _, n := range c.Sizes {
		fmt.Fprintf(&b, "%8d", n)
		for _, l := range c.Lengths {
			fmt.Fprintf(&b, " %14v", at[[2]int{n, l}].Median.Round(time.Microsecond))
		}
		b.WriteString("\n")
	}
	first, last := c.Sizes[0], c.Sizes[len(c.Sizes)-1]
	for _, l := range c.Lengths {
		p1, pn := at[[2]int{first, l}], at[[2]int{last, l}]
		fmt.Fprintf(&b, "len %d: batch %d costs %.2fx batch %d; %.0f items/s at batch %d\n",
			l, last, pn.Median.Seconds()/p1.Median.Seconds(), first, pn.ItemsPerSecond(), last)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
