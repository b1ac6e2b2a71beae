package charts

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
	"github.com/batchd/batchd/sim/sweep"
)

const ms = time.Millisecond

// TestCollectorSeries: the series are computed from the messages seen:
// latency = reply delivery - arrival for completed requests only, per
// tenant and per arrival bin, nearest-rank quantiles, exact batch sizes.
func TestCollectorSeries(t *testing.T) {
	c := NewCollector(time.Second, 4)
	var none actors.Address
	submit := func(id uint64, tenant string, at time.Duration) {
		c.Deliver(at, none, none, actors.Submit{Req: actors.Request{ID: id, Tenant: tenant, Arrival: at}})
	}
	reply := func(id uint64, o actors.Outcome, arrival, at time.Duration) {
		c.Deliver(at, none, none, actors.Reply{ID: id, Outcome: o, Arrival: arrival})
	}
	// Tenant a: latencies 10, 20, 30, 40 ms, arriving in bin 0 and 1.
	for i, d := range []time.Duration{10 * ms, 20 * ms, 30 * ms, 40 * ms} {
		arr := time.Duration(i) * 500 * ms
		submit(uint64(i+1), "a", arr)
		reply(uint64(i+1), actors.Completed, arr, arr+d)
	}
	// Tenant b: one completed at 100 ms in bin 2, one rejected (not drawn),
	// one duplicate reply (ignored).
	submit(10, "b", 2*time.Second)
	submit(11, "b", 2*time.Second)
	reply(10, actors.Completed, 2*time.Second, 2100*ms)
	reply(11, actors.Rejected, 2*time.Second, 2*time.Second)
	reply(10, actors.Completed, 2*time.Second, 2200*ms)
	for _, n := range []int{1, 4, 4, 2} {
		c.Deliver(0, none, none, actors.RunBatch{Batch: actors.Batch{Items: make([]actors.Item, n)}})
	}

	s := c.Series(sim.Report{Autoscale: []sim.AutoscaleSample{{T: 1, QueueDepth: 7}, {T: 2, QueueDepth: 3}}})
	if len(s.CDFs) != 2 || s.CDFs[0].Tenant != "a" || s.CDFs[1].Tenant != "b" {
		t.Fatalf("CDFs %+v", s.CDFs)
	}
	wantA := []Point{{10, 0.25}, {20, 0.5}, {30, 0.75}, {40, 1}}
	if got := s.CDFs[0]; got.Completed != 4 || !samePoints(got.Points, wantA) {
		t.Errorf("tenant a CDF %+v, want %v", got, wantA)
	}
	if got := s.CDFs[1]; got.Completed != 1 || !samePoints(got.Points, []Point{{100, 1}}) {
		t.Errorf("tenant b CDF %+v", got)
	}
	// Bin 0: arrivals at 0 and 0.5 s (10, 20 ms); bin 1: 30, 40; bin 2: 100.
	want := []TimeBin{
		{FromS: 0, Completed: 2, P50Ms: 10, P95Ms: 20, P99Ms: 20},
		{FromS: 1, Completed: 2, P50Ms: 30, P95Ms: 40, P99Ms: 40},
		{FromS: 2, Completed: 1, P50Ms: 100, P95Ms: 100, P99Ms: 100},
	}
	if len(s.Bins) != 3 || s.BinS != 1 {
		t.Fatalf("bins %+v of %v s", s.Bins, s.BinS)
	}
	for i := range want {
		if s.Bins[i] != want[i] {
			t.Errorf("bin %d: %+v, want %+v", i, s.Bins[i], want[i])
		}
	}
	if got := s.BatchSizes; len(got) != 5 || got[1] != 1 || got[2] != 1 || got[3] != 0 || got[4] != 2 {
		t.Errorf("batch sizes %v, want [_ 1 1 0 2]", got)
	}
	if !samePoints(s.Queue, []Point{{1, 7}, {2, 3}}) {
		t.Errorf("queue %v", s.Queue)
	}
}

func samePoints(a, b []Point) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i].X-b[i].X) > 1e-6 || a[i].Y != b[i].Y {
			return false
		}
	}
	return true
}

// TestSamplerBound: past samplesMax the sampler keeps a systematic sample
// (every 2nd, then every 4th value) within the bound.
func TestSamplerBound(t *testing.T) {
	var s sampler
	n := 3*samplesMax + 5
	for i := range n {
		s.add(float64(i))
	}
	if s.seen != n || len(s.vals) > samplesMax || s.stride != 4 {
		t.Fatalf("seen %d, kept %d, stride %d", s.seen, len(s.vals), s.stride)
	}
	for i, v := range s.vals {
		if int(v) != 4*i {
			t.Fatalf("value %d is %v, want %d: not every 4th", i, v, 4*i)
		}
	}
	if want := (n + 3) / 4; len(s.vals) != want {
		t.Errorf("kept %d, want %d", len(s.vals), want)
	}
}

// smallRun is a 5 s run of two tenants at 300 req/s on 2 devices.
func smallRun(observers ...sim.Observer) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Rate = 300
	cfg.Devices = 2
	cfg.Duration = 5 * time.Second
	cfg.Traffic.Tenants = []string{"a", "b"}
	cfg.Observers = observers
	return cfg
}

// TestCollectorMatchesReport: on a real run the collector's series agree
// with the ledger's report (completed counts, per-tenant p50/p99, the
// number of batches), and observing does not change the run.
func TestCollectorMatchesReport(t *testing.T) {
	plain, err := sim.Run(smallRun())
	if err != nil {
		t.Fatal(err)
	}
	c := NewCollector(BinFor(5*time.Second), 100)
	rep, err := sim.Run(smallRun(c))
	if err != nil {
		t.Fatal(err)
	}
	if rep.TraceHash != plain.TraceHash {
		t.Errorf("trace hash %s with the collector, %s without", rep.TraceHash, plain.TraceHash)
	}
	s := c.Series(rep)
	var completed, binned int
	for _, cdf := range s.CDFs {
		completed += cdf.Completed
		xs := make([]float64, len(cdf.Points))
		for i, p := range cdf.Points {
			xs[i] = p.X
		}
		ns := rep.Tenants[cdf.Tenant]
		// Fewer than cdfPoints requests: every one is a point.
		if cdf.Completed > cdfPoints {
			t.Fatalf("tenant %s: %d completed; the test wants fewer than %d", cdf.Tenant, cdf.Completed, cdfPoints)
		}
		for _, q := range []struct {
			q    float64
			want float64
		}{{0.5, ns.LatencyMs.P50}, {0.99, ns.LatencyMs.P99}} {
			if got := quantile(xs, q.q); math.Abs(got-q.want) > 0.002 {
				t.Errorf("tenant %s q%v: %v ms drawn, %v ms in the report", cdf.Tenant, q.q, got, q.want)
			}
		}
		if int64(cdf.Completed) != ns.Completed {
			t.Errorf("tenant %s: %d drawn, %d completed", cdf.Tenant, cdf.Completed, ns.Completed)
		}
	}
	for _, b := range s.Bins {
		binned += b.Completed
	}
	if int64(completed) != rep.Requests.Completed || int64(binned) != rep.Requests.Completed {
		t.Errorf("CDFs hold %d, bins %d, report %d completed", completed, binned, rep.Requests.Completed)
	}
	var batches, items int64
	for n, k := range s.BatchSizes {
		batches += k
		items += int64(n) * k
	}
	if batches != rep.Batches || math.Abs(float64(items)/float64(batches)-rep.BatchSizeMean) > 0.001 {
		t.Errorf("%d batches of mean %v drawn; report %d of %v", batches, float64(items)/float64(batches), rep.Batches, rep.BatchSizeMean)
	}
	if len(s.Queue) != len(rep.Autoscale) || len(s.Queue) < 5 {
		t.Errorf("%d queue points for %d samples", len(s.Queue), len(rep.Autoscale))
	}
}

// TestWriteRun: every chart is written as a non-empty PNG and SVG with the
// formats' signatures; a series with nothing to draw writes nothing.
func TestWriteRun(t *testing.T) {
	c := NewCollector(BinFor(5*time.Second), 100)
	rep, err := sim.Run(smallRun(c))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "plots")
	paths, err := WriteRun(dir, c.Series(rep))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 8 {
		t.Fatalf("wrote %v, want 4 charts x 2 formats", paths)
	}
	for _, p := range paths {
		checkImage(t, p)
	}
	empty, err := WriteRun(filepath.Join(t.TempDir(), "empty"), Series{})
	if err != nil || len(empty) != 0 {
		t.Errorf("empty series: wrote %v, %v", empty, err)
	}
}

// checkImage asserts that path is a non-empty PNG or SVG by its signature.
func checkImage(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch filepath.Ext(path) {
	case ".png":
		if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) || len(data) < 1000 {
			t.Errorf("%s: not a PNG (%d bytes)", path, len(data))
		}
	case ".svg":
		if !strings.Contains(string(data[:min(len(data), 512)]), "<svg") || !strings.HasSuffix(strings.TrimSpace(string(data)), "</svg>") {
			t.Errorf("%s: not an SVG (%d bytes)", path, len(data))
		}
	default:
		t.Errorf("%s: unexpected format", path)
	}
}

// TestWriteSweep: a sweep's two charts are written in both formats.
func TestWriteSweep(t *testing.T) {
	base := sim.DefaultConfig()
	base.Devices, base.Duration = 2, time.Second
	rs, err := sweep.Run(context.Background(), base, sweep.Spec{Param: sweep.Rate, From: 100, To: 2100, Step: 1000}, sweep.Options{})
	if err != nil {
		t.Fatal(err)
	}
	paths, err := WriteSweep(t.TempDir(), rs)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 4 {
		t.Fatalf("wrote %v, want 2 charts x 2 formats", paths)
	}
	for _, p := range paths {
		checkImage(t, p)
	}
}
