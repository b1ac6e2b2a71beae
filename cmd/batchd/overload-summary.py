"""Summarise cmd/batchd/overload.sh's OUT folder: goodput against the
fleet's capacity, the server's own rejection latency (from the
batchd_latency_seconds histogram of /metrics, before and after each run),
RSS, CPU, and when rejections stop after the overload."""
import json
import os
import sys

CAPACITY = 4000.0  # the embedded default: 4 devices x 100 per batch / 100 ms


def rejected_buckets(path):
    b = {}
    for line in open(path):
        if line.startswith('batchd_latency_seconds_bucket{') and 'outcome="rejected"' in line:
            le = line.split('le="')[1].split('"')[0]
            b[le] = b.get(le, 0) + float(line.rsplit(' ', 1)[1])
    return b


def under(path_before, path_after, le='0.005'):
    a, b = rejected_buckets(path_after), rejected_buckets(path_before)
    total = a.get('+Inf', 0) - b.get('+Inf', 0)
    fast = a.get(le, 0) - b.get(le, 0)
    return total, fast


def main(out):
    prev = 'start'
    for name in ['base', 'run1', 'run2', 'recover']:
        r = json.load(open(os.path.join(out, name + '.json')))
        t = r['throughput']
        rss = r.get('rss') or {}
        total, fast = under(os.path.join(out, 'metrics-%s.txt' % prev), os.path.join(out, 'metrics-%s.txt' % name))
        prev = name
        lat = r['latency_ms']
        print('%-8s offered %7.0f/s  ok %6.0f/s (%.1f%% of capacity)  status %s  errors %s' % (
            name, t['offered_per_s'], t['ok_per_s'], 100 * t['ok_per_s'] / CAPACITY, r['status'], r.get('errors')))
        print('         client p99 ms: ok %.2f, rejected %.2f;  server rejections under 5 ms: %s' % (
            lat['ok']['p99'], lat.get('rejected', {}).get('p99', 0),
            '%.2f%% of %d' % (100 * fast / total, total) if total else 'none'))
        print('         server rss KiB first %s max %s last %s; server cpu %.1f us/request, generator %.1f us/request (%.0f%% of %s cores)' % (
            rss.get('first_kib'), rss.get('max_kib'), rss.get('last_kib'), rss.get('cpu_us_per_request', 0),
            r['generator_cpu_us_per_request'], 100 * r['generator_busy'], r['generator_cores']))
        if name == 'recover':
            last_rej = 0.0
            for iv in r['intervals']:
                if iv['rejected']:
                    last_rej = iv['t_s']
            print('         rejections at %s/s stop after %.1f s (intervals of 500 ms: %s)' % (
                int(t['offered_per_s']), last_rej, [iv['rejected'] for iv in r['intervals']]))
    idle = [l.split() for l in open(os.path.join(out, 'idle-rss.txt'))]
    print('idle     rss KiB over 30 s: %s' % ' '.join(v for _, v in idle[::5] + idle[-1:]))
    for run in (1, 2):
        p = os.path.join(out, 'vegeta%d.json' % run)
        if not os.path.exists(p):
            continue
        v = json.load(open(p))
        codes = v.get('status_codes', {})
        ok = codes.get('200', 0)
        total, fast = under(os.path.join(out, 'metrics-%s.txt' % ('recover' if run == 1 else 'vegeta1')), os.path.join(out, 'metrics-vegeta%d.txt' % run))
        dur_s = v['duration'] / 1e9
        # vegeta lists HTTP statuses among its errors ("503 Service
        # Unavailable"); what is left failed below HTTP: connections.
        errs = [e for e in v.get('errors', []) if not e[:3].isdigit()]
        print('vegeta%d  rate %.0f/s  ok %.0f/s (%.1f%% of capacity)  codes %s  p99 %.2f ms  connection errors %s' % (
            run, v['rate'], ok / dur_s, 100 * ok / dur_s / CAPACITY, codes, v['latencies']['99th'] / 1e6, errs[:3] or 0))
        print('         server rejections under 5 ms: %s' % ('%.2f%% of %d' % (100 * fast / total, total) if total else 'none'))


if __name__ == '__main__':
    main(sys.argv[1])
