package cudabridge

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// fakeDriver is the CUDA driver API in Go, for the tests: device memory is
// Go memory at made-up addresses, copies and launches queue on the stream
// and run when the stream is queried (as a real stream runs them after the
// calls return), and the "kernels" are the Go kernels. It checks what a
// real driver would punish: a call without a current context, an address
// that is not the start of a live allocation, a copy larger than its
// buffers, a kernel reading or writing past an allocation (an illegal
// address), freeing what was not allocated. And it injects faults:
// failing calls, sticky errors, hung kernels.
type fakeDriver struct {
	mu sync.Mutex

	devices int
	next    uint64
	mem     map[cuDevPtr][]byte
	host    map[*byte]int // page-locked allocations by first byte: their size
	retains map[cuDevice]int
	current cuContext
	ctxGen  int // bumped by a reset; contexts carry it
	modules map[cuModule]bool
	streams map[cuStream][]func() error
	funcs   map[cuFunction]string
	// capturing holds the work recorded on a stream being captured;
	// graphs and execs the graphs made and instantiated from them.
	capturing map[cuStream][]func() error
	graphs    map[cuGraph][]func() error
	execs     map[cuGraphExec][]func() error
	// noGraphs makes the fake a driver without graphs.
	noGraphs bool

	// Injection: failOp fails the failAt'th call (1-based) of that op with
	// failCode; sticky makes the failure stick until a primary context
	// reset, as launch failures do on a GPU.
	failOp   string
	failAt   int
	failCode int
	sticky   bool
	broken   error
	// hang keeps every stream busy: queries say not done, nothing runs.
	hang bool
	// queried, when set, is closed at the first query of a stream.
	queried chan struct{}

	counts map[string]int
}

func newFakeDriver(devices int) *fakeDriver {
	return &fakeDriver{
		devices: devices,
		next:    0x10000,
		mem:     map[cuDevPtr][]byte{},
		host:    map[*byte]int{},
		retains: map[cuDevice]int{},
		modules: map[cuModule]bool{},
		streams: map[cuStream][]func() error{},
		funcs:   map[cuFunction]string{},
		counts:  map[string]int{},

		capturing: map[cuStream][]func() error{},
		graphs:    map[cuGraph][]func() error{},
		execs:     map[cuGraphExec][]func() error{},
	}
}

var _ driver = (*fakeDriver)(nil)

// fakeError is the *CUDAError a real driver would return.
func fakeError(op string, code int) error {
	names := map[int]string{1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 201: "CUDA_ERROR_INVALID_CONTEXT",
		218: "CUDA_ERROR_INVALID_PTX", 400: "CUDA_ERROR_INVALID_HANDLE", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 719: "CUDA_ERROR_LAUNCH_FAILED"}
	return &CUDAError{Op: op, Code: code, Name: names[code], Text: "injected by the fake driver"}
}

// call counts op and returns the injected or sticky error, if any. ctx
// says the op needs a current context.
func (f *fakeDriver) call(op string, ctx bool) error {
	f.counts[op]++
	if f.broken != nil && ctx {
		return f.broken
	}
	if f.failOp == op && f.counts[op] == f.failAt {
		err := fakeError(op, f.failCode)
		if f.sticky {
			f.broken = err
		}
		return err
	}
	if ctx && (f.current == 0 || int(f.current>>32) != f.ctxGen || f.retains[cuDevice(f.current&0xffff)] == 0) {
		return fakeError(op, 201)
	}
	return nil
}

func (f *fakeDriver) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[op]
}

func (f *fakeDriver) DriverVersion() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 12040, f.call("DriverVersion", false)
}

func (f *fakeDriver) DeviceCount() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.devices, f.call("DeviceCount", false)
}

func (f *fakeDriver) DeviceGet(ordinal int) (cuDevice, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("DeviceGet", false); err != nil {
		return 0, err
	}
	if ordinal < 0 || ordinal >= f.devices {
		return 0, fakeError("DeviceGet", 101)
	}
	return cuDevice(ordinal), nil
}

func (f *fakeDriver) DeviceName(dev cuDevice) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("Fake GPU %d", dev), f.call("DeviceName", false)
}

func (f *fakeDriver) DeviceTotalMem(dev cuDevice) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 80 << 30, f.call("DeviceTotalMem", false)
}

func (f *fakeDriver) PrimaryCtxRetain(dev cuDevice) (cuContext, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("PrimaryCtxRetain", false); err != nil {
		return 0, err
	}
	f.retains[dev]++
	return cuContext(uint64(f.ctxGen)<<32 | 1<<16 | uint64(dev)), nil
}

func (f *fakeDriver) PrimaryCtxRelease(dev cuDevice) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("PrimaryCtxRelease", false); err != nil {
		return err
	}
	if f.retains[dev] == 0 {
		return fakeError("PrimaryCtxRelease", 201)
	}
	f.retains[dev]--
	return nil
}

// PrimaryCtxReset destroys everything the context held and clears a
// sticky error; contexts made before it are invalid after it.
func (f *fakeDriver) PrimaryCtxReset(dev cuDevice) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("PrimaryCtxReset", false); err != nil {
		return err
	}
	f.broken = nil
	f.ctxGen++
	clear(f.mem)
	clear(f.host)
	clear(f.modules)
	clear(f.streams)
	clear(f.funcs)
	clear(f.capturing)
	clear(f.graphs)
	clear(f.execs)
	return nil
}

func (f *fakeDriver) CtxSetCurrent(c cuContext) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("CtxSetCurrent", false); err != nil {
		return err
	}
	f.current = c
	return nil
}

func (f *fakeDriver) ModuleLoadData(ptx []byte) (cuModule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ModuleLoadData", true); err != nil {
		if ce, ok := err.(*CUDAError); ok && ce.Code == 218 {
			ce.Log = "ptxas application ptx input, line 1; error: injected"
		}
		return 0, err
	}
	if len(ptx) == 0 {
		return 0, fakeError("ModuleLoadData", 218)
	}
	m := cuModule(f.alloc())
	f.modules[m] = true
	return m, nil
}

func (f *fakeDriver) ModuleUnload(m cuModule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ModuleUnload", true); err != nil {
		return err
	}
	if !f.modules[m] {
		return fakeError("ModuleUnload", 400)
	}
	delete(f.modules, m)
	return nil
}

func (f *fakeDriver) ModuleGetFunction(m cuModule, name string) (cuFunction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ModuleGetFunction", true); err != nil {
		return 0, err
	}
	switch {
	case !f.modules[m]:
		return 0, fakeError("ModuleGetFunction", 400)
	case !slices.Contains([]string{kernelNameEmbedPool, kernelNameDense, kernelNameStep, kernelNameGenPool, kernelNameGenMean, kernelNameGenFeed, kernelNameGenScatter, kernelNameGenGather}, name):
		return 0, fakeError("ModuleGetFunction "+name, 500)
	}
	fn := cuFunction(f.alloc())
	f.funcs[fn] = name
	return fn, nil
}

// alloc returns a fresh address, 256-byte aligned like a real one.
func (f *fakeDriver) alloc() uint64 {
	p := f.next
	f.next += 1 << 20
	return p
}

func (f *fakeDriver) MemAlloc(bytes int) (cuDevPtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("MemAlloc", true); err != nil {
		return 0, err
	}
	if bytes < 1 || bytes > 1<<20 {
		return 0, fakeError("MemAlloc", 2)
	}
	p := cuDevPtr(f.alloc())
	f.mem[p] = make([]byte, bytes)
	return p, nil
}

func (f *fakeDriver) MemFree(p cuDevPtr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("MemFree", true); err != nil {
		return err
	}
	if _, ok := f.mem[p]; !ok {
		return fakeError("MemFree", 1)
	}
	delete(f.mem, p)
	return nil
}

func (f *fakeDriver) MemAllocHost(bytes int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("MemAllocHost", true); err != nil {
		return nil, err
	}
	b := make([]byte, bytes)
	f.host[&b[0]] = bytes
	return b, nil
}

func (f *fakeDriver) MemFreeHost(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("MemFreeHost", true); err != nil {
		return err
	}
	if len(b) == 0 || f.host[&b[0]] != len(b) {
		return fakeError("MemFreeHost", 1)
	}
	delete(f.host, &b[0])
	return nil
}

func (f *fakeDriver) StreamCreate() (cuStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("StreamCreate", true); err != nil {
		return 0, err
	}
	s := cuStream(f.alloc())
	f.streams[s] = nil
	return s, nil
}

func (f *fakeDriver) StreamDestroy(s cuStream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("StreamDestroy", true); err != nil {
		return err
	}
	if _, ok := f.streams[s]; !ok {
		return fakeError("StreamDestroy", 400)
	}
	delete(f.streams, s)
	return nil
}

// StreamQuery runs what is queued on s, unless the fake hangs.
func (f *fakeDriver) StreamQuery(s cuStream) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.queried != nil {
		close(f.queried)
		f.queried = nil
	}
	if err := f.call("StreamQuery", true); err != nil {
		return false, err
	}
	q, ok := f.streams[s]
	if !ok {
		return false, fakeError("StreamQuery", 400)
	}
	if _, capturing := f.capturing[s]; capturing {
		return false, fakeError("StreamQuery", cudaErrorCaptureUnsupported)
	}
	if f.hang && len(q) > 0 {
		return false, nil
	}
	for _, op := range q {
		if err := op(); err != nil {
			// A failure on the stream is sticky, as on a GPU.
			f.broken = err
			f.streams[s] = nil
			return false, err
		}
	}
	f.streams[s] = nil
	return true, nil
}

func (f *fakeDriver) enqueue(op string, s cuStream, fn func() error) error {
	if err := f.call(op, true); err != nil {
		return err
	}
	if _, ok := f.streams[s]; !ok {
		return fakeError(op, 400)
	}
	if q, capturing := f.capturing[s]; capturing {
		f.capturing[s] = append(q, fn)
		return nil
	}
	f.streams[s] = append(f.streams[s], fn)
	return nil
}

func (f *fakeDriver) StreamBeginCapture(s cuStream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noGraphs {
		return errNoGraphs
	}
	if err := f.call("StreamBeginCapture", true); err != nil {
		return err
	}
	if _, ok := f.streams[s]; !ok {
		return fakeError("StreamBeginCapture", 400)
	}
	if _, ok := f.capturing[s]; ok {
		return fakeError("StreamBeginCapture", 1)
	}
	f.capturing[s] = []func() error{}
	return nil
}

func (f *fakeDriver) StreamEndCapture(s cuStream) (cuGraph, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, capturing := f.capturing[s]
	if !capturing {
		f.counts["StreamEndCapture"]++
		return 0, fakeError("StreamEndCapture", 1)
	}
	delete(f.capturing, s)
	if err := f.call("StreamEndCapture", true); err != nil {
		return 0, err
	}
	g := cuGraph(f.alloc())
	f.graphs[g] = q
	return g, nil
}

func (f *fakeDriver) GraphInstantiate(g cuGraph) (cuGraphExec, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("GraphInstantiate", true); err != nil {
		return 0, err
	}
	q, ok := f.graphs[g]
	if !ok {
		return 0, fakeError("GraphInstantiate", 400)
	}
	e := cuGraphExec(f.alloc())
	f.execs[e] = slices.Clone(q)
	return e, nil
}

// GraphLaunch queues the graph's work on s, in the order it was captured.
func (f *fakeDriver) GraphLaunch(e cuGraphExec, s cuStream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.execs[e]
	if !ok {
		f.counts["GraphLaunch"]++
		return fakeError("GraphLaunch", 400)
	}
	return f.enqueue("GraphLaunch", s, func() error {
		for _, op := range q {
			if err := op(); err != nil {
				return err
			}
		}
		return nil
	})
}

func (f *fakeDriver) GraphExecDestroy(e cuGraphExec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("GraphExecDestroy", true); err != nil {
		return err
	}
	if _, ok := f.execs[e]; !ok {
		return fakeError("GraphExecDestroy", 400)
	}
	delete(f.execs, e)
	return nil
}

func (f *fakeDriver) GraphDestroy(g cuGraph) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("GraphDestroy", true); err != nil {
		return err
	}
	if _, ok := f.graphs[g]; !ok {
		return fakeError("GraphDestroy", 400)
	}
	delete(f.graphs, g)
	return nil
}

// isHost reports whether b lies in a page-locked allocation.
func (f *fakeDriver) isHost(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	for base, n := range f.host {
		start := uintptr(unsafe.Pointer(base))
		if p >= start && p+uintptr(len(b)) <= start+uintptr(n) {
			return true
		}
	}
	return false
}

func (f *fakeDriver) MemcpyHtoDAsync(dst cuDevPtr, src []byte, s cuStream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.mem[dst]
	if !ok || len(src) > len(d) || !f.isHost(src) {
		f.counts["MemcpyHtoDAsync"]++
		return fakeError("MemcpyHtoDAsync", 1)
	}
	// The copy reads src when it runs, not now, as a real async copy
	// does: reusing the host buffer too early shows.
	return f.enqueue("MemcpyHtoDAsync", s, func() error { copy(d, src); return nil })
}

func (f *fakeDriver) MemcpyDtoHAsync(dst []byte, src cuDevPtr, s cuStream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.mem[src]
	if !ok || len(dst) > len(m) || !f.isHost(dst) {
		f.counts["MemcpyDtoHAsync"]++
		return fakeError("MemcpyDtoHAsync", 1)
	}
	return f.enqueue("MemcpyDtoHAsync", s, func() error { copy(dst, m); return nil })
}

// LaunchKernel queues the Go twin of f. When it runs, its buffers are
// decoded from device memory (the whole allocation, so an index past it
// panics: an illegal address) and its outputs written back.
func (f *fakeDriver) LaunchKernel(fn cuFunction, grid, block uint32, s cuStream, params []uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	name, ok := f.funcs[fn]
	if !ok {
		f.counts["LaunchKernel"]++
		return fakeError("LaunchKernel", 400)
	}
	// The checked-in PTX says how many parameters the kernel takes.
	want, _ := ptxParams(string(modelPTX), name)
	if len(params) != want || block == 0 || grid == 0 {
		f.counts["LaunchKernel"]++
		return fakeError("LaunchKernel", 1)
	}
	threads := int(grid) * int(block)
	p := append([]uint64(nil), params...)
	return f.enqueue("LaunchKernel", s, func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w (%s: %v)", fakeError("kernel "+name, 700), name, r)
			}
		}()
		return f.run(name, threads, p)
	})
}

// run executes kernel name; threads must cover its elements.
func (f *fakeDriver) run(name string, threads int, p []uint64) error {
	buf := func(i int) []byte {
		b, ok := f.mem[cuDevPtr(p[i])]
		if !ok {
			panic(fmt.Sprintf("parameter %d: %#x is not a live allocation", i, p[i]))
		}
		return b
	}
	fl := func(i int) []float32 { return bytesFloat32(buf(i)) }
	put := func(i int, v []float32) { copy(buf(i), float32Bytes(v)) }
	ints := func(i int) []int32 {
		b := buf(i)
		v := make([]int32, len(b)/4)
		for k := range v {
			v[k] = int32(binary.LittleEndian.Uint32(b[k*4:]))
		}
		return v
	}
	n := int(p[4])
	switch name {
	case kernelNameEmbedPool:
		if threads < n*Embed {
			panic("too few threads")
		}
		lensB := buf(1)
		lens := make([]int32, len(lensB)/4)
		for i := range lens {
			lens[i] = int32(binary.LittleEndian.Uint32(lensB[i*4:]))
		}
		out := fl(3)
		kernelEmbedPool(buf(0), lens, fl(2), out, n, int(p[5]))
		put(3, out)
	case kernelNameDense:
		outDim := int(p[6])
		if threads < n*outDim {
			panic("too few threads")
		}
		out := fl(3)
		kernelDense(fl(0), fl(1), fl(2), out, n, int(p[5]), outDim, p[7] != 0)
		put(3, out)
	case kernelNameStep:
		n = int(p[8])
		if threads < n*Hidden {
			panic("too few threads")
		}
		hn := fl(6)
		kernelStep(fl(0), fl(1), fl(2), fl(3), fl(4), fl(5), hn, buf(7), n, int(p[9]))
		put(6, hn)
	case kernelNameGenPool:
		n = int(p[7])
		if threads < n*Embed {
			panic("too few threads")
		}
		pool := fl(6)
		kernelGenPool(buf(0), ints(1), ints(2), ints(3), ints(4), fl(5), pool, n)
		put(6, pool)
	case kernelNameGenMean:
		if threads < n*Embed {
			panic("too few threads")
		}
		out := fl(3)
		kernelGenMean(fl(0), ints(1), ints(2), out, n)
		put(3, out)
	case kernelNameGenFeed:
		n = int(p[9])
		if threads < n*Hidden {
			panic("too few threads")
		}
		out := fl(7)
		kernelGenFeed(ints(0), ints(1), fl(2), fl(3), fl(4), fl(5), fl(6), out, int(p[8]), n)
		put(7, out)
	case kernelNameGenScatter:
		n = int(p[4])
		if threads < n*int(p[5]) {
			panic("too few threads")
		}
		dst := fl(2)
		kernelGenScatter(fl(0), ints(1), dst, int(p[3]), n, int(p[5]))
		put(2, dst)
	case kernelNameGenGather:
		n = int(p[3])
		if threads < n*int(p[4]) {
			panic("too few threads")
		}
		dst := fl(2)
		kernelGenGather(fl(0), ints(1), dst, n, int(p[4]))
		put(2, dst)
	}
	return nil
}

func bytesFloat32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return v
}

// live returns what is still allocated or held, for leak checks.
func (f *fakeDriver) live() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	retains := 0
	for _, r := range f.retains {
		retains += r
	}
	if len(f.mem)+len(f.host)+len(f.modules)+len(f.streams)+len(f.capturing)+len(f.graphs)+len(f.execs)+retains == 0 {
		return ""
	}
	return fmt.Sprintf("%d device allocations, %d host allocations, %d modules, %d streams, %d captures, %d graphs, %d executable graphs, %d context retains",
		len(f.mem), len(f.host), len(f.modules), len(f.streams), len(f.capturing), len(f.graphs), len(f.execs), retains)
}

// ptxParams returns how many parameters entry name of ptx declares and
// whether all are 64-bit (.u64/.b64/.s64), as the launch packing assumes.
func ptxParams(ptx, name string) (n int, all64 bool) {
	i := strings.Index(ptx, ".entry "+name+"(")
	if i < 0 {
		return 0, false
	}
	decl := ptx[i:]
	decl = decl[:strings.Index(decl, ")")]
	all64 = true
	for _, line := range strings.Split(decl, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, ".param ") {
			continue
		}
		n++
		if f := strings.Fields(line); len(f) < 2 || (f[1] != ".u64" && f[1] != ".b64" && f[1] != ".s64") {
			all64 = false
		}
	}
	return n, all64
}
