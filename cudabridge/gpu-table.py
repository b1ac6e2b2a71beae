#!/usr/bin/env python3
"""Tables of the GPU host's figures, from the directories that
cudabridge/gpu-ab.sh and cudabridge/gpu-serve.sh write:

    python3 cudabridge/gpu-table.py DIR...

For each `batchd load --json` report in DIR: req/s answered, latency p50,
p99 and p99.9 (ms), the server's CPU a request (us) and cores used, and RSS
(MB: first, at 10 s, last). Where /metrics was scraped around a load
(gpu-ab.sh's NAME-m0/m1/m2.txt), also the GPU's cycle: items a batch, the
wall time a batch (cycle), the backend's Run and its wait for the GPU (us a
batch; batchd_gpu_*_total), and the engine's mean queue wait, compute and
handler latency (ms; batchd_queue_wait_seconds, batchd_compute_seconds,
batchd_latency_seconds). An open loop's tail is split: the server's own
p99 (what its 200s report, with --check or --slow-over), the generator's
send lag p99 (from a request's intended to its actual send: a stalled
generator, or every connection busy and new ones dialing), and the
connections the generator opened."""
import glob
import json
import os
import sys


def metric(path, name):
    total = 0.0
    found = False
    with open(path) as f:
        for line in f:
            if line.startswith(name + "{") or line.startswith(name + " "):
                if 'outcome="rejected"' in line:
                    continue
                total += float(line.split()[-1])
                found = True
    return total if found else None


def delta(m0, m1, name):
    a, b = metric(m0, name), metric(m1, name)
    if b is None:
        return None
    return b - (a or 0)  # a series not yet there counts from 0


def row(path):
    d = json.load(open(path))
    ok = d["requests"]["ok"]
    el = d["elapsed_s"]
    lat = d["latency_ms"]["ok"]
    rss = d.get("rss") or {}
    cores = rss.get("cpu_s", 0) / el if el else 0
    cells = [
        os.path.basename(path)[:-5],
        f"{d['throughput']['ok_per_s']:,.0f}",
        f"{lat['p50']:.2f} / {lat['p99']:.2f} / {lat['p99_9']:.2f}",
        f"{rss.get('cpu_us_per_request', 0):.1f}",
        f"{cores:.2f}",
        f"{rss.get('first_kib', 0) // 1024} / {rss.get('at_10s_kib', 0) // 1024} / {rss.get('last_kib', 0) // 1024}",
    ]
    srv = (d.get("server") or {}).get("latency_ms") or {}
    lag = d.get("send_lag_ms") or {}
    cells.append(" / ".join([f"{srv['p99']:.2f}" if srv.get("count") else "-",
                             f"{lag['p99']:.2f}" if lag.get("count") else "-",
                             f"{d.get('connections_opened', 0):,}"]))
    base, kind = path[:-5].rsplit("-", 1) if path.endswith(("-rest.json", "-grpc.json")) else (None, None)
    extra = [""] * 4
    if base:
        m0, m1 = (f"{base}-m0.txt", f"{base}-m1.txt") if kind == "rest" else (f"{base}-m1.txt", f"{base}-m2.txt")
        if os.path.exists(m0) and os.path.exists(m1):
            n = delta(m0, m1, "batchd_gpu_batches_total")
            if n:
                run = delta(m0, m1, "batchd_gpu_run_seconds_total")
                wait = delta(m0, m1, "batchd_gpu_wait_seconds_total")
                extra[0] = f"{ok / n:.1f} / {el / n * 1e6:.0f} / {run / n * 1e6:.0f} / {wait / n * 1e6:.0f}"
            for i, name in enumerate(["batchd_queue_wait_seconds", "batchd_compute_seconds", "batchd_latency_seconds"]):
                s, c = delta(m0, m1, name + "_sum"), delta(m0, m1, name + "_count")
                if s is not None and c:
                    extra[1 + i] = f"{s / c * 1e3:.2f}"
    return cells + extra


def main():
    head = ["load", "req/s", "p50 / p99 / p99.9 ms", "CPU us/req", "cores", "RSS MiB first / 10 s / last",
            "server p99 / send lag p99 ms / conns",
            "items / cycle / run / wait (us a batch)", "queue ms", "compute ms", "handler ms"]
    for d in sys.argv[1:]:
        print(f"\n{d}\n")
        print("| " + " | ".join(head) + " |")
        print("|" + " --- |" * len(head))
        for p in sorted(glob.glob(os.path.join(d, "*.json"))):
            print("| " + " | ".join(row(p)) + " |")


if __name__ == "__main__":
    main()
