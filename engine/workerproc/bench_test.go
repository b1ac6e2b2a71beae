package workerproc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// benchRun times b.N runs of inputs on bk and reports the p50 and p99 of
// one run in µs besides the mean (ns/op).
func benchRun(b *testing.B, bk *Backend, inputs []string) {
	b.Helper()
	ctx := context.Background()
	for range 20 { // warm: the process, its buffers, the model's first call
		if _, _, err := bk.Run(ctx, "m", "v1", inputs); err != nil {
			b.Fatal(err)
		}
	}
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		outs, _, err := bk.Run(ctx, "m", "v1", inputs)
		took = append(took, time.Since(t0))
		if err != nil || len(outs) != len(inputs) {
			b.Fatalf("%d outputs, %v", len(outs), err)
		}
	}
	b.StopTimer()
	slices.Sort(took)
	q := func(p float64) float64 { return float64(took[int(p*float64(len(took)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

func benchBackend(b *testing.B, cmd []string, dir string, env ...string) *Backend {
	b.Helper()
	cfg := DefaultConfig()
	cfg.Cmd, cfg.Dir, cfg.Env = cmd, dir, env
	bk, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bk.Close() })
	if err := bk.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	return bk
}

func kilobyteInputs(n int) []string {
	in := make([]string, n)
	for i := range in {
		in[i] = strings.Repeat(string(rune('a'+i%26)), 1024)
	}
	return in
}

// BenchmarkOverhead is batchd's own cost of a batch of 100 inputs of 1 KB
// on a worker process: encoding the frame, the pipes both ways, the
// process switches, decoding the result. The worker is this test binary
// (Go, echoing), so no Python time is in it; its own decode and encode
// are, which makes the figure an upper bound on batchd's side alone.
func BenchmarkOverhead(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	bk := benchBackend(b, []string{exe, "-test.run=^$"}, "", testWorkerEnv+"=echo", "GORACE=atexit_sleep_ms=0")
	benchRun(b, bk, kilobyteInputs(100))
}

func benchPython(b *testing.B) string {
	b.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		b.Skip("no /usr/bin/python3")
	}
	dir, err := filepath.Abs("python")
	if err != nil {
		b.Fatal(err)
	}
	return dir
}

// BenchmarkPythonEcho is the same batch on batchd_worker.py with a batch
// function that returns its inputs: batchd's cost plus the Python
// helper's.
func BenchmarkPythonEcho(b *testing.B) {
	dir := benchPython(b)
	model := filepath.Join(b.TempDir(), "echo.py")
	if err := os.WriteFile(model, []byte("def batch(inputs):\n    return inputs\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	bk := benchBackend(b, []string{"/usr/bin/python3", filepath.Join(dir, "batchd_worker.py"), model}, "")
	benchRun(b, bk, kilobyteInputs(100))
}

// BenchmarkTorch is the PyTorch example (example_torch.py, one thread) on
// batches of 1 and of 100 inputs of 256 bytes, the model's width: the
// batching gain a worker process keeps.
func BenchmarkTorch(b *testing.B) {
	dir := benchPython(b)
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		b.Skip("/usr/bin/python3 cannot import torch: run python/install-torch.sh")
	}
	bk := benchBackend(b, []string{"/usr/bin/python3", "example_torch.py"}, dir)
	in := make([]string, 100)
	for i := range in {
		in[i] = strings.Repeat(string(rune('a'+i%26)), 256)
	}
	for _, n := range []int{1, 100} {
		b.Run("batch="+map[int]string{1: "1", 100: "100"}[n], func(b *testing.B) { benchRun(b, bk, in[:n]) })
	}
}
