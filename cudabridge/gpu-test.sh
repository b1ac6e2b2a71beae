#!/bin/sh
# The GPU check (the model on a GPU against its CPU reference), run by
# `make gpu-test` (which builds BIN first).
# On a host with an NVIDIA driver and GPU it records, in OUT:
#   devices.txt          what the driver sees (batchd devices)
#   gpu-tests.txt        GPU == CPU reference on every test input, and the
#   gpu-vs-cpu.txt         comparison's figures (bit-exact count, largest
#                          logit difference)
#   gpu-gen-vs-cpu.txt   the generation kernels (DeviceGen) against the CPU
#                          generator (Gen): bytes and states bit for bit
#                          (TestGPUGenMatchesGen)
#   profile-gpuN.txt     each GPU's latency table, batch sizes 1..100 at
#                          input lengths 16, 128, 1024 (TestGPUProfile)
#   profile-cuda*.txt    the same through `batchd profile`, with its summary
#                          (CUDA graphs, the default); profile-cuda-launches*.txt
#                          with --cuda-graphs=false (one launch a kernel)
#   profile-cpu.txt      the CPU backend's table, for comparison
#   throughput.txt       GPU vs CPU batches/s and items/s, and the generator's
#                          ns per decode step at 1, 16, 64 sequences
#                          (go benchmarks)
# Without a driver or GPU the GPU tests skip and say what is missing; the
# binaries are self-contained (no cgo, PTX embedded), so copy BIN and this
# script to a GPU host and run it there: sh gpu-test.sh BIN OUT
# A dry run of this script without a GPU: build the tests' C stand-in,
#   cc -shared -fPIC -O2 -ffp-contract=off -o DIR/libcuda.so.1 cudabridge/testdata/fakecuda.c
# and run with LD_LIBRARY_PATH=DIR. Its "GPU" figures are the CPU's: never
# record them.
set -u
bin=${1:-bin}
out=${2:-bin/gpu-results}
mkdir -p "$out"
status=0

echo "== $bin/batchd devices"
if "$bin/batchd" devices >"$out/devices.txt" 2>&1; then
	gpu=yes
else
	gpu=no
fi
cat "$out/devices.txt"
[ "$gpu" = no ] && echo "No usable GPU here: the GPU tests below skip, saying why."

echo "== GPU tests (GPU == CPU reference; generation kernels == Gen; latency profile 1..100)"
"$bin/cudabridge.test" -test.v -test.count=1 -test.timeout=20m -test.run 'GPU' -gpu.out "$out" 2>&1 | tee "$out/gpu-tests.txt"
grep -q '^--- FAIL' "$out/gpu-tests.txt" && status=1

if [ "$gpu" = yes ]; then
	echo "== batchd profile --backend cuda"
	"$bin/batchd" profile --backend cuda --sizes "$(seq -s, 1 100)" --lengths 16,128,1024 --reps 21 --out "$out/profile-cuda.txt" \
		2>&1 | tee "$out/profile-cuda-summary.txt" || status=1
	echo "== batchd profile --backend cuda --cuda-graphs=false"
	"$bin/batchd" profile --backend cuda --cuda-graphs=false --sizes "$(seq -s, 1 100)" --lengths 16,128,1024 --reps 21 --out "$out/profile-cuda-launches.txt" \
		2>&1 | tee "$out/profile-cuda-launches-summary.txt" || status=1
fi

echo "== batchd profile --backend cpu"
"$bin/batchd" profile --backend cpu --sizes 1,10,50,100 --lengths 128 --reps 5 --out "$out/profile-cpu.txt" \
	2>&1 | tee "$out/profile-cpu-summary.txt" || status=1

echo "== throughput: GPU vs CPU"
"$bin/cudabridge.test" -test.v -test.run '^$' -test.bench 'Forward|GenDecode' -test.benchtime 200x 2>&1 | tee "$out/throughput.txt"
grep -q '^--- FAIL' "$out/throughput.txt" && status=1

echo "== results in $out"
ls -l "$out"
exit $status
