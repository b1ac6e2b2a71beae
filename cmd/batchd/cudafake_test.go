package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/cudabridge"
	"github.com/batchd/batchd/cudabridge/cudatest"
)

// cudaChildEnv, set in a child test process, makes TestCUDACommandsChild
// run; the child finds the C stand-in for libcuda.so.1 on its
// LD_LIBRARY_PATH.
const cudaChildEnv = "BATCHD_CUDA_CHILD"

// TestCUDACommandsOnFakeDriver runs devices, profile --backend cuda and
// serve --backend cuda through the real binding, in a child process whose
// libcuda.so.1 is cudabridge/testdata/fakecuda.c (a C stand-in with the
// driver's functions and the model's kernels in C): the commands' GPU
// paths end to end, short of a GPU. It needs a C compiler and skips
// without one, or where a real driver would be found first.
func TestCUDACommandsOnFakeDriver(t *testing.T) {
	noDriver(t)
	dir := filepath.Dir(cudatest.FakeDriver(t, filepath.Join("..", "..", "cudabridge", "testdata", "fakecuda.c")))
	cmd := exec.Command(os.Args[0], "-test.run=^TestCUDACommandsChild$", "-test.v")
	cmd.Env = append(os.Environ(), cudaChildEnv+"="+dir, "LD_LIBRARY_PATH="+dir)
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "--- PASS: TestCUDACommandsChild") || (err != nil && !onlyActorLibraryLeak(string(out))) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// onlyActorLibraryLeak reports whether the child failed only the package's
// goroutine leak check (TestMain), and only on protoactor's own goroutines:
// its dead-letter throttle outlives a stop by its interval, and the child
// exits right after one. The parent's own leak check still covers serve.
func onlyActorLibraryLeak(out string) bool {
	if !strings.Contains(out, "goleak: Errors on successful test run") {
		return false
	}
	leaks := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "on top of the stack") {
			leaks++
			if !strings.Contains(line, "github.com/asynkron/protoactor-go/") {
				return false
			}
		}
	}
	return leaks > 0
}

func TestCUDACommandsChild(t *testing.T) {
	dir := os.Getenv(cudaChildEnv)
	if dir == "" {
		t.Skip("child process of TestCUDACommandsOnFakeDriver")
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"devices"}, &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), "0  Fake C GPU 0") {
		t.Fatalf("devices: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}

	out := filepath.Join(dir, "profile.txt")
	stdout.Reset()
	code := run([]string{"profile", "--sizes", "1,2,8", "--lengths", "8", "--table-length", "8", "--reps", "2", "--warmup", "1", "--out", out}, &stdout, &stderr)
	if code != exitOK || !strings.Contains(stdout.String(), "GPU 0 (Fake C GPU 0)") {
		t.Fatalf("profile --backend cuda: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := actors.ParseLatencyTable(data); err != nil || len(m.Table) != 3 {
		t.Fatalf("profile: %v\n%s", err, data)
	}

	stdout.Reset()
	// A generous SLO: the request must not miss its deadline on a loaded
	// machine under the race detector (the planning cost is the fixed
	// default latency, 100 ms).
	base, stop := startServe(t, "devices:\n  backend: cuda\n  count: 3\npolicy:\n  slo: 5s\n", &stdout)
	want := cudabridge.NewWeights(cudabridge.WeightSeed).Infer([]byte("hello")).String()
	if code, r := infer(t, base, cudabridge.ModelName, "hello"); code != http.StatusOK || r.Output != want {
		t.Errorf("serve --backend cuda: %d %+v (error %+v), want %q", code, r, r.Error, want)
	}
	// The GPU's counters: the one batch, its time, the GPU's part of it,
	// and the batch run as one graph launch (devices.cuda_graphs, on by
	// default).
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `batchd_gpu_batches_total{gpu="0"} 1`+"\n") ||
		!strings.Contains(string(body), `batchd_gpu_run_seconds_total{gpu="0"} `) || !strings.Contains(string(body), `batchd_gpu_wait_seconds_total{gpu="0"} `) ||
		!strings.Contains(string(body), `batchd_gpu_graph_launches_total{gpu="0"} 1`+"\n") {
		t.Errorf("serve --backend cuda: /metrics lacks the GPU's counters after one batch:\n%s", body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "1 cuda devices") {
		t.Errorf("serve --backend cuda: one device per GPU (the fake has one), not devices.count:\n%s", stdout.String())
	}
}
