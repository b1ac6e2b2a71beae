#!/bin/sh
# The server's CPU a request against the plain net/http baseline's, two
# builds side by side: ROUNDS times, the baseline (`batchd load
# --baseline-server`), then A and B (`batchd serve --latency 5ms`, the
# order alternating), each under B's generator (`batchd load`) at RATE
# req/s for DURATION (2 s of it warm-up); with CONNS set, a closed loop of
# CONNS connections instead (saturated: then req/s against the baseline's
# is the figure), and with GRPC=1 too, A and B driven over CONNS gRPC
# streams (`--grpc-stream`) and no baseline. The server is pinned to CPU 0
# and the generator to CPU 1 (taskset), so the server's CPU is one
# core's. Prints each run's CPU a request (µs, from /proc/PID/stat via
# --rss-pid), p99, req/s and the bytes the server allocated a request
# (go_memstats_alloc_bytes_total on its /metrics, before and after; "-"
# for the baseline and for builds without it), each build's ratios to the
# baseline of its round, their medians, and B/A per round. Usage: sh cpu-per-request.sh
# BATCHD_A BATCHD_B (ROUNDS=8 RATE=2000 DURATION=8s CONNS= GRPC=). Not
# part of make test: it takes 3 x ROUNDS x DURATION of real time and both
# cores, and on a shared machine only ratios from the same round compare.
set -eu
a=$1
b=$2
rounds=${ROUNDS:-8}
rate=${RATE:-2000}
dur=${DURATION:-8s}
conns=${CONNS:-}
grpc=${GRPC:-}
if [ -n "$grpc" ] && [ -z "$conns" ]; then
	echo "GRPC=1 needs CONNS (the streams of the closed loop)" >&2
	exit 2
fi
addr=127.0.0.1:18096
gaddr=127.0.0.1:18098
base=127.0.0.1:18097
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
# allocated prints the server's bytes allocated so far, or nothing.
allocated() {
	curl -s "http://$addr/metrics" 2>/dev/null | awk '/^go_memstats_alloc_bytes_total /{printf "%.0f", $2}'
}
measure() { # label, pid, load flags...
	label=$1
	pid=$2
	shift 2
	a0=
	[ "$label" = base ] || a0=$(allocated)
	if [ -n "$conns" ]; then
		set -- "$@" --connections "$conns"
	else
		set -- "$@" --rate "$rate"
	fi
	taskset -c 1 "$b" load "$@" --duration "$dur" --warmup 2s --rss-pid "$pid" --json >"$data/out.json"
	a1=
	[ -z "$a0" ] || a1=$(allocated)
	python3 - "$label" "$data/out.json" "$a0" "$a1" <<'PY'
import json, sys
d = json.load(open(sys.argv[2]))
rss = d['rss']
alloc = "-"
if sys.argv[3] and sys.argv[4] and rss['cpu_us_per_request'] > 0:
    made = rss['cpu_s'] / rss['cpu_us_per_request'] * 1e6  # every request made, warmup included
    alloc = f"{(float(sys.argv[4]) - float(sys.argv[3])) / made:.0f}"
print(f"{sys.argv[1]}\t{rss['cpu_us_per_request']:.1f}\t{d['latency_ms']['ok']['p99']:.2f}\t{d['throughput']['ok_per_s']:.0f}\t{alloc}")
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
printf "run\tcpu_us_per_request\tp99_ms\treq_s\talloc_bytes_per_request\n"
for r in $(seq "$rounds"); do
	echo "# round $r, $(uptime | sed 's/.*load/load/')"
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
done | tee "$data/runs.tsv"
python3 - "$data/runs.tsv" <<'PY'
import statistics, sys
rounds = []
for line in open(sys.argv[1]):
    f = line.split("\t")
    if line.startswith("#"):
        rounds.append({})
        continue
    if len(f) != 5 or f[0] == "run":
        continue
    rounds[-1][f[0]] = (float(f[1]), float(f[3]), None if f[4].strip() == "-" else float(f[4]))
def med(v):
    return statistics.median(v)
for k in "AB":
    cpu = [x[k][0] for x in rounds]
    line = f"{k}: {med(cpu):.1f} µs a request"
    if all("base" in x for x in rounds):
        r = [x[k][0] / x["base"][0] for x in rounds]
        q = [x[k][1] / x["base"][1] for x in rounds]
        line += f"; CPU against the baseline {' '.join(f'{v:.2f}' for v in r)} (median {med(r):.2f}); req/s {' '.join(f'{v:.2f}' for v in q)} (median {med(q):.2f})"
    print(line)
ba = [x["B"][0] / x["A"][0] for x in rounds]
print(f"B/A CPU per round {' '.join(f'{v:.3f}' for v in ba)}; median {med(ba):.3f}")
for k in "AB":
    al = [x[k][2] for x in rounds if x[k][2] is not None]
    if al:
        print(f"{k}: {med(al):.0f} bytes allocated a request (median of {len(al)})")
if all("base" in x for x in rounds):
    print(f"baseline median {med([x['base'][0] for x in rounds]):.1f} µs a request")
PY
