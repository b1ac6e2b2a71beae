#!/bin/sh
# load-compare.sh: a cluster against one node of as many devices, at one
# open-loop rate, alternately ROUNDS times. "cluster": cluster/local.sh's
# NODES nodes of DEVICES emulated devices (100 ms a batch of up to 100,
# the embedded default's), the load spread evenly over their fronts;
# "single": one batchd serve with NODES x DEVICES devices, the same load on
# its one front. The load is GENS `batchd load` generators (open loop,
# Poisson, seeds 1..GENS, RATE/GENS req/s each, for DURATION) in both
# setups: with the cluster, generator i sends to front i mod NODES.
# Prints, per run, the requests, the not-ok (errors, rejections, wrong
# outputs), the generators' p50/p95/p99 (the largest of the GENS: an upper
# bound on the p99 of all requests together, which lies between the
# smallest and the largest), the load average and the not-ok by status or
# error; then each setup's median
# over the rounds and the ratio of the median p99s.
# Usage: sh cluster/load-compare.sh [BIN] (BIN: bin/batchd; make build).
# ROUNDS=3 RATE=2000 DURATION=20s NODES=3 DEVICES=2 GENS=3. Not part of
# make test: it takes 2 x ROUNDS x (DURATION + about 10 s) and both cores.
set -eu
BIN=${1:-bin/batchd}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-2000}
DURATION=${DURATION:-20s}
NODES=${NODES:-3}
DEVICES=${DEVICES:-2}
GENS=${GENS:-3}
HTTP_BASE=${HTTP_BASE:-18381}
GOSSIP_BASE=${GOSSIP_BASE:-18346}
DATA_BASE=${DATA_BASE:-18446}
here=$(dirname "$0")
work=$(mktemp -d /tmp/batchd-load-compare.XXXXXX)
srv=""
cleanup() {
	[ -n "$srv" ] && kill -TERM "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# load SETUP RUN: GENS generators against the setup's fronts; their
# reports in $work/SETUP-RUN-g*.json.
load() {
	g=0
	lpids=""
	while [ "$g" -lt "$GENS" ]; do
		front=0
		[ "$1" = cluster ] && front=$((g % NODES))
		"$BIN" load --url "http://127.0.0.1:$((HTTP_BASE + front))" --rate "$(python3 -c "print($RATE/$GENS)")" \
			--duration "$DURATION" --seed $((g + 1)) --json > "$work/$1-$2-g$g.json" &
		lpids="$lpids $!"
		g=$((g + 1))
	done
	for p in $lpids; do wait "$p"; done
}

# summary SETUP RUN LOAD: one row of the table.
summary() {
	python3 - "$1" "$2" "$3" "$work" "$GENS" <<'PY'
import json, sys
setup, run, loadavg, work, gens = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
sent = notok = 0
p = {"p50": [], "p95": [], "p99": []}
why = {}
for g in range(gens):
    d = json.load(open(f"{work}/{setup}-{run}-g{g}.json"))
    r = d["requests"]
    sent += r["sent"]
    notok += r["sent"] - r["ok"] + r["wrong_output"]
    for k, v in list(d.get("status", {}).items()) + list(d.get("errors", {}).items()):
        if k != "200":
            why[k] = why.get(k, 0) + v
    if r["wrong_output"]:
        why["wrong_output"] = why.get("wrong_output", 0) + r["wrong_output"]
    for k in p:
        p[k].append(d["latency_ms"]["ok"][k])
print(f"{setup}\t{run}\t{sent}\t{notok}\t{max(p['p50']):.1f}\t{max(p['p95']):.1f}\t{max(p['p99']):.1f}\t"
      + "/".join(f"{x:.1f}" for x in p["p99"]) + f"\t{loadavg}\t" + (",".join(f"{k}:{v}" for k, v in sorted(why.items())) or "-"))
PY
}

cluster() { # RUN
	HTTP_BASE=$HTTP_BASE GOSSIP_BASE=$GOSSIP_BASE DATA_BASE=$DATA_BASE NODES=$NODES DEVICES=$DEVICES \
		BIN=$BIN DIR="$work" sh "$here/local.sh" > "$work/local.out" 2>&1 &
	srv=$!
	tries=0
	until grep -q "shows it again" "$work/local.out"; do
		tries=$((tries + 1))
		[ "$tries" -le 300 ] || { echo "the cluster did not start:" >&2; cat "$work/local.out" >&2; exit 1; }
		sleep 0.1
	done
	load cluster "$1"
	kill -TERM "$srv"
	wait "$srv" || { echo "cluster/local.sh did not stop cleanly:" >&2; cat "$work/local.out" >&2; exit 1; }
	srv=""
}

single() { # RUN
	"$BIN" serve --addr "127.0.0.1:$HTTP_BASE" --devices $((NODES * DEVICES)) --data-dir "$work/single" --log-level warn > "$work/single.log" 2>&1 &
	srv=$!
	tries=0
	until curl -sf "http://127.0.0.1:$HTTP_BASE/v2/health/ready" > /dev/null 2>&1; do
		tries=$((tries + 1))
		[ "$tries" -le 100 ] || { echo "the single node did not start:" >&2; cat "$work/single.log" >&2; exit 1; }
		sleep 0.1
	done
	load single "$1"
	kill -TERM "$srv"
	wait "$srv" || { echo "the single node did not stop cleanly:" >&2; cat "$work/single.log" >&2; exit 1; }
	srv=""
}

printf "setup\trun\tsent\tnot_ok\tp50_ms\tp95_ms\tp99_ms\tp99_per_generator\tload_1m\tnot_ok_by_status\n"
run=1
while [ "$run" -le "$ROUNDS" ]; do
	for setup in cluster single; do
		la=$(cut -d' ' -f1 /proc/loadavg)
		$setup "$run"
		summary "$setup" "$run" "$la"
	done
	run=$((run + 1))
done | tee "$work/runs.tsv"
python3 - "$work/runs.tsv" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
for s in ("cluster", "single"):
    rs = [r for r in rows if r[0] == s]
    med[s] = {k: statistics.median(float(r[i]) for r in rs) for k, i in (("p50", 4), ("p95", 5), ("p99", 6))}
    print(f"median {s}: p50 {med[s]['p50']:.1f} ms, p95 {med[s]['p95']:.1f} ms, p99 {med[s]['p99']:.1f} ms over {len(rs)} runs; not ok {sum(int(r[3]) for r in rs)} of {sum(int(r[2]) for r in rs)}")
print(f"p99 cluster / single: {med['cluster']['p99'] / med['single']['p99']:.3f}")
PY
