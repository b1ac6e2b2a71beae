package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/cudabridge"
	"github.com/batchd/batchd/engine/config"
)

// noDriver skips the test where a CUDA driver is installed: it checks what
// a machine without one sees.
func noDriver(t *testing.T) {
	t.Helper()
	if _, err := cudabridge.DeviceCount(); !errors.Is(err, cudabridge.ErrNoDriver) {
		t.Skipf("a CUDA driver is installed here (%v)", err)
	}
}

func TestDevicesWithoutDriver(t *testing.T) {
	noDriver(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"devices"}, &stdout, &stderr); code != exitFail {
		t.Fatalf("exit %d, want %d", code, exitFail)
	}
	if !strings.Contains(stderr.String(), "libcuda.so.1 not found") || !strings.Contains(stderr.String(), "no usable CUDA driver") {
		t.Errorf("stderr %q does not say the driver library is missing", stderr.String())
	}
}

// TestProfileCPUWritesTable: `batchd profile --backend cpu` writes a table
// that the simulator's latency table model reads, with one point per
// size, and `batchd sim --latency-table` runs on it.
func TestProfileCPUWritesTable(t *testing.T) {
	out := filepath.Join(t.TempDir(), "profile.txt")
	var stdout, stderr bytes.Buffer
	code := run([]string{"profile", "--backend", "cpu", "--sizes", "1,2,4", "--lengths", "8,32", "--table-length", "32", "--reps", "2", "--warmup", "0", "--out", out}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	m, err := actors.ParseLatencyTable(data)
	if err != nil {
		t.Fatalf("the simulator cannot read the profile: %v\n%s", err, data)
	}
	if len(m.Table) != 3 || m.Table[0].BatchSize != 1 || m.Table[2].BatchSize != 4 {
		t.Errorf("table %+v, want sizes 1, 2, 4", m.Table)
	}
	if !strings.Contains(string(data), "# 8 4 ") || !strings.Contains(string(data), "at input length 32 bytes") {
		t.Errorf("the file does not keep the other length's points:\n%s", data)
	}
	if !strings.Contains(stdout.String(), "batch 4 costs") {
		t.Errorf("no summary:\n%s", stdout.String())
	}
	stdout.Reset()
	if code := run([]string{"sim", "--latency-table", out, "--rate", "200", "--duration", "2s"}, &stdout, &stderr); code != exitOK {
		t.Errorf("batchd sim --latency-table on the profile: exit %d: %s", code, stderr.String())
	}
}

func TestProfileUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--backend", "tpu"},
		{"--sizes", "0,1"},
		{"--sizes", "4,2"},
		{"--sizes", "101"},
		{"--lengths", "2000"},
		{"--lengths", "8", "--table-length", "16"},
		{"--reps", "0"},
		{"--sizes", "x"},
		{"extra"},
		{"--cuda-graphs"}, // the CPU backend has no graphs
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"profile", "--backend", "cpu"}, args...), &stdout, &stderr); code != exitUsage {
			t.Errorf("profile %v: exit %d, want %d (%s)", args, code, exitUsage, stderr.String())
		}
	}
}

// Without --table-length, the table is made for the one of --lengths
// closest to 128, so any --lengths works alone; an explicit one is kept.
func TestProfileTableLength(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 128},
		{[]string{"--lengths", "16"}, 16},
		{[]string{"--lengths", "1024,8,100"}, 100},
		{[]string{"--lengths", "64,192"}, 192},
		{[]string{"--lengths", "8,32", "--table-length", "8"}, 8},
	} {
		o, err := parseProfile(append([]string{"--backend", "cpu"}, c.args...), io.Discard)
		if err != nil || o.TableLen != c.want {
			t.Errorf("profile %v: table length %d, err %v; want %d", c.args, o.TableLen, err, c.want)
		}
	}
}

func TestProfileCUDAWithoutDriver(t *testing.T) {
	noDriver(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"profile", "--sizes", "1"}, &stdout, &stderr); code != exitFail || !strings.Contains(stderr.String(), "libcuda.so.1") {
		t.Errorf("exit %d, stderr %q: want 1 and the missing driver named", code, stderr.String())
	}
}

// TestServeCPUBackend: `serve --backend cpu` registers bytenet and answers
// with the reference's output.
func TestServeCPUBackend(t *testing.T) {
	var stdout bytes.Buffer
	// A generous SLO, so a loaded machine cannot make the request miss it.
	base, stop := startServe(t, "devices:\n  backend: cpu\n  count: 2\npolicy:\n  slo: 5s\n", &stdout)
	want := cudabridge.NewWeights(cudabridge.WeightSeed).Infer([]byte("hello")).String()
	code, r := infer(t, base, cudabridge.ModelName, "hello")
	if code != http.StatusOK || r.Output != want || r.Version != cudabridge.ModelVersion {
		t.Fatalf("infer: %d %+v (error %+v), want output %q", code, r, r.Error, want)
	}
	if !strings.Contains(stdout.String(), "2 cpu devices") || !strings.Contains(stdout.String(), "/v1/models/bytenet/infer") {
		t.Errorf("startup line:\n%s", stdout.String())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestServeFlagBackend(t *testing.T) {
	opts, err := parseServe([]string{"--backend", "cpu"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opts.file.Devices.Backend != config.BackendCPU {
		t.Errorf("--backend cpu: devices.backend %q", opts.file.Devices.Backend)
	}
	if _, err := parseServe([]string{"--backend", "tpu"}, io.Discard); !errors.As(err, new(usageError)) {
		t.Errorf("--backend tpu: %v, want a usage error", err)
	}
}
