#!/bin/sh
# The live figures on a GPU host: batchd serve --backend cuda (bytenet) on
# half the cores, batchd load on the other half, loopback, and the plain
# net/http yardstick (batchd load --baseline-server) on the same cores in
# the same run, so the two compare as a ratio. Build here first (no cgo):
#   CGO_ENABLED=0 go build -o bin/batchd ./cmd/batchd
# then on the GPU host: sh gpu-serve.sh BIN OUT [PROFILE] (gpu-host.sh beside it)
# PROFILE is a latency table from `batchd profile --backend cuda --out`
# (gpu-test.sh writes one); without it the server plans with its default.
# SERVE_FLAGS are more flags for the server (say --cuda-graphs=false).
# LOADS, when set, names the loads to run (say "open-30k open-60k"), the
# others skipped, the yardstick too unless named (baseline-closed-256 ...).
# baseline-open-30k, the open loop of 30,000 req/s against the yardstick,
# runs only when named.
# GEN is the generator's binary (default BIN/batchd); LOAD_FLAGS are more
# flags for every load (say --warmup 2s); SERVE_GOGC the server's GOGC
# (the generator's stays its own).
# Each load runs DURATION (10s) against model bytenet (outputs are not the
# emulated function, so not checked), over REST and over the OIP's gRPC
# (unary, and ModelStreamInfer streams: issue 22's 250k req/s target);
# OUT gets one JSON report per load and the server's log, which has a
# line per garbage collection (GODEBUG=gctrace=1: its wall-clock phases,
# to set beside an open loop's tail). When
# BIN/generate.test is there (go test -c -o bin/generate.test
# ./engine/generate), it then times the step end to the SSE flush at 256
# streams on the server's cores (stream-256.txt).
set -u
bin=${1:-bin}
out=${2:-bin/gpu-serve}
profile=${3:-}
dur=${DURATION:-10s}
mkdir -p "$out"
. "$(dirname "$0")/gpu-host.sh"
table=""
[ -n "$profile" ] && table="--latency-table $profile"
table="$table ${SERVE_FLAGS:-}"

wanted() { # name
	case " ${LOADS:-$1} " in *" $1 "*) return 0 ;; esac
	return 1
}

load() { # name, flags...
	name=$1
	shift
	wanted "$name" || return 0
	echo "== $name: batchd load $*"
	# shellcheck disable=SC2086
	taskset -c "$gen" "${GEN:-$bin/batchd}" load --url "http://$addr" --model bytenet --check=false --duration "$dur" --json "$@" ${LOAD_FLAGS:-} >"$out/$name.json" 2>"$out/$name.err"
	tail -n 3 "$out/$name.err"
}

echo "== serve --backend cuda on cores $srv, load on $gen"
# shellcheck disable=SC2086
env GODEBUG=gctrace=1 ${SERVE_GOGC:+GOGC=$SERVE_GOGC} taskset -c "$srv" "$bin/batchd" serve --backend cuda --addr "$addr" --grpc-addr "$gaddr" $table >"$out/serve.log" 2>&1 &
pid=$!
for i in $(seq 100); do
	curl -sf "http://$addr/v2/health/ready" >/dev/null 2>&1 && break
	sleep 0.2
done
load closed-256 --connections 256 --rss-pid "$pid"
load closed-1024 --connections 1024 --rss-pid "$pid"
load open-10k --rate 10000 --rss-pid "$pid" --slow-over 5ms
load open-30k --rate 30000 --rss-pid "$pid" --slow-over 5ms --duration 30s # RSS flat after the first 10 s
load open-60k --rate 60000 --rss-pid "$pid" --slow-over 5ms
load open-120k --rate 120000 --rss-pid "$pid" --slow-over 5ms --in-flight-max 15000 # a connection each: within the host's open-file limit (20,000 on the H200 host)
load grpc-unary-closed-256 --grpc "$gaddr" --connections 256 --rss-pid "$pid"
load grpc-stream-closed-1024 --grpc "$gaddr" --grpc-stream --connections 1024 --rss-pid "$pid"
load grpc-stream-closed-4096 --grpc "$gaddr" --grpc-stream --connections 4096 --rss-pid "$pid"
load grpc-stream-open-100k --grpc "$gaddr" --grpc-stream --rate 100000 --rss-pid "$pid" --in-flight-max 100000
load grpc-stream-open-250k --grpc "$gaddr" --grpc-stream --rate 250000 --rss-pid "$pid" --in-flight-max 100000
# The same over 8 connections (4 streams each): one connection's frames
# are read and written by one goroutine a side, at both ends.
load grpc-stream-closed-1024-8conns --grpc "$gaddr" --grpc-stream --grpc-conns 8 --connections 1024 --rss-pid "$pid"
load grpc-stream-open-250k-8conns --grpc "$gaddr" --grpc-stream --grpc-conns 8 --rate 250000 --rss-pid "$pid" --in-flight-max 100000
curl -s "http://$addr/metrics" >"$out/metrics.txt" 2>&1
kill -TERM "$pid"
wait "$pid"

named() { # name: in LOADS by name (not run by default)
	case " ${LOADS:-} " in *" $1 "*) return 0 ;; esac
	return 1
}

if wanted baseline-closed-256 || wanted baseline-closed-1024 || named baseline-open-30k; then
	echo "== the net/http yardstick on cores $srv"
	env GODEBUG=gctrace=1 taskset -c "$srv" "$bin/batchd" load --baseline-server "$addr" >"$out/baseline.log" 2>&1 &
	bpid=$!
	sleep 1
	load baseline-closed-256 --connections 256 --rss-pid "$bpid"
	load baseline-closed-1024 --connections 1024 --rss-pid "$bpid"
	if named baseline-open-30k; then
		load baseline-open-30k --rate 30000 --rss-pid "$bpid" --slow-over 5ms --duration 30s
	fi
	kill -TERM "$bpid"
	wait "$bpid" 2>/dev/null
fi

if [ -x "$bin/generate.test" ] && [ -z "${LOADS:-}" ]; then
	echo "== generation: step end to SSE flush, 256 streams, on cores $srv"
	BATCHD_GEN_STREAM_CLIENTS=256 taskset -c "$srv" "$bin/generate.test" -test.run TestStreamLatencyFigures -test.v -test.count=1 >"$out/stream-256.txt" 2>&1
	tail -n 4 "$out/stream-256.txt"
fi
ls -l "$out"
