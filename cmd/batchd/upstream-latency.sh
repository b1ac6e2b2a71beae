#!/bin/sh
# batchd behind batchd: what a front batchd whose devices are slots on an
# upstream batchd (devices.backend: upstream) adds to the latency of the
# upstream alone. Starts the upstream (the embedded default: 4 emulated
# devices at 100 ms, batches of up to 100) on 127.0.0.1:18096 and the front
# (FRONT_CONFIG, default: 4 slots on it, planned at 105 ms) on
# 127.0.0.1:18097, then sends RATE req/s for DURATION PAIRS times to each in
# turn (alone, then behind) and prints each run's client p50/p95/p99 and
# not-ok count, and the median p99 of each and their difference.
# The upstream runs UP_CONFIG (default: the embedded default with
# policy.linger_max UP_LINGER=2ms: behind a front, which has batched
# already, a second linger only adds latency; but the elements of one
# /v2 call enter the upstream's batcher one by one, and with a linger
# shorter than that takes, a front batch is split over devices). With ALONE_CONFIG, "alone"
# is a third batchd of its own on 127.0.0.1:18095 running that file (the
# same devices with the default linger, say), so each setup is measured as
# it would be deployed.
# Usage: sh upstream-latency.sh BATCHD (PAIRS=3 RATE=2000 DURATION=20s).
# Not part of make test.
set -eu
bin=$1
pairs=${PAIRS:-3}
rate=${RATE:-2000}
dur=${DURATION:-20s}
up=127.0.0.1:18096
front=127.0.0.1:18097
data=$(mktemp -d)
pids=
trap 'for p in $pids; do kill -TERM $p 2>/dev/null; wait $p 2>/dev/null; done; rm -rf "$data"' EXIT
wait_ready() {
	for i in $(seq 100); do
		curl -sf "http://$1/v2/health/ready" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "$1 not ready" >&2
	exit 1
}
upcfg=${UP_CONFIG:-$data/up.yaml}
if [ -z "${UP_CONFIG:-}" ]; then
	cat >"$upcfg" <<YAML
policy:
  linger_max: ${UP_LINGER:-2ms}
YAML
fi
"$bin" serve --config "$upcfg" --addr "$up" --data-dir "$data/up" --log-level warn >"$data/up.log" 2>&1 &
pids="$pids $!"
wait_ready "$up"
cfg=${FRONT_CONFIG:-$data/front.yaml}
if [ -z "${FRONT_CONFIG:-}" ]; then
	cat >"$cfg" <<YAML
http:
  addr: $front
devices:
  backend: upstream
  count: 4
  latency: 105ms
  upstream:
    url: http://$up
YAML
fi
"$bin" serve --config "$cfg" --data-dir "$data/front" --log-level warn >"$data/front.log" 2>&1 &
pids="$pids $!"
wait_ready "$front"
alone=$up
if [ -n "${ALONE_CONFIG:-}" ]; then
	alone=127.0.0.1:18095
	"$bin" serve --config "$ALONE_CONFIG" --addr "$alone" --data-dir "$data/alone" --log-level warn >"$data/alone.log" 2>&1 &
	pids="$pids $!"
	wait_ready "$alone"
fi
one() { # label, address
	"$bin" load --url "http://$2" --rate "$rate" --duration "$dur" --json >"$data/out.json"
	python3 - "$1" "$data/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[2]))
ok = d["latency_ms"]["ok"]
r = d["requests"]
errors = r["sent"] - r["ok"] + r["wrong_output"]
print(f"{sys.argv[1]}\t{ok['p50']:.2f}\t{ok['p95']:.2f}\t{ok['p99']:.2f}\t{r['sent']}\t{errors}")
PY
}
printf "target\tp50_ms\tp95_ms\tp99_ms\tsent\tnot_ok\n"
for i in $(seq "$pairs"); do
	one alone "$alone"
	one behind "$front"
done | tee "$data/runs.tsv"
python3 - "$data/runs.tsv" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
for t in ("alone", "behind"):
    med[t] = statistics.median(float(r[3]) for r in rows if r[0] == t)
    print(f"median p99 {t}: {med[t]:.2f} ms")
print(f"added p99: {med['behind'] - med['alone']:.2f} ms (ratio {med['behind'] / med['alone']:.3f})")
PY
