package cudabridge

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// The tests named TestGPU run on a real GPU through libcuda.so.1 and skip,
// saying what is missing, elsewhere. `make gpu-test` builds them into a
// self-contained binary for a GPU host; -gpu.out names the directory their
// reports go to.
var gpuOut = flag.String("gpu.out", "", "directory for the GPU tests' reports (profiles, comparison); empty: none")

// gpuDevices opens every GPU, or skips the test naming what is missing.
func gpuDevices(t testing.TB) (DriverVersion, []DeviceInfo, []*Device) {
	return gpuDevicesGraphs(t, false)
}

// gpuDevicesGraphs is gpuDevices with DeviceConfig.Graphs set to graphs.
func gpuDevicesGraphs(t testing.TB, graphs bool) (DriverVersion, []DeviceInfo, []*Device) {
	t.Helper()
	v, infos, err := ListDevices()
	if err != nil {
		t.Skipf("skipping GPU test: %v", err)
	}
	var devs []*Device
	for _, info := range infos {
		cfg := DefaultDeviceConfig(info.Ordinal)
		cfg.Graphs = graphs
		d, err := OpenDevice(cfg)
		if err != nil {
			t.Fatalf("device %d (%s): %v", info.Ordinal, info.Name, err)
		}
		devs = append(devs, d)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			if err := d.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	})
	return v, infos, devs
}

// writeReport writes name into -gpu.out, if set.
func writeReport(t testing.TB, name, text string) {
	t.Helper()
	if *gpuOut == "" {
		return
	}
	if err := os.MkdirAll(*gpuOut, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*gpuOut, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGPUMatchesReference runs every test input on every GPU, in batches
// of several sizes (so inputs meet different batch-mates and padding), and
// requires identical labels and continuations and logits within 1e-5
// relative; it reports how many were bit-exact and the largest difference.
// It does so twice: with the kernels as CUDA graphs, and launched one by
// one (the default).
func TestGPUMatchesReference(t *testing.T) {
	v, infos, devs := gpuDevicesGraphs(t, true)
	_, _, direct := gpuDevices(t)
	w := NewWeights(WeightSeed)
	inputs := testInputs()
	var report strings.Builder
	fmt.Fprintf(&report, "# GPU vs CPU reference, %s, CUDA driver %v\n", time.Now().UTC().Format(time.RFC3339), v)
	for k, d := range append(devs, direct...) {
		how := "graphs"
		if k >= len(devs) {
			how = "launches"
			k -= len(devs)
		}
		r := rand.New(rand.NewPCG(7, uint64(k)))
		compared, exact, maxRel := 0, 0, 0.0
		for _, size := range []int{1, 7, 64, BatchMax} {
			for start := 0; start < len(inputs); start += size {
				batch := inputs[start:min(start+size, len(inputs))]
				if size == BatchMax { // fill the batch with shuffled repeats
					batch = randomBatch(r, BatchMax)
				}
				outs, err := d.Forward(context.Background(), batch)
				if err != nil {
					t.Fatalf("device %d: %v", infos[k].Ordinal, err)
				}
				for i, in := range batch {
					want := w.Infer([]byte(in))
					got := outs[i]
					compared++
					if got.Label != want.Label || got.Cont != want.Cont || !logitsClose(got.Logits, want.Logits) {
						t.Errorf("device %d, batch of %d, %q: GPU %s %v, CPU %s %v", infos[k].Ordinal, len(batch), in, got, got.Logits, want, want.Logits)
						continue
					}
					if got == want {
						exact++
					}
					for l := range Labels {
						x, y := float64(got.Logits[l]), float64(want.Logits[l])
						maxRel = math.Max(maxRel, math.Abs(x-y)/math.Max(1, math.Abs(y)))
					}
				}
			}
		}
		line := fmt.Sprintf("device %d (%s), %s: %d outputs compared, %d bit-exact, labels and continuations identical: %v, largest logit difference %.3g (relative, tolerance 1e-5); %d graph launches",
			infos[k].Ordinal, infos[k].Name, how, compared, exact, !t.Failed(), maxRel, d.Counters().GraphLaunches)
		t.Log(line)
		fmt.Fprintln(&report, line)
	}
	writeReport(t, "gpu-vs-cpu.txt", report.String())
}

// TestGPUProfile measures batch latency against batch size (1 to 100) and
// input length on every GPU and writes each device's latency table to
// -gpu.out; the table must parse as the simulator's latency table. It
// asserts nothing about time: the figures are the result.
func TestGPUProfile(t *testing.T) {
	v, infos, devs := gpuDevices(t)
	cfg := ProfileConfig{Lengths: []int{16, 128, InputLenMax}, Reps: 21, Warmup: 3}
	for n := 1; n <= BatchMax; n++ {
		cfg.Sizes = append(cfg.Sizes, n)
	}
	for k, d := range devs {
		points, err := Profile(context.Background(), ForwardBatch(d), d.Limits(), cfg, time.Now)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		header := []string{
			fmt.Sprintf("batchd GPU profile: device %d %s, CUDA driver %v, %s", infos[k].Ordinal, infos[k].Name, v, time.Now().UTC().Format(time.RFC3339)),
			fmt.Sprintf("median of %d runs after %d warm-up runs per point", cfg.Reps, cfg.Warmup),
		}
		if err := WriteLatencyTable(&b, header, points, 128); err != nil {
			t.Fatal(err)
		}
		// The table must be one the simulator reads: every size, in order.
		if m, err := actors.ParseLatencyTable([]byte(b.String())); err != nil || len(m.Table) != len(cfg.Sizes) {
			t.Errorf("device %d: the profile is not a %d-point latency table: %v", infos[k].Ordinal, len(cfg.Sizes), err)
		}
		writeReport(t, fmt.Sprintf("profile-gpu%d.txt", infos[k].Ordinal), b.String())
		for _, l := range cfg.Lengths {
			var one, hundred ProfilePoint
			for _, p := range points {
				if p.InputLen == l && p.BatchSize == 1 {
					one = p
				}
				if p.InputLen == l && p.BatchSize == BatchMax {
					hundred = p
				}
			}
			t.Logf("device %d, inputs of %d bytes: batch 1 %v, batch 100 %v: %.2fx (target < 3x), %.0f items/s at 100",
				infos[k].Ordinal, l, one.Median, hundred.Median, hundred.Median.Seconds()/one.Median.Seconds(), hundred.ItemsPerSecond())
		}
	}
}
