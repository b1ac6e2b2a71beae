#!/usr/bin/env bash
# split-compare.sh: one batcher against one accumulator per model (the
# split, batchd sim --split), side by side on the same scenarios and seed:
# p95/p99, SLO attainment, per-tenant and per-model throughput, fairness.
# Usage: cmd/batchd/split-compare.sh [SCENARIO...] (default: the burst hard
# case, fair-share, slow-fast-models and the reference workload).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$(mktemp -d)}
go build -o "$out/batchd" ./cmd/batchd
scens=("$@")
[ ${#scens[@]} -gt 0 ] || scens=(long-input-burst fair-share slow-fast-models reference)
for sc in "${scens[@]}"; do
	base=$(basename "$sc" .yaml)
	for mode in single split; do
		flag=--split=false
		[ "$mode" = split ] && flag=--split
		"$out/batchd" sim "$sc" $flag --json >"$out/$base-$mode.json" 2>/dev/null || true
	done
	python3 - "$out/$base-single.json" "$out/$base-split.json" <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
name = runs[0]["scenario"] or sys.argv[1]
print(f"== {name}")
def row(label, f):
    vals = []
    for r in runs:
        try:
            vals.append(f(r))
        except (KeyError, TypeError):
            vals.append("-")
    print(f"  {label:44s} {vals[0]!s:>12} {vals[1]!s:>12}")
row("", lambda r: "single" if r is runs[0] else "split")
row("passed its expectations", lambda r: r["passed"])
rep = lambda r: r["report"]
row("p95 / p99 ms", lambda r: f'{rep(r)["latency_ms"]["p95"]:.1f}/{rep(r)["latency_ms"]["p99"]:.1f}')
row("SLO attainment", lambda r: f'{rep(r)["slo_attainment"]:.6f}')
row("completed / rejected / expired", lambda r: "{completed}/{rejected}/{expired}".format(**rep(r)["requests"]))
row("fairness Jain weighted", lambda r: f'{rep(r)["fairness"]["jain_weighted"]:.6f}')
for kind in ("tenants", "models"):
    for n in sorted(rep(runs[0])[kind]):
        row(f"{kind[:-1]} {n} req/s, p95, p99, SLO", lambda r, n=n, kind=kind: "{:.1f} {:.1f} {:.1f} {:.4f}".format(
            rep(r)[kind][n]["throughput_rps"], rep(r)[kind][n]["latency_ms"]["p95"], rep(r)[kind][n]["latency_ms"]["p99"], rep(r)[kind][n]["slo_attainment"]))
for w in rep(runs[0]).get("windows") or []:
    if w["to_s"] - w["from_s"] >= 30:
        continue
    for n in sorted(w["tenants"]):
        row(f'{w["from_s"]}-{w["to_s"]}s {n} p95 ms, SLO', lambda r, w=w, n=n: "{:.1f} {:.4f}".format(
            [x for x in rep(r)["windows"] if x["from_s"] == w["from_s"]][0]["tenants"][n]["latency_ms"]["p95"],
            [x for x in rep(r)["windows"] if x["from_s"] == w["from_s"]][0]["tenants"][n]["slo_attainment"]))
PY
done
