package cudabridge

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// libcudaName is the driver library: the versioned name, which the driver
// package installs (the unversioned libcuda.so comes with development
// packages only).
const libcudaName = "libcuda.so.1"

// cudaDriver is the CUDA driver API through libcuda.so.1, loaded at run
// time with purego: no cgo, no CUDA toolkit at build time. Every function
// returns a CUresult (a C enum: int32); handles are written through
// out-parameters.
type cudaDriver struct {
	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, dev int32) int32
	cuDeviceTotalMem          func(bytes *uint64, dev int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuDevicePrimaryCtxReset   func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuModuleLoadDataEx        func(mod *uintptr, image *byte, numOptions uint32, options *int32, values *uintptr) int32
	cuModuleUnload            func(mod uintptr) int32
	cuModuleGetFunction       func(fn *uintptr, mod uintptr, name string) int32
	cuMemAlloc                func(p *uint64, bytes uint64) int32
	cuMemFree                 func(p uint64) int32
	cuMemAllocHost            func(p *unsafe.Pointer, bytes uint64) int32
	cuMemFreeHost             func(p unsafe.Pointer) int32
	cuStreamCreate            func(s *uintptr, flags uint32) int32
	cuStreamDestroy           func(s uintptr) int32
	cuGetErrorName            func(code int32, s **byte) int32
	cuGetErrorString          func(code int32, s **byte) int32

	// The calls a batch makes tens of, by address: called through
	// purego.SyscallN, without purego.RegisterFunc's reflection a call
	// (about 1 s of the GPU worker's 12 s in the H200 host's profile).
	// CUresult cuStreamQuery(CUstream)
	cuStreamQuery uintptr
	// CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t, CUstream)
	cuMemcpyHtoDAsync uintptr
	// CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t, CUstream)
	cuMemcpyDtoHAsync uintptr
	// CUresult cuLaunchKernel(CUfunction, unsigned gridDimX, gridDimY,
	// gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, CUstream,
	// void **kernelParams, void **extra)
	cuLaunchKernel uintptr

	// CUDA graphs (CUDA 11.4 or newer), optional: without them a batch's
	// kernels are launched one by one. hasGraphs says all were found.
	hasGraphs                   bool
	cuStreamBeginCapture        func(s uintptr, mode int32) int32
	cuStreamEndCapture          func(s uintptr, g *uintptr) int32
	cuGraphInstantiateWithFlags func(e *uintptr, g uintptr, flags uint64) int32
	cuGraphExecDestroy          func(e uintptr) int32
	cuGraphDestroy              func(g uintptr) int32
	// CUresult cuGraphLaunch(CUgraphExec, CUstream): once a batch, by address.
	cuGraphLaunch uintptr
}

// symbol is an exported function of the driver and the field it binds:
// a func for purego.RegisterFunc, or a *uintptr for its address.
type symbol struct {
	name string
	fn   any
}

// symbols names the driver's exported function behind each field. The _v2
// names are the ones cuda.h has mapped the plain names to since CUDA 4 (64-
// bit sizes) and 11 (primary context release and reset).
func (d *cudaDriver) symbols() []symbol {
	return []symbol{
		{"cuInit", &d.cuInit},
		{"cuDriverGetVersion", &d.cuDriverGetVersion},
		{"cuDeviceGetCount", &d.cuDeviceGetCount},
		{"cuDeviceGet", &d.cuDeviceGet},
		{"cuDeviceGetName", &d.cuDeviceGetName},
		{"cuDeviceTotalMem_v2", &d.cuDeviceTotalMem},
		{"cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain},
		{"cuDevicePrimaryCtxRelease_v2", &d.cuDevicePrimaryCtxRelease},
		{"cuDevicePrimaryCtxReset_v2", &d.cuDevicePrimaryCtxReset},
		{"cuCtxSetCurrent", &d.cuCtxSetCurrent},
		{"cuModuleLoadDataEx", &d.cuModuleLoadDataEx},
		{"cuModuleUnload", &d.cuModuleUnload},
		{"cuModuleGetFunction", &d.cuModuleGetFunction},
		{"cuMemAlloc_v2", &d.cuMemAlloc},
		{"cuMemFree_v2", &d.cuMemFree},
		{"cuMemAllocHost_v2", &d.cuMemAllocHost},
		{"cuMemFreeHost", &d.cuMemFreeHost},
		{"cuStreamCreate", &d.cuStreamCreate},
		{"cuStreamDestroy_v2", &d.cuStreamDestroy},
		{"cuStreamQuery", &d.cuStreamQuery},
		{"cuMemcpyHtoDAsync_v2", &d.cuMemcpyHtoDAsync},
		{"cuMemcpyDtoHAsync_v2", &d.cuMemcpyDtoHAsync},
		{"cuLaunchKernel", &d.cuLaunchKernel},
		{"cuGetErrorName", &d.cuGetErrorName},
		{"cuGetErrorString", &d.cuGetErrorString},
	}
}

// graphSymbols are the optional symbols: the graph API. The _v2 capture
// is the one cuda.h maps cuStreamBeginCapture to since CUDA 10.1.
func (d *cudaDriver) graphSymbols() []symbol {
	return []symbol{
		{"cuStreamBeginCapture_v2", &d.cuStreamBeginCapture},
		{"cuStreamEndCapture", &d.cuStreamEndCapture},
		{"cuGraphInstantiateWithFlags", &d.cuGraphInstantiateWithFlags},
		{"cuGraphExecDestroy", &d.cuGraphExecDestroy},
		{"cuGraphDestroy", &d.cuGraphDestroy},
		{"cuGraphLaunch", &d.cuGraphLaunch},
	}
}

// The library is loaded and initialised once per process, on first use:
// dlopen and cuInit are process-wide, and a failure will not go away by
// asking again.
var libcuda struct {
	once sync.Once
	drv  *cudaDriver
	err  error
}

// loadDriver returns the process's CUDA driver, loading it on first use.
// Without a usable driver the error wraps ErrNoDriver (or ErrNoDevice when
// the driver sees no GPU) and says why.
func loadDriver() (*cudaDriver, error) {
	libcuda.once.Do(func() { libcuda.drv, libcuda.err = openDriver(libcudaName) })
	return libcuda.drv, libcuda.err
}

// openDriver loads the library name, binds every symbol and calls cuInit.
// A missing library or symbol is an error, never a panic.
func openDriver(name string) (*cudaDriver, error) {
	h, err := dlopen(name)
	if err != nil {
		return nil, fmt.Errorf("cudabridge: %s not found or not loadable (is the NVIDIA driver installed, and its library on the loader's path?): %v: %w", name, err, ErrNoDriver)
	}
	d := &cudaDriver{}
	bind := func(fn any, sym uintptr) {
		if addr, raw := fn.(*uintptr); raw {
			*addr = sym
		} else {
			purego.RegisterFunc(fn, sym)
		}
	}
	for _, s := range d.symbols() {
		sym, err := dlsym(h, s.name)
		if err != nil || sym == 0 {
			dlclose(h)
			return nil, fmt.Errorf("cudabridge: %s has no %s (a CUDA 11 or newer driver is needed): %v: %w", name, s.name, err, ErrNoDriver)
		}
		bind(s.fn, sym)
	}
	d.hasGraphs = true
	for _, s := range d.graphSymbols() {
		if sym, err := dlsym(h, s.name); err == nil && sym != 0 {
			bind(s.fn, sym)
		} else {
			d.hasGraphs = false
		}
	}
	// The handle stays open for the life of the process: the registered
	// functions point into it.
	switch r := d.cuInit(0); r {
	case cudaSuccess:
		return d, nil
	case cudaErrorNoDevice:
		return nil, fmt.Errorf("cudabridge: %s: %w: %w", name, ErrNoDevice, d.err("cuInit", r))
	case cudaErrorStubLib:
		return nil, fmt.Errorf("cudabridge: %s is the CUDA toolkit's stub, not a driver: %w: %w", name, ErrNoDriver, d.err("cuInit", r))
	default:
		return nil, fmt.Errorf("cudabridge: %s: %w: %w", name, ErrNoDriver, d.err("cuInit", r))
	}
}

// err turns a CUresult into nil or a *CUDAError named by the driver.
func (d *cudaDriver) err(op string, r int32) error {
	if r == cudaSuccess {
		return nil
	}
	e := &CUDAError{Op: op, Code: int(r)}
	var p *byte
	if d.cuGetErrorName(r, &p) == cudaSuccess {
		e.Name = cString(p)
	}
	p = nil
	if d.cuGetErrorString(r, &p) == cudaSuccess {
		e.Text = cString(p)
	}
	return e
}

// cString copies a NUL-terminated C string the driver owns, reading at
// most cStringBytesMax bytes.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	b := unsafe.Slice(p, cStringBytesMax)
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// goString returns the NUL-terminated string the driver wrote into buf.
func goString(buf []byte) string {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf)
}

func (d *cudaDriver) DriverVersion() (int, error) {
	var v int32
	return int(v), d.err("cuDriverGetVersion", d.cuDriverGetVersion(&v))
}

func (d *cudaDriver) DeviceCount() (int, error) {
	var n int32
	return int(n), d.err("cuDeviceGetCount", d.cuDeviceGetCount(&n))
}

func (d *cudaDriver) DeviceGet(ordinal int) (cuDevice, error) {
	var dev int32
	return cuDevice(dev), d.err("cuDeviceGet", d.cuDeviceGet(&dev, int32(ordinal)))
}

func (d *cudaDriver) DeviceName(dev cuDevice) (string, error) {
	buf := make([]byte, deviceNameBytesMax)
	if err := d.err("cuDeviceGetName", d.cuDeviceGetName(&buf[0], int32(len(buf)), int32(dev))); err != nil {
		return "", err
	}
	return goString(buf), nil
}

func (d *cudaDriver) DeviceTotalMem(dev cuDevice) (uint64, error) {
	var n uint64
	return n, d.err("cuDeviceTotalMem_v2", d.cuDeviceTotalMem(&n, int32(dev)))
}

func (d *cudaDriver) PrimaryCtxRetain(dev cuDevice) (cuContext, error) {
	var c uintptr
	return cuContext(c), d.err("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&c, int32(dev)))
}

func (d *cudaDriver) PrimaryCtxRelease(dev cuDevice) error {
	return d.err("cuDevicePrimaryCtxRelease_v2", d.cuDevicePrimaryCtxRelease(int32(dev)))
}

func (d *cudaDriver) PrimaryCtxReset(dev cuDevice) error {
	return d.err("cuDevicePrimaryCtxReset_v2", d.cuDevicePrimaryCtxReset(int32(dev)))
}

func (d *cudaDriver) CtxSetCurrent(c cuContext) error {
	return d.err("cuCtxSetCurrent", d.cuCtxSetCurrent(uintptr(c)))
}

// ModuleLoadData loads ptx with cuModuleLoadDataEx, asking the JIT
// compiler for its error and info logs. The option values are written
// into memory the driver reads and writes during the call only: the logs
// and the value array are pinned for it, as the cgo pointer rules ask.
func (d *cudaDriver) ModuleLoadData(ptx []byte) (cuModule, error) {
	image := make([]byte, len(ptx)+1) // NUL-terminated, as a PTX image must be
	copy(image, ptx)
	errLog := make([]byte, jitLogBytesMax)
	infoLog := make([]byte, jitLogBytesMax)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBytes, jitInfoLogBuffer, jitInfoLogBytes}
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&errLog[0])
	pin.Pin(&infoLog[0])
	vals := []uintptr{
		uintptr(unsafe.Pointer(&errLog[0])), uintptr(len(errLog)),
		uintptr(unsafe.Pointer(&infoLog[0])), uintptr(len(infoLog)),
	}
	var m uintptr
	r := d.cuModuleLoadDataEx(&m, &image[0], uint32(len(opts)), &opts[0], &vals[0])
	runtime.KeepAlive(image)
	if err := d.err("cuModuleLoadDataEx", r); err != nil {
		var ce *CUDAError
		if errors.As(err, &ce) {
			ce.Log = goString(errLog)
		}
		return 0, err
	}
	return cuModule(m), nil
}

func (d *cudaDriver) ModuleUnload(m cuModule) error {
	return d.err("cuModuleUnload", d.cuModuleUnload(uintptr(m)))
}

func (d *cudaDriver) ModuleGetFunction(m cuModule, name string) (cuFunction, error) {
	var f uintptr
	return cuFunction(f), d.err("cuModuleGetFunction "+name, d.cuModuleGetFunction(&f, uintptr(m), name))
}

func (d *cudaDriver) MemAlloc(bytes int) (cuDevPtr, error) {
	if bytes < 1 || bytes > allocationBytesMax {
		return 0, fmt.Errorf("cudabridge: device allocation of %d bytes: want 1 to %d", bytes, allocationBytesMax)
	}
	var p uint64
	return cuDevPtr(p), d.err("cuMemAlloc_v2", d.cuMemAlloc(&p, uint64(bytes)))
}

func (d *cudaDriver) MemFree(p cuDevPtr) error {
	return d.err("cuMemFree_v2", d.cuMemFree(uint64(p)))
}

// MemAllocHost returns page-locked host memory as a slice: C memory, which
// the Go collector neither moves nor frees; MemFreeHost gives it back.
func (d *cudaDriver) MemAllocHost(bytes int) ([]byte, error) {
	if bytes < 1 || bytes > allocationBytesMax {
		return nil, fmt.Errorf("cudabridge: host allocation of %d bytes: want 1 to %d", bytes, allocationBytesMax)
	}
	var p unsafe.Pointer
	if err := d.err("cuMemAllocHost_v2", d.cuMemAllocHost(&p, uint64(bytes))); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, &CUDAError{Op: "cuMemAllocHost_v2", Text: "returned a null pointer"}
	}
	return unsafe.Slice((*byte)(p), bytes), nil
}

func (d *cudaDriver) MemFreeHost(b []byte) error {
	return d.err("cuMemFreeHost", d.cuMemFreeHost(unsafe.Pointer(unsafe.SliceData(b))))
}

func (d *cudaDriver) StreamCreate() (cuStream, error) {
	var s uintptr
	return cuStream(s), d.err("cuStreamCreate", d.cuStreamCreate(&s, streamNonBlocking))
}

func (d *cudaDriver) StreamDestroy(s cuStream) error {
	return d.err("cuStreamDestroy_v2", d.cuStreamDestroy(uintptr(s)))
}

func (d *cudaDriver) StreamQuery(s cuStream) (bool, error) {
	r0, _, _ := purego.SyscallN(d.cuStreamQuery, uintptr(s))
	switch r := int32(r0); r {
	case cudaSuccess:
		return true, nil
	case cudaErrorNotReady:
		return false, nil
	default:
		return false, d.err("cuStreamQuery", r)
	}
}

// MemcpyHtoDAsync queues a copy of src, which must be MemAllocHost memory
// (it is read after the call returns), to dst.
func (d *cudaDriver) MemcpyHtoDAsync(dst cuDevPtr, src []byte, s cuStream) error {
	if len(src) == 0 {
		return nil
	}
	r, _, _ := purego.SyscallN(d.cuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), uintptr(s))
	return d.err("cuMemcpyHtoDAsync_v2", int32(r))
}

// MemcpyDtoHAsync queues a copy from src into dst, which must be
// MemAllocHost memory (it is written after the call returns).
func (d *cudaDriver) MemcpyDtoHAsync(dst []byte, src cuDevPtr, s cuStream) error {
	if len(dst) == 0 {
		return nil
	}
	r, _, _ := purego.SyscallN(d.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst)), uintptr(s))
	return d.err("cuMemcpyDtoHAsync_v2", int32(r))
}

// LaunchKernel builds cuLaunchKernel's kernelParams, a void** with one
// pointer per parameter to that parameter's value: vals holds the values,
// ptrs the pointers to them. Both are Go memory that C reads during the
// call (the driver copies the values into the launch before returning), so
// both are pinned: ptrs holds Go pointers, which the cgo rules allow only
// to pinned memory.
func (d *cudaDriver) LaunchKernel(f cuFunction, grid, block uint32, s cuStream, params []uint64) error {
	if len(params) < 1 || len(params) > kernelParamsMax {
		return fmt.Errorf("cudabridge: kernel launch with %d parameters: want 1 to %d", len(params), kernelParamsMax)
	}
	var vals [kernelParamsMax]uint64
	var ptrs [kernelParamsMax]unsafe.Pointer
	copy(vals[:], params)
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&vals)
	pin.Pin(&ptrs)
	for i := range params {
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	r, _, _ := purego.SyscallN(d.cuLaunchKernel, uintptr(f), uintptr(grid), 1, 1, uintptr(block), 1, 1, 0, uintptr(s), uintptr(unsafe.Pointer(&ptrs[0])), 0)
	return d.err("cuLaunchKernel", int32(r))
}

// errNoGraphs says the driver has no graph API (older than CUDA 11.4): a
// Device then launches each batch's kernels one by one.
var errNoGraphs = errors.New("cudabridge: the driver has no CUDA graphs (CUDA 11.4 or newer)")

// StreamBeginCapture starts recording the work queued on s into a graph,
// in relaxed mode: other threads' calls (another device's) are not
// checked against the capture.
func (d *cudaDriver) StreamBeginCapture(s cuStream) error {
	if !d.hasGraphs {
		return errNoGraphs
	}
	return d.err("cuStreamBeginCapture_v2", d.cuStreamBeginCapture(uintptr(s), streamCaptureModeRelaxed))
}

func (d *cudaDriver) StreamEndCapture(s cuStream) (cuGraph, error) {
	if !d.hasGraphs {
		return 0, errNoGraphs
	}
	var g uintptr
	return cuGraph(g), d.err("cuStreamEndCapture", d.cuStreamEndCapture(uintptr(s), &g))
}

func (d *cudaDriver) GraphInstantiate(g cuGraph) (cuGraphExec, error) {
	if !d.hasGraphs {
		return 0, errNoGraphs
	}
	var e uintptr
	return cuGraphExec(e), d.err("cuGraphInstantiateWithFlags", d.cuGraphInstantiateWithFlags(&e, uintptr(g), 0))
}

func (d *cudaDriver) GraphLaunch(e cuGraphExec, s cuStream) error {
	if !d.hasGraphs {
		return errNoGraphs
	}
	r, _, _ := purego.SyscallN(d.cuGraphLaunch, uintptr(e), uintptr(s))
	return d.err("cuGraphLaunch", int32(r))
}

func (d *cudaDriver) GraphExecDestroy(e cuGraphExec) error {
	if !d.hasGraphs {
		return errNoGraphs
	}
	return d.err("cuGraphExecDestroy", d.cuGraphExecDestroy(uintptr(e)))
}

func (d *cudaDriver) GraphDestroy(g cuGraph) error {
	if !d.hasGraphs {
		return errNoGraphs
	}
	return d.err("cuGraphDestroy", d.cuGraphDestroy(uintptr(g)))
}
