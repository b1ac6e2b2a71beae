package cudabridge

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// modelPTX is model.cu compiled to PTX for sm_80 (the driver JIT-compiles
// it for the GPU it runs on, sm_90 included). Regenerate it with `make ptx`
// or the go:generate line below; see model.cu.
//
//go:generate clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -O2 -ffp-contract=off -S -o model.ptx model.cu
//go:embed model.ptx
var modelPTX []byte

// The kernels of model.cu.
const (
	kernelNameEmbedPool = "bytenet_embed_pool"
	kernelNameDense     = "bytenet_dense"
	kernelNameStep      = "bytenet_step"
)

// DeviceConfig configures one GPU's backend.
type DeviceConfig struct {
	// Ordinal is the CUDA device index, 0 to the device count - 1.
	Ordinal int
	// Limits size the buffers, allocated once per context.
	Limits Limits
	// BatchTimeout bounds one batch whatever its ctx says, so a hung
	// kernel cannot hold a caller for ever. Default 10 s.
	BatchTimeout time.Duration
	// PollSpin is how long a batch's wait polls the stream without a
	// pause (its thread busy) before it sleeps between looks: a GPU batch
	// takes tens to hundreds of microseconds, far less than a sleep's
	// granularity. Default 2 ms.
	PollSpin time.Duration
	// Graphs runs a batch's 4 + 2·ContLen kernels as one CUDA graph
	// launch instead of one launch each, the graph captured once per
	// batch shape and kept while the context lives. The shape is the
	// rows, rounded up to a multiple of graphRowsStep, and the padded
	// input length, rounded up to a power of two; the rows past the batch
	// are empty inputs, computed and not read. On a driver without graphs
	// a Device launches the kernels one by one. Default on: bit-exact
	// with the reference both ways on an H200, and a batch of 100 takes
	// 269 µs of the GPU against 284 launched kernel by kernel (make
	// gpu-test compares both ways with the reference).
	Graphs bool
	// WaitSleep: a batch's wait for the GPU first sleeps, its thread
	// holding its processor (rawSleep: no other goroutine runs there, none
	// has to give it back), for waitSleepShare of the recent waits' mean
	// (at most waitSleepMax), and polls only the rest. Polling the whole
	// wait keeps a core busy: on the H200 host, 9.7% of a CPU-bound
	// server's CPU (run 5's profile). The core the sleep frees is another
	// processor's only if the process has more processors than cores:
	// batchd serve gives it one more per device (devices.cuda_wait_sleep).
	// Linux only. Default off.
	WaitSleep bool
}

// DefaultDeviceConfig returns device ordinal's defaults.
func DefaultDeviceConfig(ordinal int) DeviceConfig {
	return DeviceConfig{Ordinal: ordinal, Limits: DefaultLimits(), BatchTimeout: 10 * time.Second, PollSpin: 2 * time.Millisecond, Graphs: true}
}

// Validate reports the first unusable setting.
func (c DeviceConfig) Validate() error {
	if c.Ordinal < 0 || c.Ordinal >= deviceCountMax {
		return fmt.Errorf("cudabridge: device ordinal %d: want 0 to %d", c.Ordinal, deviceCountMax-1)
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	if c.BatchTimeout <= 0 || c.BatchTimeout > time.Hour {
		return fmt.Errorf("cudabridge: BatchTimeout %v: want more than 0 and at most 1h", c.BatchTimeout)
	}
	if c.PollSpin < 0 || c.PollSpin > time.Second {
		return fmt.Errorf("cudabridge: PollSpin %v: want 0 to 1s", c.PollSpin)
	}
	if c.WaitSleep && !waitSleepSupported {
		return fmt.Errorf("cudabridge: WaitSleep needs Linux")
	}
	return nil
}

// The sleep that starts a batch's wait (DeviceConfig.WaitSleep): this
// share of the recent waits' mean, at most waitSleepMax (a sleep holds
// its processor: a collection's stop waits for it), the mean moving by
// 1/waitMeanWeight of each wait. A batch's GPU time varies little with
// its size (batch 100 takes 1.22x batch 1 with graphs), so 60% of the
// mean seldom sleeps past the end; when it does, the wait measured is the
// sleep, and the mean falls back toward the GPU's time.
const (
	waitSleepShare = 0.6
	waitSleepMax   = time.Millisecond
	waitMeanWeight = 8
)

// sleepFor is the sleep before the next wait, from the waits' mean.
func sleepFor(mean time.Duration) time.Duration {
	return min(time.Duration(float64(mean)*waitSleepShare), waitSleepMax)
}

// nextMean moves the waits' mean toward w.
func nextMean(mean, w time.Duration) time.Duration {
	if mean == 0 {
		return w
	}
	return mean + (w-mean)/waitMeanWeight
}

// The polling of a running batch: after the spin, sleeps that double from
// pollSleepMin to pollSleepMax.
const (
	pollSleepMin = 20 * time.Microsecond
	pollSleepMax = time.Millisecond
)

// The batch graphs (DeviceConfig.Graphs).
const (
	// graphRowsStep is what a graph's rows are rounded up to: 25 shapes
	// of rows at BatchMax 100 instead of 100, for at most 3 empty rows.
	graphRowsStep = 4
	// graphsMax bounds the graphs a context keeps; a batch of another
	// shape launches its kernels one by one. The default limits make
	// 25 × 11 shapes.
	graphsMax = 512
	// graphFailuresMax is how many failures to build a graph (each a
	// device fault) turn graphs off for the Device's life.
	graphFailuresMax = 3
)

// Device runs the model on one GPU: one primary context, one stream, the
// weights uploaded once and the batch buffers (device memory and
// page-locked host memory) allocated once at Limits. A batch is padded to
// its longest input, copied in, run as one set of kernel launches over the
// whole batch (4 + 2·ContLen launches), and its results copied back.
//
// Any CUDA error, a corrupt result or a batch abandoned because its ctx
// ended is a device fault (ErrDeviceFault): the device forgets its context
// and re-creates it (primary context reset, then everything above) on its
// next batch. An abandoned batch whose kernels still run keeps the device
// faulting, without blocking, until they end: a kernel cannot be stopped
// from the host, only its context torn down once it has.
//
// A Device runs one batch at a time and asserts it: a second Forward while
// one is in flight panics (the engine gives each device one worker).
type Device struct {
	drv driver
	cfg DeviceConfig
	w   *Weights
	// weightBytes are the weights as the device gets them, made once.
	weightBytes [][]byte

	running atomic.Int32
	// Kept by Run and forward, read by Counters.
	batches                    atomic.Uint64
	runNs, waitNs              atomic.Int64
	graphsBuilt, graphLaunches atomic.Uint64

	mu  sync.Mutex // guards what follows; held by Forward and Close
	dev cuDevice
	st  *gpuState // nil until set up, and after a teardown
	// fault is why the device must be reset before its next batch; nil
	// when healthy.
	fault  error
	closed bool
	// graphsOff is why batches no longer run as graphs (the driver has
	// none, or building them failed graphFailuresMax times); nil while
	// they do.
	graphsOff     error
	graphFailures int
	// waitMean is the recent batch waits' mean (DeviceConfig.WaitSleep).
	waitMean time.Duration
}

// gpuState is what one context holds.
type gpuState struct {
	ctx    cuContext
	module cuModule
	fn     struct{ embedPool, dense, step cuFunction }
	stream cuStream
	// gen holds a generator's buffers, from its first step (gen_device.go).
	gen *genBufs
	// graphs are the batch graphs built on this context, by shape.
	graphs map[graphShape]cuGraphExec

	// Device buffers, each its own allocation.
	weights []cuDevPtr // in the order of weightArrays
	x, lens cuDevPtr
	p       cuDevPtr
	h       [3]cuDevPtr // h1; h2 and h3, which the continuation alternates
	logits  cuDevPtr
	o       cuDevPtr
	cont    cuDevPtr
	// Host buffers (page-locked): what is copied in and out.
	hx, hlens, hlogits, hcont []byte

	devAllocs  []cuDevPtr
	hostAllocs [][]byte
}

// weightArrays lists the weights in the order they are uploaded.
func weightArrays(w *Weights) [][]float32 {
	return [][]float32{w.Embed, w.W1, w.B1, w.W2, w.B2, w.WL, w.BL, w.WO, w.BO, w.WH, w.WX, w.BH}
}

// The indexes of weightArrays.
const (
	wEmbed = iota
	wW1
	wB1
	wW2
	wB2
	wWL
	wBL
	wWO
	wBO
	wWH
	wWX
	wBH
	wCount
)

// OpenDevice loads the CUDA driver and sets up device cfg.Ordinal. The
// error wraps ErrNoDriver without a usable driver, ErrNoDevice without
// that device, and ErrDeviceFault when setting it up failed.
func OpenDevice(cfg DeviceConfig) (*Device, error) {
	drv, err := loadDriver()
	if err != nil {
		return nil, err
	}
	return openDevice(drv, cfg)
}

func openDevice(drv driver, cfg DeviceConfig) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("cudabridge: %w", err)
	}
	if cfg.Ordinal >= n {
		return nil, fmt.Errorf("cudabridge: device %d: the driver sees %d devices: %w", cfg.Ordinal, n, ErrNoDevice)
	}
	dev, err := drv.DeviceGet(cfg.Ordinal)
	if err != nil {
		return nil, fmt.Errorf("cudabridge: device %d: %w: %w", cfg.Ordinal, ErrNoDevice, err)
	}
	d := &Device{drv: drv, cfg: cfg, w: NewWeights(WeightSeed), dev: dev}
	for _, a := range weightArrays(d.w) {
		d.weightBytes = append(d.weightBytes, float32Bytes(a))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.setup(context.Background()); err != nil {
		return nil, err
	}
	return d, nil
}

// Limits returns the device's limits.
func (d *Device) Limits() Limits { return d.cfg.Limits }

// Ordinal returns the CUDA device index.
func (d *Device) Ordinal() int { return d.cfg.Ordinal }

// Run implements the engine's Backend contract (see CPU.Run); a device
// failure wraps ErrDeviceFault.
func (d *Device) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	start := time.Now()
	defer func() {
		d.runNs.Add(int64(time.Since(start)))
		d.batches.Add(1)
	}()
	return serveBatch(ctx, d, d.cfg.Limits, model, version, inputs)
}

// DeviceCounters are what a Device's Runs have done since it opened.
type DeviceCounters struct {
	// Batches is how many Runs returned.
	Batches uint64
	// Run is the time in them; Wait the part spent waiting for the GPU
	// to finish the work queued (the rest is the host's: padding, kernel
	// launches, decoding, formatting).
	Run, Wait time.Duration
	// GraphLaunches is how many batches ran as one graph launch, and
	// Graphs how many graphs were built (DeviceConfig.Graphs).
	GraphLaunches, Graphs uint64
}

// Counters returns the device's counters. It may be called at any time.
func (d *Device) Counters() DeviceCounters {
	return DeviceCounters{Batches: d.batches.Load(), Run: time.Duration(d.runNs.Load()), Wait: time.Duration(d.waitNs.Load()),
		GraphLaunches: d.graphLaunches.Load(), Graphs: d.graphsBuilt.Load()}
}

// Forward runs inputs (1 to BatchMax, none longer than InputLenMax) as one
// batch on the GPU and returns their outputs. It returns soon after ctx
// ends (the batch is abandoned: a device fault).
func (d *Device) Forward(ctx context.Context, inputs []string) ([]Output, error) {
	if d.running.Add(1) != 1 {
		d.running.Add(-1)
		panic("cudabridge: device: two batches at once")
	}
	defer d.running.Add(-1)
	// The context is current per OS thread; this goroutine keeps its thread
	// until the batch is done.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d.mu.Lock()
	defer d.mu.Unlock()

	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		// Nothing was queued: the device stays healthy.
		return nil, fmt.Errorf("cudabridge: device %d: batch not started: %w", d.cfg.Ordinal, err)
	}
	outs, err := d.forward(ctx, d.st, inputs)
	if err != nil && !errors.Is(err, ErrBatchSize) && !errors.Is(err, ErrInputTooLong) {
		return nil, d.failed(err)
	}
	return outs, err
}

// failed records err as the device's fault and returns it as a device
// fault. The reset waits for the next batch: it frees memory, which would
// wait for kernels that may still run, and Forward must return promptly.
func (d *Device) failed(err error) error {
	if d.fault == nil {
		d.fault = err
	}
	if errors.Is(err, ErrDeviceFault) {
		return err
	}
	return fmt.Errorf("cudabridge: device %d: %w: %w", d.cfg.Ordinal, ErrDeviceFault, err)
}

// reset tears down the faulted context and resets the device's primary
// context, once the stream has nothing running. While an abandoned batch
// still runs it returns a device fault at once, without blocking.
func (d *Device) reset() error {
	if st := d.st; st != nil {
		if err := d.drv.CtxSetCurrent(st.ctx); err == nil {
			done, err := d.drv.StreamQuery(st.stream)
			if err == nil && !done {
				return fmt.Errorf("cudabridge: device %d: an abandoned batch is still running (after: %v); the device resets once it ends: %w",
					d.cfg.Ordinal, d.fault, ErrDeviceFault)
			}
		}
		// Done, or the context is broken (the error): either way nothing
		// more will run on it.
		d.teardown(st)
	}
	// The reset destroys whatever a broken context still holds. Its error
	// is not final: whether the setup that follows works is what counts,
	// and a failed setup is a fault of its own.
	_ = d.drv.PrimaryCtxReset(d.dev)
	d.fault = nil
	return nil
}

// setup creates the context's state: module, functions, stream, buffers,
// and uploads the weights. On failure it undoes what it did and returns a
// device fault; the device stays without a context.
func (d *Device) setup(ctx context.Context) error {
	if d.st != nil {
		panic("cudabridge: setup over a live context")
	}
	st := &gpuState{}
	err := d.build(ctx, st)
	if err != nil {
		d.teardown(st)
		d.fault = err
		return fmt.Errorf("cudabridge: device %d: setup: %w: %w", d.cfg.Ordinal, ErrDeviceFault, err)
	}
	d.st = st
	return nil
}

func (d *Device) build(ctx context.Context, st *gpuState) error {
	drv := d.drv
	c, err := drv.PrimaryCtxRetain(d.dev)
	if err != nil {
		return err
	}
	st.ctx = c
	if err := drv.CtxSetCurrent(c); err != nil {
		return err
	}
	if st.module, err = drv.ModuleLoadData(modelPTX); err != nil {
		return err
	}
	if err := lookupKernels(drv, st.module, []kernelRef{{kernelNameEmbedPool, &st.fn.embedPool}, {kernelNameDense, &st.fn.dense}, {kernelNameStep, &st.fn.step}}); err != nil {
		return err
	}
	if st.stream, err = drv.StreamCreate(); err != nil {
		return err
	}
	lim := d.cfg.Limits
	b := lim.BatchMax
	a := &allocator{drv: drv, st: st}
	devAlloc, hostAlloc := a.dev, a.host
	st.weights = make([]cuDevPtr, wCount)
	for i, wb := range d.weightBytes {
		devAlloc(&st.weights[i], len(wb))
	}
	devAlloc(&st.x, b*lim.InputLenMax)
	devAlloc(&st.lens, b*4)
	devAlloc(&st.p, b*Embed*4)
	for i := range st.h {
		devAlloc(&st.h[i], b*Hidden*4)
	}
	devAlloc(&st.logits, b*Labels*4)
	devAlloc(&st.o, b*Vocab*4)
	devAlloc(&st.cont, b*ContLen)
	hostAlloc(&st.hx, b*lim.InputLenMax)
	hostAlloc(&st.hlens, b*4)
	hostAlloc(&st.hlogits, b*Labels*4)
	hostAlloc(&st.hcont, b*ContLen)
	var staging []byte
	hostAlloc(&staging, weightBytesTotal(d.weightBytes))
	if a.err != nil {
		return a.err
	}
	// The weights go up once, through page-locked staging memory, which
	// is freed with the rest at teardown.
	off := 0
	for i, wb := range d.weightBytes {
		src := staging[off:][:len(wb)]
		copy(src, wb)
		off += len(wb)
		if err := drv.MemcpyHtoDAsync(st.weights[i], src, st.stream); err != nil {
			return err
		}
	}
	return d.wait(ctx, st.stream)
}

// kernelRef names a kernel of the module and where its handle goes.
type kernelRef struct {
	name string
	fn   *cuFunction
}

// lookupKernels looks each kernel of refs up in module.
func lookupKernels(drv driver, module cuModule, refs []kernelRef) error {
	for _, r := range refs {
		var err error
		if *r.fn, err = drv.ModuleGetFunction(module, r.name); err != nil {
			return err
		}
	}
	return nil
}

// allocator allocates device and page-locked host buffers for st, each
// recorded in st so that teardown frees it; after the first failure it
// allocates nothing more and err says why.
type allocator struct {
	drv driver
	st  *gpuState
	err error
}

func (a *allocator) dev(p *cuDevPtr, bytes int) {
	if a.err != nil {
		return
	}
	if *p, a.err = a.drv.MemAlloc(bytes); a.err == nil {
		a.st.devAllocs = append(a.st.devAllocs, *p)
	}
}

func (a *allocator) host(p *[]byte, bytes int) {
	if a.err != nil {
		return
	}
	if *p, a.err = a.drv.MemAllocHost(bytes); a.err == nil {
		a.st.hostAllocs = append(a.st.hostAllocs, *p)
	}
}

func weightBytesTotal(ws [][]byte) int {
	n := 0
	for _, w := range ws {
		n += len(w)
	}
	return n
}

// teardown frees what st holds, best effort: after a fault the driver may
// refuse every call, and the primary context reset that follows frees
// what is left.
func (d *Device) teardown(st *gpuState) {
	drv := d.drv
	for _, e := range st.graphs {
		_ = drv.GraphExecDestroy(e)
	}
	st.graphs = nil
	for _, b := range st.hostAllocs {
		_ = drv.MemFreeHost(b)
	}
	for _, p := range st.devAllocs {
		_ = drv.MemFree(p)
	}
	if st.stream != 0 {
		_ = drv.StreamDestroy(st.stream)
	}
	if st.module != 0 {
		_ = drv.ModuleUnload(st.module)
	}
	if st.ctx != 0 {
		_ = drv.PrimaryCtxRelease(d.dev)
	}
	if d.st == st {
		d.st = nil
	}
}

// forward runs one batch on st's stream: pad into the host buffers, copy
// in, launch, copy out, wait, decode.
func (d *Device) forward(ctx context.Context, st *gpuState, inputs []string) ([]Output, error) {
	lim := d.cfg.Limits
	graphs := d.cfg.Graphs && d.graphsOff == nil
	n, lpad, err := pad(inputs, lim, st.hx, graphs)
	if err != nil {
		return nil, err
	}
	rows := n
	if graphs {
		rows = min((n+graphRowsStep-1)/graphRowsStep*graphRowsStep, lim.BatchMax)
	}
	for i, in := range inputs {
		binary.LittleEndian.PutUint32(st.hlens[i*4:], uint32(len(in)))
	}
	// The rows past the batch are empty inputs: they read no bytes.
	clear(st.hlens[n*4 : rows*4])
	drv, s := d.drv, st.stream
	if err := drv.MemcpyHtoDAsync(st.x, st.hx[:n*lpad], s); err != nil {
		return nil, err
	}
	if err := drv.MemcpyHtoDAsync(st.lens, st.hlens[:rows*4], s); err != nil {
		return nil, err
	}
	if err := d.launch(st, graphShape{rows, lpad}, graphs); err != nil {
		return nil, err
	}
	hlogits, hcont := st.hlogits[:n*Labels*4], st.hcont[:n*ContLen]
	if err := drv.MemcpyDtoHAsync(hlogits, st.logits, s); err != nil {
		return nil, err
	}
	if err := drv.MemcpyDtoHAsync(hcont, st.cont, s); err != nil {
		return nil, err
	}
	waited := time.Now()
	if d.cfg.WaitSleep {
		rawSleep(sleepFor(d.waitMean))
	}
	err = d.wait(ctx, s)
	w := time.Since(waited)
	d.waitNs.Add(int64(w))
	if err != nil {
		return nil, err
	}
	if d.cfg.WaitSleep {
		d.waitMean = nextMean(d.waitMean, w)
	}
	logits := make([]float32, n*Labels)
	for i := range logits {
		logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(hlogits[i*4:]))
	}
	return collect(n, logits, hcont)
}

// launch is one kernel launch: one thread per output element.
type launch struct {
	fn      cuFunction
	threads int
	params  []uint64
}

// graphShape is what a batch's launches depend on besides the context:
// the rows the kernels run over and the padded input length.
type graphShape struct{ rows, lpad int }

// launches returns a batch's kernel launches over shape's rows.
func (st *gpuState) launches(shape graphShape) []launch {
	n, lpad := shape.rows, shape.lpad
	w := st.weights
	p := func(v cuDevPtr) uint64 { return uint64(v) }
	ls := []launch{
		{st.fn.embedPool, n * Embed, []uint64{p(st.x), p(st.lens), p(w[wEmbed]), p(st.p), uint64(n), uint64(lpad)}},
		{st.fn.dense, n * Hidden, []uint64{p(st.p), p(w[wW1]), p(w[wB1]), p(st.h[0]), uint64(n), Embed, Hidden, 1}},
		{st.fn.dense, n * Hidden, []uint64{p(st.h[0]), p(w[wW2]), p(w[wB2]), p(st.h[1]), uint64(n), Hidden, Hidden, 1}},
		{st.fn.dense, n * Labels, []uint64{p(st.h[1]), p(w[wWL]), p(w[wBL]), p(st.logits), uint64(n), Hidden, Labels, 0}},
	}
	cur, next := st.h[1], st.h[2]
	for t := range ContLen {
		ls = append(ls,
			launch{st.fn.dense, n * Vocab, []uint64{p(cur), p(w[wWO]), p(w[wBO]), p(st.o), uint64(n), Hidden, Vocab, 0}},
			launch{st.fn.step, n * Hidden, []uint64{p(st.o), p(cur), p(w[wEmbed]), p(w[wWH]), p(w[wWX]), p(w[wBH]), p(next), p(st.cont), uint64(n), uint64(t)}},
		)
		cur, next = next, cur
	}
	return ls
}

// launchAll queues ls on s, one launch each.
func launchAll(drv driver, s cuStream, ls []launch) error {
	for _, l := range ls {
		grid := (l.threads + launchBlockThreads - 1) / launchBlockThreads
		if grid < 1 || grid > launchGridBlocksMax {
			panic(fmt.Sprintf("cudabridge: launch of %d threads", l.threads))
		}
		if err := drv.LaunchKernel(l.fn, uint32(grid), launchBlockThreads, s, l.params); err != nil {
			return err
		}
	}
	return nil
}

// launch queues a batch's kernels over shape: as its graph when graphs
// is set and the shape has one or gets one now, else one by one.
func (d *Device) launch(st *gpuState, shape graphShape, graphs bool) error {
	if graphs {
		e, ok := st.graphs[shape]
		if !ok && len(st.graphs) < graphsMax {
			var err error
			if e, err = d.buildGraph(st, shape); err != nil {
				return err
			}
			ok = e != 0
		}
		if ok {
			d.graphLaunches.Add(1)
			return d.drv.GraphLaunch(e, st.stream)
		}
	}
	return launchAll(d.drv, st.stream, st.launches(shape))
}

// buildGraph captures shape's launches on st's stream into a graph and
// keeps it in st. A driver without graphs turns them off and returns no
// graph and no error; any other failure is the batch's (a device fault),
// and the graphFailuresMax'th turns graphs off too.
func (d *Device) buildGraph(st *gpuState, shape graphShape) (cuGraphExec, error) {
	drv, s := d.drv, st.stream
	if err := drv.StreamBeginCapture(s); err != nil {
		var ce *CUDAError
		if errors.Is(err, errNoGraphs) || errors.As(err, &ce) && (ce.Code == cudaErrorNotSupported || ce.Code == cudaErrorCaptureUnsupported) {
			d.graphsOff = err
			return 0, nil
		}
		return 0, d.graphFailed(err)
	}
	// The capture always ends, so that the stream runs work again.
	err := launchAll(drv, s, st.launches(shape))
	g, endErr := drv.StreamEndCapture(s)
	err = errors.Join(err, endErr)
	var e cuGraphExec
	if err == nil {
		e, err = drv.GraphInstantiate(g)
	}
	if g != 0 {
		// The executable graph keeps what it needs of the graph.
		err = errors.Join(err, drv.GraphDestroy(g))
	}
	if err != nil {
		if e != 0 {
			_ = drv.GraphExecDestroy(e)
		}
		return 0, d.graphFailed(err)
	}
	if st.graphs == nil {
		st.graphs = make(map[graphShape]cuGraphExec)
	}
	st.graphs[shape] = e
	d.graphsBuilt.Add(1)
	return e, nil
}

// graphFailed counts a failure to build a graph and returns it.
func (d *Device) graphFailed(err error) error {
	d.graphFailures++
	if d.graphFailures >= graphFailuresMax {
		d.graphsOff = fmt.Errorf("cudabridge: device %d: %d failures building CUDA graphs, the last: %w", d.cfg.Ordinal, d.graphFailures, err)
	}
	return fmt.Errorf("cudabridge: device %d: building a CUDA graph: %w", d.cfg.Ordinal, err)
}

// wait polls the stream until its work is done, ctx ends, or the batch
// timeout passes; the last two abandon the batch (a device fault: its
// kernels may still be running). It spins for PollSpin, then sleeps
// between looks.
func (d *Device) wait(ctx context.Context, s cuStream) error {
	start := time.Now()
	deadline := start.Add(d.cfg.BatchTimeout)
	sleep := pollSleepMin
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		done, err := d.drv.StreamQuery(s)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cudabridge: device %d: batch abandoned after %v: %w: %w", d.cfg.Ordinal, time.Since(start), ErrDeviceFault, err)
		}
		now := time.Now()
		if now.After(deadline) {
			return fmt.Errorf("cudabridge: device %d: batch still running after %v (BatchTimeout): %w", d.cfg.Ordinal, d.cfg.BatchTimeout, ErrDeviceFault)
		}
		if now.Sub(start) < d.cfg.PollSpin {
			// No runtime.Gosched here: this goroutine holds its thread
			// (LockOSThread), so each yield handed its processor to
			// another thread and slept until the scheduler came back to it.
			// On an H200 host under a closed loop of 1,024 connections, a
			// batch then waited 382-408 µs for its GPU work, against
			// 112-117 µs polling without a pause, and the server answered
			// 120-125k REST req/s against 136-140k (cudabridge/gpu-ab.sh,
			// 2026-11-28, RESULTS.md).
			continue
		}
		if timer == nil {
			timer = time.NewTimer(sleep)
		} else {
			timer.Reset(sleep)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		sleep = min(2*sleep, pollSleepMax)
	}
}

// Close frees the device's context state. A device whose abandoned batch
// still runs cannot be freed; Close says so and leaves it to the process's
// exit. Close is idempotent; Forward after Close fails.
func (d *Device) Close() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	st := d.st
	if st == nil {
		return nil
	}
	if err := d.drv.CtxSetCurrent(st.ctx); err != nil {
		d.teardown(st)
		return fmt.Errorf("cudabridge: device %d: close: %w", d.cfg.Ordinal, err)
	}
	if done, err := d.drv.StreamQuery(st.stream); err == nil && !done {
		d.st = nil
		return fmt.Errorf("cudabridge: device %d: close: a batch is still running; its context is left to the process's exit", d.cfg.Ordinal)
	}
	d.teardown(st)
	return nil
}

// float32Bytes returns v little-endian, as the device stores it.
func float32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[i*4:], math.Float32bits(f))
	}
	return b
}
