package cudabridge

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// openFake opens device 0 of a fresh fake driver with small polling
// settings.
func openFake(t *testing.T, lim Limits) (*Device, *fakeDriver) {
	t.Helper()
	cfg := DefaultDeviceConfig(0)
	cfg.Limits = lim
	return openFakeConfig(t, newFakeDriver(2), cfg)
}

// openFakeConfig opens a Device of cfg (without its polling spin) on f,
// closes it at the test's end and checks that f then holds nothing.
func openFakeConfig(t *testing.T, f *fakeDriver, cfg DeviceConfig) (*Device, *fakeDriver) {
	t.Helper()
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
	forwardMatches(t, d, rand.New(rand.NewPCG(3, 4)), 1, 3, 17, BatchMax)
}

// forwardMatches runs a random batch of each size on d: every output must
// be the reference's.
func forwardMatches(t *testing.T, d *Device, r *rand.Rand, sizes ...int) {
	t.Helper()
	w := NewWeights(WeightSeed)
	for _, n := range sizes {
		batch := randomBatch(r, n)
		outs, err := d.Forward(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		checkOutputs(t, w, batch, outs)
	}
}

// TestDeviceBuffersOnceLaunchesPerBatch: setup allocates once; each batch
// is two copies in (of the padded inputs and the lengths), its kernels and
// two copies out, and allocates nothing. Without graphs the kernels are
// 4+2·ContLen launches a batch. With them a batch is one graph launch, and
// only a shape's first batch launches (into its capture): 5, 6 and 7
// inputs of 10 bytes are one shape (8 rows of 16 bytes), 9 another.
func TestDeviceBuffersOnceLaunchesPerBatch(t *testing.T) {
	for _, graphs := range []bool{false, true} {
		t.Run(fmt.Sprintf("graphs %v", graphs), func(t *testing.T) {
			cfg := DefaultDeviceConfig(0)
			cfg.Graphs = graphs
			d, f := openFakeConfig(t, newFakeDriver(1), cfg)
			allocs, hostAllocs, loads := f.count("MemAlloc"), f.count("MemAllocHost"), f.count("ModuleLoadData")
			if allocs != wCount+9 || hostAllocs != 5 || loads != 1 {
				t.Fatalf("setup: %d device allocations, %d host, %d module loads; want %d, 5, 1", allocs, hostAllocs, loads, wCount+9)
			}
			for i, n := range []int{5, 6, 9, 7} {
				h2d, d2h, launches, graphLaunches := f.count("MemcpyHtoDAsync"), f.count("MemcpyDtoHAsync"), f.count("LaunchKernel"), f.count("GraphLaunch")
				if _, err := d.Forward(context.Background(), ProfileInputs(n, 10)); err != nil {
					t.Fatal(err)
				}
				if got := f.count("MemcpyHtoDAsync") - h2d; got != 2 {
					t.Errorf("batch %d: %d copies in, want 2", i, got)
				}
				if got := f.count("MemcpyDtoHAsync") - d2h; got != 2 {
					t.Errorf("batch %d: %d copies out, want 2", i, got)
				}
				wantLaunches, wantGraphLaunches := 4+2*ContLen, 0
				if graphs {
					wantGraphLaunches = 1
					if n == 6 || n == 7 {
						wantLaunches = 0
					}
				}
				if got, gotG := f.count("LaunchKernel")-launches, f.count("GraphLaunch")-graphLaunches; got != wantLaunches || gotG != wantGraphLaunches {
					t.Errorf("batch %d: %d launches and %d graph launches, want %d and %d", i, got, gotG, wantLaunches, wantGraphLaunches)
				}
			}
			if f.count("MemAlloc") != allocs || f.count("MemAllocHost") != hostAllocs || f.count("ModuleLoadData") != loads {
				t.Error("batches allocated or loaded again")
			}
			if c, want := d.Counters(), map[bool]uint64{false: 0, true: 2}[graphs]; c.Graphs != want || c.GraphLaunches != 2*want {
				t.Errorf("counters %+v: want %d graphs, %d graph launches", c, want, 2*want)
			}
		})
	}
}

// TestDeviceGraphsMatchLaunches: whatever the batch (its size, its inputs'
// lengths, limits that are not powers of two, so that the rounded shapes
// are capped), a device running graphs gives the outputs of one launching
// each kernel, and both the reference's; it builds one graph per shape
// and runs every batch as one.
func TestDeviceGraphsMatchLaunches(t *testing.T) {
	lim := Limits{BatchMax: 10, InputLenMax: 24}
	cfg := DefaultDeviceConfig(0)
	cfg.Limits = lim
	cfg.Graphs = true
	g, _ := openFakeConfig(t, newFakeDriver(1), cfg)
	cfg.Graphs = false
	direct, _ := openFakeConfig(t, newFakeDriver(1), cfg)
	w := NewWeights(WeightSeed)
	shapes := map[graphShape]bool{}
	batches := 0
	rapid.Check(t, func(rt *rapid.T) {
		var batch []string
		for _, in := range rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 0, lim.InputLenMax), 1, lim.BatchMax).Draw(rt, "batch") {
			batch = append(batch, string(in))
		}
		outs, err := g.Forward(context.Background(), batch)
		if err != nil {
			rt.Fatal(err)
		}
		want, err := direct.Forward(context.Background(), batch)
		if err != nil {
			rt.Fatal(err)
		}
		for i, in := range batch {
			if outs[i] != want[i] || outs[i] != w.Infer([]byte(in)) {
				rt.Fatalf("item %d of %d (%d bytes): graphs %v, launches %v, reference %v", i, len(batch), len(in), outs[i], want[i], w.Infer([]byte(in)))
			}
		}
		longest := 1
		for _, in := range batch {
			longest = max(longest, len(in))
		}
		rows, lpad := min((len(batch)+3)/4*4, lim.BatchMax), 1
		for lpad < longest {
			lpad *= 2
		}
		shapes[graphShape{rows, min(lpad, lim.InputLenMax)}] = true
		batches++
	})
	if c := g.Counters(); c.Graphs != uint64(len(shapes)) || c.GraphLaunches != uint64(batches) {
		t.Errorf("%d batches of %d shapes: %d graphs built, %d graph launches", batches, len(shapes), c.Graphs, c.GraphLaunches)
	}
}

// TestDeviceWithoutGraphs: on a driver without graphs, a device that asks
// for them launches each kernel, correctly, and asks only once.
func TestDeviceWithoutGraphs(t *testing.T) {
	f := newFakeDriver(1)
	f.noGraphs = true
	cfg := DefaultDeviceConfig(0)
	cfg.Graphs = true
	d, _ := openFakeConfig(t, f, cfg)
	w := NewWeights(WeightSeed)
	for i := range 3 {
		batch := ProfileInputs(3+i, 5)
		launches := f.count("LaunchKernel")
		outs, err := d.Forward(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		checkOutputs(t, w, batch, outs)
		if got := f.count("LaunchKernel") - launches; got != 4+2*ContLen {
			t.Errorf("batch %d: %d launches, want %d", i, got, 4+2*ContLen)
		}
	}
	if c := d.Counters(); c.Graphs != 0 || c.GraphLaunches != 0 || !errors.Is(d.graphsOff, errNoGraphs) {
		t.Errorf("counters %+v, graphs off for %v", c, d.graphsOff)
	}
}

// TestDeviceGraphFaults: a failure building a graph, or launching one,
// fails its batch as a device fault; the device resets, builds its graphs
// again and is correct. After graphFailuresMax failures to build one it
// launches kernels one by one.
func TestDeviceGraphFaults(t *testing.T) {
	cfg := DefaultDeviceConfig(0)
	cfg.Graphs = true
	d, f := openFakeConfig(t, newFakeDriver(1), cfg)
	w := NewWeights(WeightSeed)
	batch := []string{"one", "two", "three"}
	inject := func(op string) {
		f.mu.Lock()
		f.failOp, f.failAt, f.failCode, f.sticky = op, f.counts[op]+1, 719, false
		f.mu.Unlock()
	}
	// Each fault's batch is of a shape not built yet: 4, 8, 12, 16 rows.
	fault := func(op string, n int) {
		t.Helper()
		inject(op)
		_, err := d.Forward(context.Background(), ProfileInputs(n, 3))
		var ce *CUDAError
		if !errors.Is(err, ErrDeviceFault) || !errors.As(err, &ce) || ce.Code != 719 {
			t.Fatalf("%s failed: err %v; want ErrDeviceFault wrapping the injected CUDA error", op, err)
		}
	}
	ok := func() {
		t.Helper()
		outs, err := d.Forward(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		checkOutputs(t, w, batch, outs)
	}
	ok()
	fault("GraphLaunch", 3)
	built := d.Counters().Graphs
	ok()
	if d.Counters().Graphs != built+1 {
		t.Error("the graph was not built again on the reset context")
	}
	for i, op := range []string{"GraphInstantiate", "StreamEndCapture"} {
		fault(op, 5+4*i)
		if d.graphsOff != nil {
			t.Fatalf("graphs off after %d failures: %v", i+1, d.graphsOff)
		}
		ok()
	}
	fault("StreamBeginCapture", 13)
	if d.graphsOff == nil {
		t.Fatalf("graphs still on after %d failures to build one", graphFailuresMax)
	}
	launches, graphLaunches := f.count("LaunchKernel"), d.Counters().GraphLaunches
	ok()
	if f.count("LaunchKernel")-launches != 4+2*ContLen || d.Counters().GraphLaunches != graphLaunches {
		t.Error("graphs off: the batch did not launch its kernels one by one")
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

// TestDeviceWaitSleep: with WaitSleep a batch's wait starts with a sleep
// of 60% of the waits' mean, which the waits move; every output is still
// the reference's, and a device fault still fails its batch.
func TestDeviceWaitSleep(t *testing.T) {
	cfg := DefaultDeviceConfig(0)
	cfg.WaitSleep = true
	d, f := openFakeConfig(t, newFakeDriver(1), cfg)
	r := rand.New(rand.NewPCG(5, 6))
	forwardMatches(t, d, r, 1, 9, 40, BatchMax)
	if d.waitMean <= 0 {
		t.Fatalf("waits' mean %v after 4 batches", d.waitMean)
	}
	f.mu.Lock()
	f.failOp, f.failAt, f.failCode, f.sticky = "StreamQuery", f.counts["StreamQuery"]+1, 719, true
	f.mu.Unlock()
	if _, err := d.Forward(context.Background(), []string{"x"}); !errors.Is(err, ErrDeviceFault) {
		t.Fatalf("a failed wait: %v, want a device fault", err)
	}
	// The batch after the fault.
	forwardMatches(t, d, r, 2)
}

// The sleep is 60% of the waits' mean, at most waitSleepMax; the mean
// starts at the first wait and moves an eighth of the way to each.
func TestWaitSleepMean(t *testing.T) {
	if got := sleepFor(200 * time.Microsecond); got != 120*time.Microsecond {
		t.Errorf("sleep for a mean of 200us: %v, want 120us", got)
	}
	if got := sleepFor(time.Second); got != waitSleepMax {
		t.Errorf("sleep for a mean of 1s: %v, want %v", got, waitSleepMax)
	}
	if got := nextMean(0, 300*time.Microsecond); got != 300*time.Microsecond {
		t.Errorf("first mean %v, want the first wait", got)
	}
	// Sleeping past the GPU's end, the wait measured is the sleep: the
	// mean falls until the sleep is within the GPU's time.
	mean, gpu := 500*time.Microsecond, 200*time.Microsecond
	for range 100 {
		mean = nextMean(mean, max(gpu, sleepFor(mean)))
	}
	if s := sleepFor(mean); s > gpu {
		t.Errorf("after 100 batches of %v the sleep is %v: past the GPU's end", gpu, s)
	}
}
