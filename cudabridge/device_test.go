package cudabridge

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// openFake opens device 0 of a fresh fake driver with small polling
// settings.
func openFake(t *testing.T, lim Limits) (*Device, *fakeDriver) {
	t.Helper()
	f := newFakeDriver(2)
	cfg := DefaultDeviceConfig(0)
	cfg.Limits = lim
	cfg.PollSpin = 0
	d, err := openDevice(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if live := f.live(); live != "" {
			t.Errorf("after Close the driver still holds %s", live)
		}
	})
	return d, f
}

// checkOutputs compares a device's outputs with the reference.
func checkOutputs(t *testing.T, w *Weights, batch []string, outs []Output) {
	t.Helper()
	if len(outs) != len(batch) {
		t.Fatalf("%d outputs for %d inputs", len(outs), len(batch))
	}
	for i, in := range batch {
		if want := w.Infer([]byte(in)); outs[i] != want {
			t.Fatalf("item %d of %d (%d bytes): got %v %v, want %v %v", i, len(batch), len(in), outs[i], outs[i].Logits, want, want.Logits)
		}
	}
}

// TestDeviceMatchesReference runs the GPU code path (padding, buffer
// layout, copies, the launch sequence and its parameters, decoding) on the
// fake driver, whose kernels are the Go kernels: every output must be the
// reference's.
func TestDeviceMatchesReference(t *testing.T) {
	d, _ := openFake(t, DefaultLimits())
	w := NewWeights(WeightSeed)
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 3, 17, BatchMax} {
		batch := randomBatch(r, n)
		outs, err := d.Forward(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		checkOutputs(t, w, batch, outs)
	}
}

// TestDeviceBuffersOnceLaunchesPerBatch: setup allocates once; each batch
// is two copies in (of the padded inputs and the lengths), 4+2·ContLen
// launches and two copies out, and allocates nothing.
func TestDeviceBuffersOnceLaunchesPerBatch(t *testing.T) {
	d, f := openFake(t, DefaultLimits())
	allocs, hostAllocs, loads := f.count("MemAlloc"), f.count("MemAllocHost"), f.count("ModuleLoadData")
	if allocs != wCount+9 || hostAllocs != 5 || loads != 1 {
		t.Fatalf("setup: %d device allocations, %d host, %d module loads; want %d, 5, 1", allocs, hostAllocs, loads, wCount+9)
	}
	for i := range 3 {
		h2d, d2h, launches := f.count("MemcpyHtoDAsync"), f.count("MemcpyDtoHAsync"), f.count("LaunchKernel")
		if _, err := d.Forward(context.Background(), ProfileInputs(5+i, 10)); err != nil {
			t.Fatal(err)
		}
		if got := f.count("MemcpyHtoDAsync") - h2d; got != 2 {
			t.Errorf("batch %d: %d copies in, want 2", i, got)
		}
		if got := f.count("MemcpyDtoHAsync") - d2h; got != 2 {
			t.Errorf("batch %d: %d copies out, want 2", i, got)
		}
		if got := f.count("LaunchKernel") - launches; got != 4+2*ContLen {
			t.Errorf("batch %d: %d launches, want %d", i, got, 4+2*ContLen)
		}
	}
	if f.count("MemAlloc") != allocs || f.count("MemAllocHost") != hostAllocs || f.count("ModuleLoadData") != loads {
		t.Error("batches allocated or loaded again")
	}
}

// TestDeviceFaultResets: a failed launch, and a kernel failing on the
// stream (a sticky error, like an illegal address), fail the batch with
// ErrDeviceFault carrying the CUDA error; the next batch resets the
// primary context, sets everything up again and is correct.
func TestDeviceFaultResets(t *testing.T) {
	for _, c := range []struct {
		name   string
		op     string
		at     int // which call of op in the batch fails
		sticky bool
	}{
		{"launch refused", "LaunchKernel", 3, false},
		{"kernel failed on the stream", "StreamQuery", 1, true},
		{"copy refused", "MemcpyDtoHAsync", 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, f := openFake(t, DefaultLimits())
			w := NewWeights(WeightSeed)
			f.mu.Lock()
			f.failOp, f.failAt, f.failCode, f.sticky = c.op, f.counts[c.op]+c.at, 719, c.sticky
			f.mu.Unlock()
			batch := []string{"one", "two"}
			_, err := d.Forward(context.Background(), batch)
			var ce *CUDAError
			if !errors.Is(err, ErrDeviceFault) || !errors.As(err, &ce) || ce.Code != 719 {
				t.Fatalf("err %v: want ErrDeviceFault wrapping the injected CUDA error", err)
			}
			resets, loads := f.count("PrimaryCtxReset"), f.count("ModuleLoadData")
			outs, err := d.Forward(context.Background(), batch)
			if err != nil {
				t.Fatalf("the batch after the fault: %v", err)
			}
			checkOutputs(t, w, batch, outs)
			if f.count("PrimaryCtxReset") != resets+1 || f.count("ModuleLoadData") != loads+1 {
				t.Errorf("the next batch did not reset and set up the device again")
			}
		})
	}
}

// TestDeviceHangAbandoned: a hung kernel holds a batch only until its ctx
// ends (a device fault wrapping the ctx's error); while the kernel still
// runs, the next batch fails at once instead of blocking; once it ends, the
// device resets and serves again.
func TestDeviceHangAbandoned(t *testing.T) {
	d, f := openFake(t, DefaultLimits())
	f.mu.Lock()
	f.hang = true
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := d.Forward(ctx, []string{"hang"})
	if !errors.Is(err, ErrDeviceFault) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung batch: err %v; want ErrDeviceFault and DeadlineExceeded", err)
	}
	// A live ctx: only the device's own state can make this fail at once.
	_, err = d.Forward(context.Background(), []string{"next"})
	if !errors.Is(err, ErrDeviceFault) || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("batch behind a hung kernel: err %v; want a device fault saying it still runs", err)
	}
	f.mu.Lock()
	f.hang = false
	f.mu.Unlock()
	outs, err := d.Forward(context.Background(), []string{"after"})
	if err != nil {
		t.Fatalf("after the kernel ended: %v", err)
	}
	checkOutputs(t, NewWeights(WeightSeed), []string{"after"}, outs)
}

// TestDeviceBatchTimeout: with a ctx that never ends, BatchTimeout still
// abandons a hung batch.
func TestDeviceBatchTimeout(t *testing.T) {
	f := newFakeDriver(1)
	cfg := DefaultDeviceConfig(0)
	cfg.BatchTimeout = 10 * time.Millisecond
	d, err := openDevice(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.hang = true
	f.mu.Unlock()
	if _, err := d.Forward(context.Background(), []string{"x"}); !errors.Is(err, ErrDeviceFault) || !strings.Contains(err.Error(), "BatchTimeout") {
		t.Fatalf("err %v; want a device fault naming BatchTimeout", err)
	}
	f.mu.Lock()
	f.hang = false
	f.mu.Unlock()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceOneBatchAtATime: a second Forward while one is in flight is a
// bug of the caller, and panics.
func TestDeviceOneBatchAtATime(t *testing.T) {
	d, f := openFake(t, DefaultLimits())
	queried := make(chan struct{})
	f.mu.Lock()
	f.hang, f.queried = true, queried
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := d.Forward(ctx, []string{"first"})
		first <- err
	}()
	<-queried // the first batch is waiting on its stream
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a second batch at once did not panic")
			}
		}()
		_, _ = d.Forward(context.Background(), []string{"second"})
	}()
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("first batch: %v", err)
	}
	f.mu.Lock()
	f.hang = false
	f.mu.Unlock()
}

// TestDeviceSetupFailure: a module that does not load fails the open with
// a device fault carrying the JIT log, and leaves nothing allocated.
func TestDeviceSetupFailure(t *testing.T) {
	f := newFakeDriver(1)
	f.failOp, f.failAt, f.failCode = "ModuleLoadData", 1, 218
	_, err := openDevice(f, DefaultDeviceConfig(0))
	if !errors.Is(err, ErrDeviceFault) || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_PTX") || !strings.Contains(err.Error(), "JIT log: ptxas") {
		t.Fatalf("err %v; want a device fault with the PTX error and its JIT log", err)
	}
	if live := f.live(); live != "" {
		t.Errorf("a failed setup left %s", live)
	}
}

func TestDeviceOpenErrors(t *testing.T) {
	f := newFakeDriver(2)
	if _, err := openDevice(f, DefaultDeviceConfig(2)); !errors.Is(err, ErrNoDevice) {
		t.Errorf("device 2 of 2: err %v, want ErrNoDevice", err)
	}
	cfg := DefaultDeviceConfig(0)
	cfg.Limits.BatchMax = 0
	if _, err := openDevice(f, cfg); err == nil {
		t.Error("BatchMax 0 accepted")
	}
	if f.count("PrimaryCtxRetain") != 0 {
		t.Error("a refused open touched the device")
	}
}

// TestDeviceRunItems: Run serves the good items of a batch with a bad one,
// and after Close every batch fails.
func TestDeviceRunItems(t *testing.T) {
	d, _ := openFake(t, Limits{BatchMax: 8, InputLenMax: 16})
	outs, itemErrs, err := d.Run(context.Background(), ModelName, ModelVersion, []string{"short", strings.Repeat("x", 17), "also short"})
	if err != nil || itemErrs == nil || !errors.Is(itemErrs[1], ErrInputTooLong) || itemErrs[0] != nil || itemErrs[2] != nil {
		t.Fatalf("err %v, item errors %v", err, itemErrs)
	}
	w := NewWeights(WeightSeed)
	if outs[0] != w.Infer([]byte("short")).String() || outs[2] != w.Infer([]byte("also short")).String() {
		t.Errorf("outputs %q", outs)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Run(context.Background(), ModelName, ModelVersion, []string{"x"}); !errors.Is(err, ErrDeviceFault) {
		t.Errorf("run after close: %v", err)
	}
}

func TestListDevicesFake(t *testing.T) {
	v, devs, err := listDevices(newFakeDriver(2))
	if err != nil {
		t.Fatal(err)
	}
	if v.String() != "12.4" || len(devs) != 2 || devs[1].Name != "Fake GPU 1" || devs[1].Ordinal != 1 || devs[0].MemoryBytes != 80<<30 {
		t.Errorf("version %v, devices %+v", v, devs)
	}
	if _, _, err := listDevices(newFakeDriver(0)); !errors.Is(err, ErrNoDevice) {
		t.Errorf("no devices: err %v, want ErrNoDevice", err)
	}
}

func TestWriteDevices(t *testing.T) {
	var b strings.Builder
	if err := WriteDevices(&b, 12040, []DeviceInfo{{Ordinal: 0, Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CUDA driver 12.4, 1 GPU(s)", "0  NVIDIA H100 80GB HBM3", "80.0 GiB"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("%q lacks %q", b.String(), want)
		}
	}
}

// TestDeviceCancelledBeforeStart: a batch whose ctx ended before anything
// was queued fails with the ctx's error, not a device fault, and the
// device is not reset for it.
func TestDeviceCancelledBeforeStart(t *testing.T) {
	d, f := openFake(t, DefaultLimits())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	launches := f.count("LaunchKernel")
	if _, err := d.Forward(ctx, []string{"x"}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrDeviceFault) {
		t.Fatalf("err %v; want context.Canceled and no device fault", err)
	}
	outs, err := d.Forward(context.Background(), []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	checkOutputs(t, NewWeights(WeightSeed), []string{"x"}, outs)
	if f.count("PrimaryCtxReset") != 0 || f.count("LaunchKernel") != launches+4+2*ContLen {
		t.Errorf("%d resets, %d launches: the cancelled batch must not touch the device", f.count("PrimaryCtxReset"), f.count("LaunchKernel")-launches)
	}
}

// TestDeviceCounters: each Run counts one batch, and its wait for the GPU
// is part of its time.
func TestDeviceCounters(t *testing.T) {
	d, _ := openFake(t, DefaultLimits())
	if c := d.Counters(); c != (DeviceCounters{}) {
		t.Fatalf("a fresh device's counters: %+v", c)
	}
	for i := range 3 {
		if _, _, err := d.Run(context.Background(), ModelName, "", []string{"a", "bc"}); err != nil {
			t.Fatal(err)
		}
		c := d.Counters()
		if c.Batches != uint64(i+1) || c.Wait <= 0 || c.Run < c.Wait {
			t.Fatalf("after %d runs: %+v", i+1, c)
		}
	}
}
