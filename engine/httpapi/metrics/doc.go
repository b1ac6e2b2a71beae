// Package metrics holds the HTTP adapter's Prometheus series: the request,
// response, latency, queue-wait, compute and batch-size series the handler
// updates on every request, the batcher's signals read at scrape time by a
// collector, and the durable job runner's counters, all on a registry of
// their own. Package httpapi documents the series and serves them at
// GET /metrics; this package knows nothing of HTTP requests or API errors:
// the handler passes each engine call's outcome and reason labels in.
//
// The hot path is Metrics.Observe and Metrics.Response, called once or
// twice per request: they resolve each label set's series once and keep
// them (WithLabelValues hashes and locks on every call).
//
// Beside the code, what an operator reads the series with: a Grafana
// dashboard (grafana/batchd.json) and Prometheus alert rules (alerts.yml,
// with promtool unit tests in alerts_test.yml). The tests here fail when
// either names a series the registry does not serve, when promtool
// rejects the rules or a dashboard query, or when an alert does not fire
// on its test series (promtool comes from install-promtool.sh, which
// `make test` runs; without it those checks skip).
//
// Imported by: engine/httpapi (which counts gRPC responses for
// engine/grpcapi too). It imports actors (the reply and signals
// types), engine/jobs (the runner's Stats) and Prometheus's client.
package metrics
