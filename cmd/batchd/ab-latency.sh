#!/bin/sh
# Two builds side by side at one open-loop rate: PAIRS times, alternating,
# each build serves its embedded default (`batchd serve`) on loopback and
# B's generator (`batchd load`) sends RATE req/s for DURATION at it; prints
# the client p50/p95/p99 and the errors of every run, and the median p99
# of each build. Usage: sh ab-latency.sh BATCHD_A BATCHD_B
# (PAIRS=3 RATE=2000 DURATION=20s). Not part of make test: it takes
# 2 x PAIRS x DURATION of real time and both cores.
set -eu
a=$1
b=$2
pairs=${PAIRS:-3}
rate=${RATE:-2000}
dur=${DURATION:-20s}
addr=127.0.0.1:18095
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
one() { # label, binary
	"$2" serve --addr "$addr" --data-dir "$data/$1" --log-level warn >/dev/null 2>&1 &
	pid=$!
	for i in $(seq 100); do
		curl -sf "http://$addr/v2/health/ready" >/dev/null 2>&1 && break
		sleep 0.1
	done
	"$b" load --url "http://$addr" --rate "$rate" --duration "$dur" --json >"$data/out.json"
	kill -TERM $pid
	wait $pid || true
	python3 - "$1" "$data/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[2]))
ok = d["latency_ms"]["ok"]
r = d["requests"]
errors = r["sent"] - r["ok"] + r["wrong_output"]
print(f"{sys.argv[1]}\t{ok['p50']:.2f}\t{ok['p95']:.2f}\t{ok['p99']:.2f}\t{errors}")
PY
}
printf "build\tp50_ms\tp95_ms\tp99_ms\tnot_ok\n"
for i in $(seq "$pairs"); do
	one A "$a"
	one B "$b"
done | tee "$data/runs.tsv"
python3 - "$data/runs.tsv" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
for b in "AB":
    p99 = [float(r[3]) for r in rows if r[0] == b]
    print(f"median p99 {b}: {statistics.median(p99):.2f} ms over {len(p99)} runs")
PY
