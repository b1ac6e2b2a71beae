package ledger

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHistPercentiles(t *testing.T) {
	h := newHist()
	// 1 ms .. 1000 ms, one each: the q-th percentile is q·10 ms.
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	got := h.percentiles()
	want := Percentiles{P50: 500, P95: 950, P99: 990, Max: 1000}
	// Three significant digits: within 0.1%.
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p50", got.P50, want.P50}, {"p95", got.P95, want.P95}, {"p99", got.P99, want.P99}, {"max", got.Max, want.Max}} {
		if c.got < c.want || c.got > c.want*1.001 {
			t.Errorf("%s = %v ms, want %v ms (+0.1%%)", c.name, c.got, c.want)
		}
	}
	if got.Max != 1000 {
		t.Errorf("max = %v, want exactly 1000", got.Max)
	}
}

func TestHistEdges(t *testing.T) {
	h := newHist()
	if p := h.percentiles(); p != (Percentiles{}) {
		t.Errorf("empty histogram: %+v, want zeros", p)
	}
	// One value: every percentile is that value, not its bucket's top.
	h.record(100 * time.Millisecond)
	if p := h.percentiles(); p != (Percentiles{100, 100, 100, 100}) {
		t.Errorf("one value of 100 ms: %+v", p)
	}
	// Out of range values are clamped, not dropped.
	h.record(-time.Second)
	h.record(2 * histMax)
	if h.n != 3 || h.max != histMax {
		t.Errorf("clamping: n %d, max %v", h.n, h.max)
	}
}

func TestBucketBatchSizes(t *testing.T) {
	sizes := make([]int64, 102) // BatchMax 100, plus the invalid slot
	sizes[1], sizes[10], sizes[11], sizes[100], sizes[101] = 1, 2, 3, 4, 99
	got := bucketBatchSizes(sizes, 100)
	if len(got) != 10 {
		t.Fatalf("%d buckets, want 10: %+v", len(got), got)
	}
	if got[0] != (BatchBucket{1, 10, 3}) || got[1] != (BatchBucket{11, 20, 3}) || got[9] != (BatchBucket{91, 100, 4}) {
		t.Errorf("buckets %+v", got)
	}
	// A BatchMax that does not divide by ten still covers 1..BatchMax.
	got = bucketBatchSizes(make([]int64, 9), 7)
	if len(got) != 7 || got[6].Max != 7 {
		t.Errorf("BatchMax 7: %+v", got)
	}
}

// TestReportJSONFields pins the JSON names that `batchd sim --json`
// promises (the issue lists them; RESULTS.md and scripts read them).
func TestReportJSONFields(t *testing.T) {
	b, err := json.Marshal(Report{BatchSizes: []BatchBucket{{1, 10, 1}}, Violations: ViolationSummary{First: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"seed", "trace_hash", "requests", "latency_ms", "queue_ms", "compute_ms",
		"throughput_rps", "device_utilization", "batch_size_mean", "batch_sizes", "simulated_seconds",
		"wall_seconds", "events", "violations"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report JSON lacks %q: %s", k, b)
		}
	}
	req := m["requests"].(map[string]any)
	for _, k := range []string{"offered", "accepted", "completed", "rejected", "expired", "failed", "cancelled", "lost", "duplicated"} {
		if _, ok := req[k]; !ok {
			t.Errorf("requests lacks %q", k)
		}
	}
	for _, h := range []string{"latency_ms", "queue_ms", "compute_ms"} {
		p := m[h].(map[string]any)
		for _, k := range []string{"p50", "p95", "p99", "max"} {
			if _, ok := p[k]; !ok {
				t.Errorf("%s lacks %q", h, k)
			}
		}
	}
	v := m["violations"].(map[string]any)
	if _, ok := v["count"]; !ok {
		t.Errorf("violations lacks count")
	}
}

func TestReportTable(t *testing.T) {
	r := Report{Seed: 7, TraceHash: "00000000deadbeef", LatencyMs: Percentiles{P95: 116.667},
		BatchSizes: []BatchBucket{{1, 10, 5}}, Violations: ViolationSummary{Count: 1, First: []string{"request 3: no reply"}}}
	r.Requests.Offered = 1234
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"seed", "00000000deadbeef", "1234", "116.667", "1-10:5", "request 3: no reply"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if r.OK() || r.Check() == nil {
		t.Error("a report with a violation passed its check")
	}
}

// TestJainAndPercentiles checks the fairness and percentile arithmetic on
// known values.
func TestJainAndPercentiles(t *testing.T) {
	if j := Jain([]float64{1, 1, 1}); j != 1 {
		t.Errorf("jain equal = %v", j)
	}
	if j := Jain([]float64{1, 0, 0, 0}); j != 0.25 {
		t.Errorf("jain one of four = %v", j)
	}
	if j := Jain(nil); j != 1 {
		t.Errorf("jain of nothing = %v", j)
	}
	p := exactPercentiles([]time.Duration{4 * ms1, 1 * ms1, 3 * ms1, 2 * ms1})
	if p.P50 != 2 || p.P95 != 4 || p.Max != 4 {
		t.Errorf("percentiles %+v", p)
	}
}

// TestExactPercentilesSelect checks the selection against a sort, on
// shapes that trouble quickselect: sorted, reversed, constant, few values.
func TestExactPercentilesSelect(t *testing.T) {
	shapes := map[string]func(i int) time.Duration{
		"sorted":   func(i int) time.Duration { return time.Duration(i) },
		"reversed": func(i int) time.Duration { return time.Duration(-i) },
		"constant": func(i int) time.Duration { return 7 },
		"few":      func(i int) time.Duration { return time.Duration(i % 3) },
		"mixed":    func(i int) time.Duration { return time.Duration((i * 7919) % 1009) },
	}
	for name, f := range shapes {
		for _, n := range []int{1, 2, 3, 10, 101, 1000} {
			ds := make([]time.Duration, n)
			for i := range ds {
				ds[i] = f(i) * time.Millisecond
			}
			sorted := slices.Clone(ds)
			slices.Sort(sorted)
			at := func(q float64) float64 {
				i := min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1)
				return float64(sorted[i]/time.Microsecond) / 1e3
			}
			want := Percentiles{P50: at(0.5), P95: at(0.95), P99: at(0.99), Max: at(1)}
			if got := exactPercentiles(ds); got != want {
				t.Errorf("%s, n=%d: %+v, want %+v", name, n, got, want)
			}
		}
	}
}
