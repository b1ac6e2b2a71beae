// Package cudabridge runs batches on a real GPU through the CUDA driver API,
// without cgo, and the same model on the CPU.
//
// # The binding
//
// libcuda.so.1 is loaded at run time with github.com/ebitengine/purego
// (dlopen and dlsym, no cgo, no CUDA toolkit at build time:
// `CGO_ENABLED=0 go build ./...` works). It is loaded once, on first use;
// where it is missing, too old or a stub, every entry point (ListDevices,
// DeviceCount, OpenDevice) returns an error wrapping ErrNoDriver that says
// why, and nothing panics. A CUresult other than success becomes a
// *CUDAError naming the call, the code and the driver's description.
//
// # The model
//
// bytenet is a small deterministic byte-level network with weights drawn
// from a fixed seed (WeightSeed, splitmix64; see Weights): the mean of the
// input bytes' embeddings, two dense ReLU layers, a head over 8 labels and
// an 8-byte greedy continuation over printable bytes. An output reads
// `label=coral next="x1?Qa b."`. Weights.Infer is the reference, one input
// at a time; CPU runs a batch through the Go twins of the GPU kernels
// (kernels.go). Both are plain float32 arithmetic in the kernels' order,
// with every product rounded before it is added, so the CPU and the
// reference agree bit for bit and the GPU is built to (the GPU tests allow
// 1e-5 relative on logits, and require identical labels and
// continuations).
//
// # The GPU backend
//
// A Device holds one primary context, one stream, the uploaded weights and
// batch buffers (device and page-locked host memory) allocated once at its
// Limits. A batch is padded to its longest input and runs as one set of
// launches over the whole batch: embed-and-pool, two dense layers, the
// label head, then two launches per continuation byte. A CUDA error, a
// corrupt result or a batch abandoned when its ctx ends (the watchdog of a
// hung kernel) returns an error wrapping ErrDeviceFault, and the device
// re-creates its context on its next batch. The driver calls sit behind a
// small interface so that all of this is tested without a GPU, by a fake
// driver whose kernels run the Go kernels; and the binding itself is tested
// against testdata/fakecuda.c, a C stand-in for libcuda.so.1 (built when a
// C compiler is at hand) that runs model.cu's kernels compiled for the
// host.
//
// # The kernels and their PTX
//
// model.cu holds the kernels; model.ptx, embedded with go:embed, is what
// the driver loads and JIT-compiles for the GPU at hand (sm_80 PTX runs on
// sm_80 and newer: A100, H100, H200). Regenerate it after changing
// model.cu with `make ptx` (or `go generate ./cudabridge` with clang on the
// path), which runs, without the CUDA toolkit:
//
//	clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -O2 -ffp-contract=off -S -o model.ptx model.cu
//
// nvcc works too: `nvcc -ptx -arch=sm_80 -fmad=false -o model.ptx model.cu`.
// A test checks that the checked-in PTX is what clang makes of model.cu,
// when clang is installed.
//
// # Generation
//
// Gen runs bytenet one byte at a time as a generation backend
// (gen.Step, what the generation scheduler drives): per-sequence state
// kept between steps (the pooled prompt, then the continuation's
// recurrent state: the model's KV cache, Embed+Hidden floats whatever the
// length), chunked prefill giving the very state of a whole prefill,
// greedy decoding or sampling at a temperature with a seed (a function of
// the seed and the position), frees, and recompute after a crash that
// continues the stream exactly. Its greedy first ContLen bytes are Infer's
// continuation; gen.go defines the generation function, and
// Weights.Generate is its plain reference. DeviceGen runs the same steps
// on a GPU (model.cu's bytenet_gen_* kernels, on its Device's context),
// and the batched CPU generator the same launches through their Go twins;
// both are checked against Gen bit for bit (on the fake drivers here, on a
// GPU by TestGPUGenMatchesGen). Step samples each slot by the temperature
// and seed it carries (its request's), so one step mixes greedy and
// sampled sequences; GenOptions.Sampling fixes one for every slot
// instead, and StepSampled takes one per slot.
//
// # Who imports it
//
// Imported by: cmd/batchd (the devices and profile commands; and tests),
// engine/server (serve --backend cpu or cuda; generation.backend bytenet). engine/server adapts a
// Device or CPU to the engine's Backend and maps ErrDeviceFault onto the
// engine's device fault.
// cudabridge imports no engine package; it imports actors/gen for the
// generation step's types (Gen and DeviceGen implement gen.Step).
package cudabridge
