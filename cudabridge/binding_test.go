package cudabridge

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
	"pgregory.net/rapid"

	"github.com/batchd/batchd/cudabridge/cudatest"
)

// TestBindingAgainstCFake runs the real purego binding (cudaDriver), not
// the Go fake, against testdata/fakecuda.c: a C library with libcuda's
// exported names and signatures whose contexts are thread-local, whose
// launches decode kernelParams as the real driver does and whose kernels
// are model.cu's in C. It checks, short of a GPU, what would break first
// on one: symbol names, argument order and types (cuLaunchKernel's stack
// arguments included), the void** parameter packing, the JIT log options,
// out-parameters, error names and texts, page-locked host buffers, and a
// context made current on whichever thread runs the batch. It needs a C
// compiler to build the library, and skips without one.
func TestBindingAgainstCFake(t *testing.T) {
	lib := buildCFake(t)
	drv, err := openDriver(lib)
	if err != nil {
		t.Fatal(err)
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	var live, launches, graphLaunches func() int32
	purego.RegisterLibFunc(&live, h, "fakecuda_live")
	purego.RegisterLibFunc(&launches, h, "fakecuda_launches")
	purego.RegisterLibFunc(&graphLaunches, h, "fakecuda_graph_launches")
	if !drv.hasGraphs {
		t.Fatal("the graph API was not bound")
	}

	v, devs, err := listDevices(drv)
	if err != nil {
		t.Fatal(err)
	}
	if v.String() != "12.4" || len(devs) != 1 || devs[0].Name != "Fake C GPU 0" || devs[0].MemoryBytes != 80<<30 {
		t.Fatalf("version %v, devices %+v", v, devs)
	}
	var ce *CUDAError
	if _, err := drv.DeviceGet(3); !errors.As(err, &ce) || ce.Code != 101 || ce.Error() != "cuDeviceGet: CUresult 101" {
		t.Errorf("device 3: %v; want CUresult 101 without a name", err)
	}

	// The JIT error log comes back through the option arrays.
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		c, err := drv.PrimaryCtxRetain(0)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = drv.PrimaryCtxRelease(0) }()
		if _, err := drv.ModuleLoadData([]byte("FAIL_JIT")); err == nil {
			t.Fatal("a module load without a current context worked")
		}
		if err := drv.CtxSetCurrent(c); err != nil {
			t.Fatal(err)
		}
		_, err = drv.ModuleLoadData([]byte("// FAIL_JIT"))
		if !errors.As(err, &ce) || ce.Code != 218 || ce.Name != "CUDA_ERROR_INVALID_PTX" || ce.Text != "a PTX JIT compilation failed" ||
			!strings.Contains(ce.Log, "fake JIT refused the image") {
			t.Fatalf("failed JIT: %v; want CUDA_ERROR_INVALID_PTX with its text and log", err)
		}
	}()

	// A batch runs as one graph launch (captured on its shape's first
	// batch), or, without graphs, as 4 + 2·ContLen launches.
	w := NewWeights(WeightSeed)
	r := rand.New(rand.NewPCG(9, 9))
	cfg := DefaultDeviceConfig(0)
	cfg.Graphs = false
	direct, err := openDevice(drv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	forwardOnThread(t, direct, w, randomBatch(r, 3), launches, 4+2*ContLen, graphLaunches, 0)
	if err := direct.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Graphs = true
	d, err := openDevice(drv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 5, BatchMax, 2} {
		forwardOnThread(t, d, w, randomBatch(r, n), launches, 0, graphLaunches, 1)
	}
	if c := d.Counters(); c.Graphs < 1 || c.Graphs > 4 {
		t.Errorf("%d graphs built for 4 batches", c.Graphs)
	}

	// The generation kernels, model.cu's in C, through the binding: the
	// GPU generator's bytes and states are Gen's, bit for bit.
	lim := GenLimits{SeqsMax: 4, StepTokensMax: 1 << 10}
	rapid.Check(t, func(rt *rapid.T) {
		ref, _ := NewGen(GenOptions{SeqsMax: lim.SeqsMax})
		g, err := d.NewGen(GenOptions{}, lim)
		if err != nil {
			rt.Fatal(err)
		}
		randomGenJobs(rt, ref, g, lim.SeqsMax, func(rt *rapid.T, held map[uint64]bool) {
			pool := readDeviceFloats(rt, d, d.st.gen.pool, lim.SeqsMax*Embed)
			s := readDeviceFloats(rt, d, d.st.gen.s, lim.SeqsMax*Hidden)
			for id := range held {
				if err := sameState(ref, id, g.tab, pool, s); err != nil {
					rt.Fatal(err)
				}
			}
		})
	})

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := live(); n != 0 {
		t.Errorf("after Close the fake driver holds %d allocations, streams, modules or retains", n)
	}
}

// forwardOnThread runs batch on d from a goroutine that keeps its thread
// locked to its end, so the thread dies with it and the next batch runs on
// another: the context must be made current on each. It checks the
// outputs and how many launches and graph launches the fake counted.
func forwardOnThread(t *testing.T, d *Device, w *Weights, batch []string, launches func() int32, wantLaunches int32, graphLaunches func() int32, wantGraphLaunches int32) {
	t.Helper()
	l0, g0 := launches(), graphLaunches()
	done := make(chan error, 1)
	var outs []Output
	go func() {
		runtime.LockOSThread()
		var err error
		outs, err = d.Forward(context.Background(), batch)
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("batch of %d: %v", len(batch), err)
	}
	checkOutputs(t, w, batch, outs)
	if l, g := launches()-l0, graphLaunches()-g0; l != wantLaunches || g != wantGraphLaunches {
		t.Errorf("batch of %d: %d launches and %d graph launches, want %d and %d", len(batch), l, g, wantLaunches, wantGraphLaunches)
	}
}

// readDeviceFloats copies n floats of device memory at p back through
// page-locked memory, on d's context and stream.
func readDeviceFloats(t *rapid.T, d *Device, p cuDevPtr, n int) []float32 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := d.st
	if err := d.drv.CtxSetCurrent(st.ctx); err != nil {
		t.Fatal(err)
	}
	h, err := d.drv.MemAllocHost(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.drv.MemFreeHost(h) }()
	if err := d.drv.MemcpyDtoHAsync(h, p, st.stream); err != nil {
		t.Fatal(err)
	}
	if err := d.wait(context.Background(), st.stream); err != nil {
		t.Fatal(err)
	}
	return bytesFloat32(h)
}

// buildCFake builds testdata/fakecuda.c into a libcuda.so.1 and returns
// its path; it skips without a C compiler.
func buildCFake(tb testing.TB) string {
	tb.Helper()
	return cudatest.FakeDriver(tb, filepath.Join("testdata", "fakecuda.c"))
}

// BenchmarkBindingCall is one driver call through the binding, into the C
// fake's cuStreamQuery (which does next to nothing): the binding's own
// cost a call, which a batch pays some 25 times (launches, copies, the
// wait's queries).
func BenchmarkBindingCall(b *testing.B) {
	drv, err := openDriver(buildCFake(b))
	if err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := drv.PrimaryCtxRetain(0)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = drv.PrimaryCtxRelease(0) }()
	if err := drv.CtxSetCurrent(c); err != nil {
		b.Fatal(err)
	}
	s, err := drv.StreamCreate()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = drv.StreamDestroy(s) }()
	for b.Loop() {
		if _, err := drv.StreamQuery(s); err != nil {
			b.Fatal(err)
		}
	}
}
