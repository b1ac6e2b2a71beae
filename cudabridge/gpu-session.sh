#!/bin/sh
# One device call's worth of GPU figures for issue 22, sized to fit a
# 15-minute lease in one call of about 8 minutes: the GPU checks (outputs
# against the reference with CUDA graphs and without, the generation
# kernels, both batch-time benchmarks), the latency table with graphs (the
# default), devices taking their next batch while one runs
# (--ask-ahead=200us: a full batch at once, a partial one 200 us before the
# running one's predicted end, against a ~140 us hand-over) and the GPU
# wait that sleeps most of a batch's GPU time instead of polling it
# (--cuda-wait-sleep, one more GOMAXPROCS: the poll was 9.7% of run 5's
# server CPU) side by side with the default under the closed loops
# (gpu-ab.sh, with a CPU profile of the server asking ahead: run 5 has the
# default's), then the live figures (gpu-serve.sh), the targets' loads
# again with --ask-ahead=200us, then the open loop at 30,000 req/s on
# fresh servers: as
# it is, from a pool of at most 512 connections, its start not counted, with idle
# connections parked after 50 ms (--park-after=50ms: the generator's
# thousands of connections each wait ~170 ms between requests, so most
# wait parked, without a goroutine for the collector to scan), and against
# the net/http yardstick.
# The device tool brings back at most 8 files, so everything goes into
# OUT/run.tgz, packed again after each step: a call cut short still brings
# back what was done.
#   CGO_ENABLED=0 go build -ldflags='-s -w' -o bin/batchd ./cmd/batchd
#   CGO_ENABLED=0 go test -c -ldflags='-s -w' -o bin/cudabridge.test ./cudabridge
#   then on the GPU host: sh cudabridge/gpu-session.sh bin OUT
# The latency table the servers plan with is the one measured here with
# graphs; PROFILE=FILE gives another.
set -u
bin=${1:-bin}
out=${2:?usage: gpu-session.sh BIN OUT}
here=$(dirname "$0")
r=$out/r
mkdir -p "$r"
pack() {
	tar czf "$out/run.tgz" -C "$out" r
	echo "== packed at $(date -u +%T)"
}
nproc
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== GPU checks, both ways, and the batch-time benchmarks"
timeout 180 "$bin/cudabridge.test" -test.v -test.count=1 -test.run 'TestGPUMatchesReference|TestGPUGenMatchesGen' \
	-test.bench 'GPUForward' -test.benchtime 300x -gpu.out "$r" >"$r/gpu-tests.txt" 2>&1
grep -E '^(--- |ok|FAIL|PASS|Benchmark)|bit-exact' "$r/gpu-tests.txt"
echo "== the latency table with graphs"
timeout 120 "$bin/batchd" profile --backend cuda --sizes "$(seq -s, 1 100)" --lengths 16,128,1024 --reps 21 \
	--out "$r/profile-cuda.txt" >"$r/profile-cuda-summary.txt" 2>&1
tail -n 4 "$r/profile-cuda-summary.txt"
pack
profile=${PROFILE:-$r/profile-cuda.txt}
[ -s "$profile" ] || profile=$here/measurements/h200-2026-11-28/profile-cuda.txt
echo "== asking ahead, and the sleeping GPU wait, beside the default, planning with $profile"
ROUNDS=2 sh "$here/gpu-ab.sh" "$r/ab" "$profile" "ahead=$bin/batchd,--ask-ahead=200us" "sleep=$bin/batchd,--cuda-wait-sleep" "default=$bin/batchd" 2>&1 | grep -v '^-rw'
pack
echo "== the live figures"
sh "$here/gpu-serve.sh" "$bin" "$r/serve" "$profile" 2>&1 | grep -v '^-rw'
pack
echo "== the targets' loads, asking ahead"
SERVE_FLAGS=--ask-ahead=200us LOADS="closed-256 closed-1024 grpc-stream-closed-1024 grpc-stream-open-250k" \
	sh "$here/gpu-serve.sh" "$bin" "$r/serve-ahead" "$profile" 2>&1 | grep -v '^-rw'
pack
# The open loop at 30,000 req/s, each on a fresh server: as it is; with
# the generator's connections capped at 512 (--in-flight-max: a client
# with a bounded pool; on the 2-core VM at 20,000 req/s an uncapped
# generator that fell behind once opened new connections until it had
# 10,000, and p99 went from 4 ms to 50-400 ms in a third of the runs,
# while capped at 256 every run kept p99 at 4.3-5.4 ms); the
# first 2 s not counted (the start, while the generator opens its
# connections: most of run 6's tail); with connections
# parked after 50 ms (fewer goroutines to scan: shorter collections); and
# the yardstick's (is the tail the server's, or the generator's and the
# host's?).
echo "== the open loop's tail: a bounded pool, the start, the collections, the yardstick"
LOADS=open-30k sh "$here/gpu-serve.sh" "$bin" "$r/open-1" "$profile" >/dev/null 2>&1
LOADS=open-30k LOAD_FLAGS="--in-flight-max 512" sh "$here/gpu-serve.sh" "$bin" "$r/open-pool512-1" "$profile" >/dev/null 2>&1
LOADS=open-30k LOAD_FLAGS="--warmup 2s" sh "$here/gpu-serve.sh" "$bin" "$r/open-warm-1" "$profile" >/dev/null 2>&1
SERVE_FLAGS=--park-after=50ms LOADS=open-30k sh "$here/gpu-serve.sh" "$bin" "$r/open-park50ms-1" "$profile" >/dev/null 2>&1
LOADS=baseline-open-30k sh "$here/gpu-serve.sh" "$bin" "$r/open-yardstick-1" "$profile" >/dev/null 2>&1
pack
python3 "$here/gpu-table.py" "$r"/open-* 2>/dev/null | grep -E "^/|open-30k"
ls -l "$out"
