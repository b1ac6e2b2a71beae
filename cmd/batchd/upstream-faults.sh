#!/bin/sh
# A front batchd (devices.backend: upstream) against a stand-in OIP upstream
# that answers 500 for a fraction of its batches, drawn at random: first
# FAIL=0, then FAIL (default 0.1), each RATE req/s for DURATION. Prints the
# client p50/p95/p99 of the answered-ok requests, how many were sent,
# answered ok and not, and the stand-in's own count of batches and 500s.
# The stand-in is the upstream package's test binary (serve_test.go).
# Usage: sh upstream-faults.sh BATCHD UPSTREAM_TEST
# (build them: CGO_ENABLED=0 go build -o bin/batchd ./cmd/batchd;
# go test -c -o bin/upstream.test ./engine/upstream).
# RATE=2000 DURATION=20s LATENCY=20ms FAIL=0.1. Not part of make test.
set -eu
bin=$1
standin=$2
rate=${RATE:-2000}
dur=${DURATION:-20s}
up=127.0.0.1:18098
front=127.0.0.1:18099
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
wait_ready() {
	for i in $(seq 100); do
		curl -sf "http://$1/v2/health/ready" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "$1 not ready" >&2
	exit 1
}
cat >"$data/front.yaml" <<YAML
http:
  addr: $front
devices:
  backend: upstream
  count: 4
  latency: 25ms
  restart_backoff: 10ms         # a 500 is a fault: the slot is back soon
  restart_backoff_max: 100ms
  quarantine_after: 10
  upstream:
    url: http://$up
    binary_data: false          # the stand-in speaks JSON
policy:
  slo: 1s
YAML
printf "fail\tp50_ms\tp95_ms\tp99_ms\tsent\tok\tnot_ok\tstand-in\n"
for f in 0 "${FAIL:-0.1}"; do
	BATCHD_OIP_STANDIN=$up BATCHD_OIP_STANDIN_FAIL=$f BATCHD_OIP_STANDIN_LATENCY=${LATENCY:-20ms} "$standin" >"$data/standin.log" 2>&1 &
	spid=$!
	wait_ready "$up"
	"$bin" serve --config "$data/front.yaml" --data-dir "$data/front-$f" --log-level error >"$data/front.log" 2>&1 &
	fpid=$!
	wait_ready "$front"
	"$bin" load --url "http://$front" --rate "$rate" --duration "$dur" --json >"$data/out.json"
	kill -TERM $fpid
	wait $fpid || true
	kill -TERM $spid
	wait $spid || true
	python3 - "$f" "$data/out.json" "$(tail -1 "$data/standin.log")" <<'PY'
import json, sys
d = json.load(open(sys.argv[2]))
ok = d["latency_ms"]["ok"]
r = d["requests"]
print(f"{sys.argv[1]}\t{ok['p50']:.2f}\t{ok['p95']:.2f}\t{ok['p99']:.2f}\t{r['sent']}\t{r['ok']}\t{r['sent'] - r['ok'] + r['wrong_output']}\t{sys.argv[3]}")
PY
done
