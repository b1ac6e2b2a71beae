#!/bin/sh
# The overload check (`make overload`): one `batchd serve` on its embedded
# default (4 emulated devices of 100 batches/s: 4,000 req/s), then on that
# same server, in a row:
#   base     RATE_BASE (1,000) req/s for 20 s: the RSS to compare with
#   run1     RATE (12,000: 3x) for DURATION, batchd load
#   run2     the same again
#   recover  RATE_BASE for 10 s, in 500 ms intervals: when rejections stop
#   idle     30 s with no load: is the memory given back
#   vegeta1, vegeta2  RATE for DURATION with vegeta, if VEGETA names it
# Every load is open loop on loopback. OUT gets each report (JSON) and
# /metrics after each; summary.txt has the figures, summarised by
# overload-summary.py. Usage: sh overload.sh BATCHD OUT
set -eu
bin=${1:-bin/batchd}
out=${2:-bin/overload}
rate=${RATE:-12000}
base=${RATE_BASE:-1000}
dur=${DURATION:-60s}
vegeta=${VEGETA:-}
addr=127.0.0.1:18081
mkdir -p "$out"
data=$(mktemp -d)
"$bin" serve --addr "$addr" --data-dir "$data" >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for i in $(seq 100); do
	curl -sf "http://$addr/v2/health/ready" >/dev/null 2>&1 && break
	sleep 0.1
done
metrics() { curl -s "http://$addr/metrics" >"$out/metrics-$1.txt"; }
load() { # name, flags...
	name=$1
	shift
	echo "== $name: batchd load $*"
	"$bin" load --url "http://$addr" --rss-pid "$pid" --json "$@" >"$out/$name.json"
	metrics "$name"
}
cpu() { awk '{print $14+$15}' "/proc/$pid/stat"; }
metrics start
load base --rate "$base" --duration 20s
load run1 --rate "$rate" --duration "$dur" --warmup 5s
load run2 --rate "$rate" --duration "$dur" --warmup 5s
load recover --rate "$base" --duration 10s --interval 500ms
echo "== idle 30 s"
: >"$out/idle-rss.txt"
for i in $(seq 30); do
	echo "$i $(awk '/VmRSS/ {print $2}' "/proc/$pid/status")" >>"$out/idle-rss.txt"
	sleep 1
done
if [ -n "$vegeta" ]; then
	for run in 1 2; do
		echo "== vegeta$run: $rate/s for $dur"
		t0=$(cpu)
		printf 'POST http://%s/v1/models/echo/infer\nContent-Type: application/json\n@%s\n' "$addr" "$out/body.json" >"$out/targets.txt"
		echo '{"input": "vegeta-0123456789"}' >"$out/body.json"
		"$vegeta" attack -targets "$out/targets.txt" -rate "$rate" -duration "$dur" -timeout 10s -max-workers 20000 |
			"$vegeta" report -type json >"$out/vegeta$run.json"
		echo "$(cpu) $t0" >"$out/vegeta$run-cpu.txt"
		echo "$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")" >"$out/vegeta$run-rss.txt"
		metrics "vegeta$run"
	done
fi
python3 "$(dirname "$0")/overload-summary.py" "$out" | tee "$out/summary.txt"
