package cudabridge

import (
	"errors"
	"fmt"
)

var (
	// ErrNoDriver says the CUDA driver library (libcuda.so.1) could not be
	// loaded or used: not installed, not on the loader's path, too old, or
	// a stub. The wrapping error says which and why.
	ErrNoDriver = errors.New("no usable CUDA driver")
	// ErrNoDevice says the driver loaded but sees no GPU, or not the one
	// asked for.
	ErrNoDevice = errors.New("no CUDA device")
	// ErrDeviceFault marks a batch error that means the device itself
	// failed: a CUDA error, a corrupt result, or a batch abandoned when its
	// context ended (a hung kernel). No output of the batch is valid; the
	// device re-creates its context, stream and buffers on its next batch.
	// The engine's adapter maps it onto the engine's own device fault.
	ErrDeviceFault = errors.New("device fault")
)

// CUDAError is a CUresult other than CUDA_SUCCESS, with the call that
// returned it and the driver's name and description of the code.
type CUDAError struct {
	Op   string // the driver call, e.g. "cuMemAlloc_v2"
	Code int    // the CUresult
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"; empty if unknown
	Text string // the driver's description; empty if unknown
	// Log is the JIT compiler's error log, for a module load.
	Log string
}

func (e *CUDAError) Error() string {
	s := fmt.Sprintf("%s: CUresult %d", e.Op, e.Code)
	if e.Name != "" {
		s = fmt.Sprintf("%s: %s (%d)", e.Op, e.Name, e.Code)
	}
	if e.Text != "" {
		s += ": " + e.Text
	}
	if e.Log != "" {
		s += "; JIT log: " + e.Log
	}
	return s
}

// CUresult codes this package branches on.
const (
	cudaSuccess                 = 0
	cudaErrorStubLib            = 34  // CUDA_ERROR_STUB_LIBRARY: the toolkit's stub, not a driver
	cudaErrorNoDevice           = 100 // CUDA_ERROR_NO_DEVICE
	cudaErrorNotReady           = 600 // CUDA_ERROR_NOT_READY: cuStreamQuery's "still running"
	streamNonBlocking           = 1   // CU_STREAM_NON_BLOCKING
	cudaErrorNotSupported       = 801 // CUDA_ERROR_NOT_SUPPORTED
	cudaErrorCaptureUnsupported = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	streamCaptureModeRelaxed    = 2   // CU_STREAM_CAPTURE_MODE_RELAXED
	jitInfoLogBuffer            = 3   // CU_JIT_INFO_LOG_BUFFER
	jitInfoLogBytes             = 4   // CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
	jitErrorLogBuffer           = 5   // CU_JIT_ERROR_LOG_BUFFER
	jitErrorLogBytes            = 6   // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	jitLogBytesMax              = 8 << 10
	deviceNameBytesMax          = 256
	cStringBytesMax             = 1 << 10
	kernelParamsMax             = 12 // the most parameters a kernel of model.cu takes
	deviceCountMax              = 1 << 10
	allocationBytesMax          = 1 << 30 // far above what the model's buffers need
	launchBlockThreads          = 128
	launchGridBlocksMax         = 1<<31 - 1
)

// Opaque driver handles. They are plain values: a CUcontext, CUmodule,
// CUfunction or CUstream is a pointer the driver owns, and a device pointer
// is an address on the GPU, never dereferenced on the host.
type (
	cuDevice    int32
	cuContext   uintptr
	cuModule    uintptr
	cuFunction  uintptr
	cuStream    uintptr
	cuDevPtr    uint64
	cuGraph     uintptr
	cuGraphExec uintptr
)

// driver is the part of the CUDA driver API a Device uses: the real one
// (cudaDriver, through libcuda.so.1) or the tests' fake, whose kernels run
// the Go kernels, so everything above this line is tested without a GPU.
//
// A context is current per OS thread: callers lock their goroutine to its
// thread and make the device's context current before every sequence of
// calls. Host buffers come from MemAllocHost (page-locked on a real
// driver) and are what the async copies read and write.
type driver interface {
	DriverVersion() (int, error)
	DeviceCount() (int, error)
	DeviceGet(ordinal int) (cuDevice, error)
	DeviceName(dev cuDevice) (string, error)
	DeviceTotalMem(dev cuDevice) (uint64, error)

	PrimaryCtxRetain(dev cuDevice) (cuContext, error)
	PrimaryCtxRelease(dev cuDevice) error
	PrimaryCtxReset(dev cuDevice) error
	CtxSetCurrent(ctx cuContext) error

	// ModuleLoadData loads a PTX image (JIT-compiled by the driver); a
	// failure carries the compiler's log.
	ModuleLoadData(ptx []byte) (cuModule, error)
	ModuleUnload(m cuModule) error
	ModuleGetFunction(m cuModule, name string) (cuFunction, error)

	MemAlloc(bytes int) (cuDevPtr, error)
	MemFree(p cuDevPtr) error
	MemAllocHost(bytes int) ([]byte, error)
	MemFreeHost(b []byte) error

	StreamCreate() (cuStream, error)
	StreamDestroy(s cuStream) error
	// StreamQuery reports whether everything queued on s has finished.
	StreamQuery(s cuStream) (done bool, err error)

	MemcpyHtoDAsync(dst cuDevPtr, src []byte, s cuStream) error
	MemcpyDtoHAsync(dst []byte, src cuDevPtr, s cuStream) error
	// LaunchKernel queues f on s over grid blocks of block threads; every
	// parameter is one 8-byte value (a device pointer or an int64).
	LaunchKernel(f cuFunction, grid, block uint32, s cuStream, params []uint64) error

	// CUDA graphs: the launches queued on s between StreamBeginCapture
	// and StreamEndCapture are recorded, not run, into a graph, which
	// GraphInstantiate makes launchable as one call (GraphLaunch). A
	// driver without them returns errNoGraphs.
	StreamBeginCapture(s cuStream) error
	StreamEndCapture(s cuStream) (cuGraph, error)
	GraphInstantiate(g cuGraph) (cuGraphExec, error)
	GraphLaunch(e cuGraphExec, s cuStream) error
	GraphExecDestroy(e cuGraphExec) error
	GraphDestroy(g cuGraph) error
}
