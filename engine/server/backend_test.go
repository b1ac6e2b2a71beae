package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/cudabridge"
	"github.com/batchd/batchd/engine"
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

func TestServeCUDAWithoutDriver(t *testing.T) {
	noDriver(t)
	f, err := config.Load("test.yaml", []byte("devices:\n  backend: cuda\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.HTTP.Addr = "127.0.0.1:0"
	f.Jobs.Dir = t.TempDir()
	srv, err := New(context.Background(), f, Options{})
	if !errors.Is(err, cudabridge.ErrNoDriver) {
		t.Errorf("New with devices.backend cuda and no driver: %v, want ErrNoDriver", err)
	}
	if srv != nil {
		t.Errorf("New failed and returned a server")
	}
}

func TestBytenetModelLimits(t *testing.T) {
	f := config.Default()
	f.Policy.BatchMax = 200
	if _, err := bytenetModel(f); err == nil || !strings.Contains(err.Error(), "at most 100") {
		t.Errorf("batch_max 200: %v", err)
	}
	f = config.Default()
	lim, err := bytenetModel(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Models) != 1 || f.Models[0].Name != cudabridge.ModelName || lim != cudabridge.DefaultLimits() {
		t.Errorf("models %+v, limits %+v", f.Models, lim)
	}
}

type faultyBackend struct{ err error }

func (b faultyBackend) Run(context.Context, string, string, []string) ([]string, []error, error) {
	return nil, nil, b.err
}

// TestEngineBackendMapsErrors: cudabridge's device faults and batch-size
// errors reach the engine as its own.
func TestEngineBackendMapsErrors(t *testing.T) {
	for _, c := range []struct{ from, to error }{
		{cudabridge.ErrDeviceFault, engine.ErrDeviceFault},
		{cudabridge.ErrBatchSize, engine.ErrBatchSize},
	} {
		_, _, err := engineBackend{faultyBackend{c.from}}.Run(context.Background(), "m", "v", []string{"x"})
		if !errors.Is(err, c.to) || !errors.Is(err, c.from) {
			t.Errorf("%v became %v, want it to wrap %v too", c.from, err, c.to)
		}
	}
	_, _, err := engineBackend{faultyBackend{context.Canceled}}.Run(context.Background(), "m", "v", []string{"x"})
	if !errors.Is(err, context.Canceled) || errors.Is(err, engine.ErrDeviceFault) {
		t.Errorf("other errors pass unchanged: %v", err)
	}
}

type backendFunc func(ctx context.Context, model, version string, inputs []string) ([]string, []error, error)

func (f backendFunc) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	return f(ctx, model, version, inputs)
}

// TestDeviceFaultRequeued: a cudabridge device fault, through the adapter,
// gets the engine's device-failure semantics: the batch is re-queued and
// its request still answered with the model's output, on a second attempt.
func TestDeviceFaultRequeued(t *testing.T) {
	f := config.Default()
	f.Devices.Backend = config.BackendCPU
	f.Devices.Count = 2
	ecfg, closeBackends, _, err := engineConfig(f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer closeBackends()
	inner := ecfg.Backend
	var faulted atomic.Bool
	ecfg.Backend = func(i int) engine.Backend {
		b := inner(i)
		return backendFunc(func(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
			if faulted.CompareAndSwap(false, true) {
				return engineBackend{faultyBackend{fmt.Errorf("injected: %w", cudabridge.ErrDeviceFault)}}.Run(ctx, model, version, inputs)
			}
			return b.Run(ctx, model, version, inputs)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng, err := engine.New(ctx, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := eng.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	r, err := eng.Do(ctx, actors.Request{Model: cudabridge.ModelName, Input: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	want := cudabridge.NewWeights(cudabridge.WeightSeed).Infer([]byte("hello")).String()
	if r.Outcome != actors.Completed || r.Output != want || r.Attempts != 2 || !faulted.Load() {
		t.Errorf("reply %+v: want completed with %q on attempt 2, after the injected fault", r, want)
	}
}

// TestCUDAGraphsDefault: the configuration's defaults for
// devices.cuda_graphs and cuda_wait_sleep are cudabridge's own (engine/config may not import cudabridge, so the two
// are written apart).
func TestCUDAGraphsDefault(t *testing.T) {
	if got, want := config.Default().Devices.CUDAGraphs, cudabridge.DefaultDeviceConfig(0).Graphs; got != want {
		t.Errorf("devices.cuda_graphs defaults to %v, cudabridge.DeviceConfig.Graphs to %v", got, want)
	}
	if got, want := config.Default().Devices.CUDAWaitSleep, cudabridge.DefaultDeviceConfig(0).WaitSleep; got != want {
		t.Errorf("devices.cuda_wait_sleep defaults to %v, cudabridge.DeviceConfig.WaitSleep to %v", got, want)
	}
}
