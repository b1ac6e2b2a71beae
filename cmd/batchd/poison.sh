#!/bin/sh
# The live poison check (`make poison`): `batchd serve` on its embedded
# default with devices.faults.poison_prefix set, RATE (500) req/s of normal
# traffic from `batchd load` for DURATION (30s), and beside it POISON_RATE
# (10) poison requests a second (curl, one at a time), cycling over
# POISON_INPUTS (3) distinct poison inputs, as clients that retry them
# would. Prints the normal traffic's outcomes (every non-200 is a normal
# request that missed) and the poison requests' status codes.
# Usage: sh poison.sh BATCHD OUT
set -eu
bin=${1:-bin/batchd}
out=${2:-bin/poison}
rate=${RATE:-500}
dur=${DURATION:-30s}
prate=${POISON_RATE:-10}
pinputs=${POISON_INPUTS:-3}
addr=127.0.0.1:18082
mkdir -p "$out"
data=$(mktemp -d)
printf 'devices:\n  faults: {poison_prefix: "POISON"}\n' >"$out/poison.yaml"
"$bin" serve --config "$out/poison.yaml" --addr "$addr" --data-dir "$data" >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for i in $(seq 100); do
	curl -sf "http://$addr/v2/health/ready" >/dev/null 2>&1 && break
	sleep 0.1
done
"$bin" load --url "http://$addr" --rate "$rate" --duration "$dur" --json >"$out/normal.json" &
lpid=$!
secs=${dur%s}
n=$((secs * prate))
i=0
curls=""
: >"$out/poison-codes.txt"
while [ "$i" -lt "$n" ]; do
	k=$((i % pinputs))
	curl -s -m 10 -o /dev/null -w '%{http_code} %{time_total}\n' "http://$addr/v1/models/echo/infer" \
		-H 'Content-Type: application/json' -d "{\"input\": \"POISON-$k\"}" >>"$out/poison-codes.txt" &
	curls="$curls $!"
	i=$((i + 1))
	sleep "$(awk "BEGIN {print 1/$prate}")"
done
wait "$lpid"
# shellcheck disable=SC2086
wait $curls
python3 - "$out" <<'PY'
import json, sys, collections
out = sys.argv[1]
r = json.load(open(out + '/normal.json'))
codes = collections.Counter(l.split()[0] for l in open(out + '/poison-codes.txt'))
print('normal  sent %d: status %s; p99 %.1f ms; missed (not 200) %d' % (
    r['requests']['sent'], r['status'], r['latency_ms']['ok']['p99'],
    r['requests']['sent'] - r['status'].get('200', 0)))
print('poison  sent %d: status %s' % (sum(codes.values()), dict(codes)))
PY
