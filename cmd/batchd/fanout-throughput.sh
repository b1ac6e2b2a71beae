#!/bin/sh
# A front batchd (devices.backend: fanout) against a stand-in single-input
# API that takes LATENCY per call (the upstream package's test binary,
# serve_test.go), under a concurrency limit of CONCURRENCY: the
# throughput to expect is CONCURRENCY / LATENCY (16 / 20 ms = 800 items/s).
# The load is closed loop (CONNECTIONS connections, enough to keep every
# call slot busy) for DURATION; prints batchd load's report and the
# stand-in's count of calls and the most it saw in flight at once.
# Usage: sh fanout-throughput.sh BATCHD UPSTREAM_TEST
# (DEVICES=4 PER_ITEM=5ms CONCURRENCY=16 LATENCY=20ms CONNECTIONS=512 DURATION=20s; LOAD_FLAGS=--json for the per-second series).
# Not part of make test.
set -eu
bin=$1
standin=$2
conc=${CONCURRENCY:-16}
up=127.0.0.1:18100
front=127.0.0.1:18101
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
BATCHD_SINGLE_STANDIN=$up BATCHD_SINGLE_STANDIN_LATENCY=${LATENCY:-20ms} "$standin" >"$data/standin.log" 2>&1 &
spid=$!
for i in $(seq 100); do
	curl -s -o /dev/null "http://$up/" && break
	sleep 0.1
done
cat >"$data/front.yaml" <<YAML
http:
  addr: $front
devices:
  backend: fanout
  count: ${DEVICES:-4}
  latency_model:               # a batch of n: the devices share the call slots, so each
    base: ${LATENCY:-20ms}       # device's n calls go about concurrency/devices at a time
    per_item: ${PER_ITEM:-5ms}   # devices x LATENCY / CONCURRENCY
  fanout:
    url: http://$up/predict/{model}/{version}
    concurrency: $conc
policy:
  slo: 5s
YAML
"$bin" serve --config "$data/front.yaml" --data-dir "$data/front" --log-level error >"$data/front.log" 2>&1 &
fpid=$!
for i in $(seq 100); do
	curl -sf "http://$front/v2/health/ready" >/dev/null 2>&1 && break
	sleep 0.1
done
"$bin" load --url "http://$front" --connections "${CONNECTIONS:-512}" --duration "${DURATION:-20s}" ${LOAD_FLAGS:-}
kill -TERM $fpid
wait $fpid || true
kill -TERM $spid
wait $spid || true
cat "$data/standin.log"
