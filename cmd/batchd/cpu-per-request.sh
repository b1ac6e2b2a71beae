#!/bin/sh
# The server's CPU a request against the plain net/http baseline's, two
# builds side by side: ROUNDS times, the baseline (`batchd load
# --baseline-server`), then A and B (`batchd serve --latency 5ms`, the
# order alternating), each under B's generator (`batchd load`) at RATE
# req/s for DURATION (2 s of it warm-up). The server is pinned to CPU 0
# and the generator to CPU 1 (taskset), so the server's CPU is one
# core's. Prints each run's CPU a request (µs, from /proc/PID/stat via
# --rss-pid) and p99, each build's ratio to the baseline of its round,
# their medians, and B/A per round. Usage: sh cpu-per-request.sh
# BATCHD_A BATCHD_B (ROUNDS=8 RATE=2000 DURATION=8s). Not part of make
# test: it takes 3 x ROUNDS x DURATION of real time and both cores, and
# on a shared machine only ratios from the same round compare.
set -eu
a=$1
b=$2
rounds=${ROUNDS:-8}
rate=${RATE:-2000}
dur=${DURATION:-8s}
addr=127.0.0.1:18096
base=127.0.0.1:18097
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
measure() { # label, pid, address
	taskset -c 1 "$b" load --url "http://$3" --rate "$rate" --duration "$dur" --warmup 2s --rss-pid "$2" --json >"$data/out.json"
	python3 - "$1" "$data/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[2]))
print(f"{sys.argv[1]}\t{d['rss']['cpu_us_per_request']:.1f}\t{d['latency_ms']['ok']['p99']:.2f}")
PY
}
serve() { # label, binary
	taskset -c 0 "$2" serve --addr "$addr" --latency 5ms --data-dir "$data/$1" --log-level warn >/dev/null 2>&1 &
	pid=$!
	for i in $(seq 100); do
		curl -sf "http://$addr/v2/health/ready" >/dev/null 2>&1 && break
		sleep 0.1
	done
	measure "$1" $pid "$addr"
	kill -TERM $pid
	wait $pid || true
}
printf "run\tcpu_us_per_request\tp99_ms\n"
for r in $(seq "$rounds"); do
	echo "# round $r, $(uptime | sed 's/.*load/load/')"
	taskset -c 0 "$b" load --baseline-server "$base" >/dev/null 2>&1 &
	pid=$!
	for i in $(seq 100); do
		curl -s -o /dev/null "http://$base/" 2>/dev/null && break
		sleep 0.1
	done
	measure base $pid "$base"
	kill -TERM $pid
	wait $pid || true
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
    if line.startswith("#") or len(f) != 3 or f[0] == "run":
        continue
    if f[0] == "base":
        rounds.append({})
    rounds[-1][f[0]] = float(f[1])
for k in "AB":
    r = [x[k] / x["base"] for x in rounds]
    print(f"{k}: against the baseline {' '.join(f'{v:.2f}' for v in r)}; median {statistics.median(r):.2f}, "
          f"{statistics.median(x[k] for x in rounds):.1f} µs a request")
ba = [x["B"] / x["A"] for x in rounds]
print(f"B/A per round {' '.join(f'{v:.3f}' for v in ba)}; median {statistics.median(ba):.3f}")
print(f"baseline median {statistics.median(x['base'] for x in rounds):.1f} µs a request")
PY
