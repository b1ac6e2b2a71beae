#!/bin/sh
# Two builds saturated side by side against the plain net/http yardstick:
# ROUNDS times, the yardstick (`batchd load --baseline-server`), then A and
# B (`batchd serve --latency 5ms`, the order alternating), each under B's
# generator (`batchd load`) in a closed loop of CONNS connections for
# DURATION (2 s of it warm-up); with GRPC=1, A and B are driven over gRPC
# streams instead (`--grpc-stream`, CONNS streams), and the yardstick is
# skipped. The server is pinned to CPU 0 and the generator to CPU 1
# (taskset). Prints each run's req/s, server CPU a request (µs, from
# /proc/PID/stat via --rss-pid) and p99, and each build's req/s against the
# yardstick of its round. Usage: sh saturate.sh BATCHD_A BATCHD_B
# (ROUNDS=3 CONNS=1024 DURATION=12s GRPC=). Not part of make test: it
# takes both cores, and on a shared machine only ratios from the same
# round compare.
set -eu
a=$1
b=$2
rounds=${ROUNDS:-3}
conns=${CONNS:-1024}
dur=${DURATION:-12s}
grpc=${GRPC:-}
addr=127.0.0.1:18096
gaddr=127.0.0.1:18098
base=127.0.0.1:18097
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
measure() { # label, pid, load flags...
	label=$1
	pid=$2
	shift 2
	taskset -c 1 "$b" load "$@" --connections "$conns" --duration "$dur" --warmup 2s --rss-pid "$pid" --json >"$data/out.json"
	python3 - "$label" "$data/out.json" "$data/base" <<'PY'
import json, os, sys
label, out, base = sys.argv[1:4]
d = json.load(open(out))
rps = d['throughput']['ok_per_s']
note = ''
if label == 'base':
    open(base, 'w').write(str(rps))
elif os.path.exists(base):
    note = f"\t{rps / float(open(base).read()):.2f}x the yardstick"
bad = d['requests']['sent'] - d['requests']['ok']
print(f"{label}\t{rps:.0f}\t{d['rss']['cpu_us_per_request']:.1f}\t{d['latency_ms']['ok']['p99']:.1f}\t{bad}{note}")
PY
}
serve() { # label, binary
	taskset -c 0 "$2" serve --addr "$addr" --grpc-addr "$gaddr" --latency 5ms --data-dir "$data/$1" --log-level warn >/dev/null 2>&1 &
	pid=$!
	for i in $(seq 100); do
		curl -sf "http://$addr/v2/health/ready" >/dev/null 2>&1 && break
		sleep 0.1
	done
	if [ -n "$grpc" ]; then
		measure "$1" $pid --url "http://$addr" --grpc "$gaddr" --grpc-stream
	else
		measure "$1" $pid --url "http://$addr"
	fi
	kill -TERM $pid
	wait $pid || true
}
printf "run\treq_s\tcpu_us_per_request\tp99_ms\tnot_ok\n"
for r in $(seq "$rounds"); do
	echo "# round $r, $(uptime | sed 's/.*load/load/')"
	rm -f "$data/base"
	if [ -z "$grpc" ]; then
		taskset -c 0 "$b" load --baseline-server "$base" >/dev/null 2>&1 &
		pid=$!
		for i in $(seq 100); do
			curl -s -o /dev/null "http://$base/" 2>/dev/null && break
			sleep 0.1
		done
		measure base $pid --url "http://$base"
		kill -TERM $pid
		wait $pid || true
	fi
	if [ $((r % 2)) = 1 ]; then
		serve A "$a"
		serve B "$b"
	else
		serve B "$b"
		serve A "$a"
	fi
done
