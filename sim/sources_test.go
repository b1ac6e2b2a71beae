package sim

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// TestSourcesReproduceTraffic: a run whose only source is its Traffic (at
// Rate) is the same run, trace hash and all, as the run with Traffic: the
// one source takes Traffic's address, stream and IDs.
func TestSourcesReproduceTraffic(t *testing.T) {
	cfg := shortReference(4)
	a := mustRun(t, cfg)
	src := cfg.Traffic
	src.Rate = cfg.Rate
	cfg.Sources = []TrafficConfig{src}
	b := mustRun(t, cfg)
	a.WallSeconds, b.WallSeconds = 0, 0
	if a.TraceHash != b.TraceHash || !reflect.DeepEqual(a, b) {
		t.Fatalf("one source: hash %s, reports differ from Traffic's (hash %s)", b.TraceHash, a.TraceHash)
	}
}

// idRecorder notes which source (by sender address) sent each request ID.
type idRecorder struct{ from map[uint64]actors.Address }

func (r *idRecorder) Deliver(_ time.Duration, from, _ actors.Address, msg actors.Message) {
	if m, ok := msg.(actors.Submit); ok {
		r.from[m.Req.ID] = from
	}
}

// TestSourcesInterleaveIDs: three sources at different rates, starts and
// stops send IDs k+1, k+1+3, ... each (unique and dense), their own
// tenants, priorities and parameters, and the run keeps every invariant.
func TestSourcesInterleaveIDs(t *testing.T) {
	cfg := shortReference(5)
	for k, tenant := range []string{"a", "b", "c"} {
		s := DefaultTrafficConfig()
		s.Rate = float64(200 * (k + 1))
		s.Tenants = []string{tenant}
		s.Start = time.Duration(k) * time.Second
		s.Priority = int8(k - 1)
		s.Params = tenant
		cfg.Sources = append(cfg.Sources, s)
	}
	cfg.Sources[2].Stop = 4 * time.Second
	rec := &idRecorder{from: map[uint64]actors.Address{}}
	cfg.Observers = []Observer{rec}
	rep := mustRun(t, cfg)
	if err := rep.Check(); err != nil {
		t.Fatalf("%v: %q", err, rep.Violations.First)
	}
	if rep.Workload.RateRPS != 1200 {
		t.Errorf("workload rate %v, want the sum of the sources' 1200", rep.Workload.RateRPS)
	}
	maxID, counts := uint64(0), map[actors.Address]int64{}
	for id, from := range rec.from {
		k := int((id - 1) % 3)
		if from != SourceAddr(k) {
			t.Fatalf("request %d came from %v, want source %d at %v", id, from, k, SourceAddr(k))
		}
		counts[from]++
		maxID = max(maxID, id)
	}
	if int64(len(rec.from)) != rep.Requests.Offered {
		t.Errorf("%d distinct IDs for %d requests offered", len(rec.from), rep.Requests.Offered)
	}
	most := int64(0)
	for _, n := range counts {
		most = max(most, n)
	}
	if maxID > uint64(3*most) {
		t.Errorf("highest ID %d for at most %d requests per source: not dense", maxID, most)
	}
	for _, tenant := range []string{"a", "b", "c"} {
		if rep.Tenants[tenant].Completed == 0 {
			t.Errorf("tenant %s: nothing completed: %+v", tenant, rep.Tenants)
		}
	}
	if got := rep.Tenants["c"].Offered; got < 1050 || got > 1350 { // 600/s for 2 s: 1200 ± 4.3 sd
		t.Errorf("tenant c (600 req/s from 2 s to 4 s) offered %d", got)
	}
}

// TestSignalSamplingDoesNotPerturb: the autoscale sampler only reads the
// batcher, so a run with it is the run without it, sample for sample
// aside.
func TestSignalSamplingDoesNotPerturb(t *testing.T) {
	cfg := BurstConfig(actors.PolicyFair, true)
	cfg.Duration = 3 * time.Second
	cfg.Sources[2].Start, cfg.Sources[2].Stop = time.Second, 2*time.Second
	cfg.Windows = nil
	a := mustRun(t, cfg)
	cfg.SignalsEvery = -1
	b := mustRun(t, cfg)
	if len(a.Autoscale) != 3 || len(b.Autoscale) != 0 {
		t.Fatalf("%d samples on, %d off; want 3 and 0", len(a.Autoscale), len(b.Autoscale))
	}
	a.WallSeconds, b.WallSeconds, a.Autoscale = 0, 0, nil
	if a.TraceHash != b.TraceHash || !reflect.DeepEqual(a, b) {
		t.Fatalf("sampling changed the run: hash %s vs %s", a.TraceHash, b.TraceHash)
	}
}

// TestReportBreakdown: the per-tenant and per-model figures add up to the
// run's, the rejections by reason to its rejections, the windows to the
// whole, and the JSON and the table carry them.
func TestReportBreakdown(t *testing.T) {
	cfg := BurstConfig(actors.PolicyFair, true)
	cfg.Duration = 3 * time.Second
	cfg.Sources[2].Start, cfg.Sources[2].Stop = time.Second, 2*time.Second
	cfg.Windows = []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}
	rep := mustRun(t, cfg)
	var off, done, rej int64
	for _, s := range rep.Tenants {
		off, done, rej = off+s.Offered, done+s.Completed, rej+s.Rejected
	}
	q := rep.Requests
	if off != q.Offered || done != q.Completed || rej != q.Rejected {
		t.Errorf("tenants add up to %d offered, %d completed, %d rejected; run %+v", off, done, rej, q)
	}
	if m := rep.Models["m"]; m.Offered != q.Offered || m.Completed != q.Completed {
		t.Errorf("model m %+v; run %+v", m, q)
	}
	var byReason int64
	for _, n := range rep.Rejections {
		byReason += n
	}
	if byReason != q.Rejected || rep.Rejections["rate_limited"] == 0 {
		t.Errorf("rejections %v add up to %d, run rejected %d", rep.Rejections, byReason, q.Rejected)
	}
	var winOff int64
	for _, w := range rep.Windows {
		var tenants, models, completed int64
		for _, s := range w.Tenants {
			tenants += s.Offered
			completed += s.Completed
		}
		for _, s := range w.Models {
			models += s.Offered
		}
		if w.All.Offered != tenants || w.All.Offered != models || w.All.Completed != completed {
			t.Errorf("window %v-%v: all %+v; tenants offer %d (completed %d), models %d", w.FromS, w.ToS, w.All, tenants, completed, models)
		}
		if completed > 0 && w.All.LatencyMs.P95 <= 0 {
			t.Errorf("window %v-%v: %d completed, p95 %v", w.FromS, w.ToS, completed, w.All.LatencyMs.P95)
		}
		winOff += tenants
	}
	if len(rep.Windows) != 3 || winOff != q.Offered {
		t.Errorf("%d windows offering %d in all; run offered %d", len(rep.Windows), winOff, q.Offered)
	}
	if _, ok := rep.Windows[0].Tenants["burst"]; ok {
		t.Errorf("the burst tenant offered in the first window: %+v", rep.Windows[0].Tenants)
	}
	if f := rep.Fairness; f.Tenants != 3 || !(f.JainThroughput > 0 && f.JainThroughput <= 1) {
		t.Errorf("fairness %+v", f)
	}
	if s := rep.Tenants["steady-a"]; s.LatencyMs.P95 <= 0 || s.SLOAttainment != 1 || s.ThroughputRPS < 300 {
		t.Errorf("steady-a %+v", s)
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tenants", "models", "fairness", "rejections", "autoscale", "windows"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report JSON lacks %q", k)
		}
	}
	tenant := m["tenants"].(map[string]any)["burst"].(map[string]any)
	for _, k := range []string{"offered", "completed", "rejected", "rejected_by", "expired", "latency_ms", "slo_attainment", "throughput_rps"} {
		if _, ok := tenant[k]; !ok {
			t.Errorf("tenant JSON lacks %q", k)
		}
	}
	auto := m["autoscale"].([]any)[0].(map[string]any)
	for _, k := range []string{"t", "devices_needed", "queue_depth", "busy_fraction_mean"} {
		if _, ok := auto[k]; !ok {
			t.Errorf("autoscale JSON lacks %q", k)
		}
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tenant", "steady-a", "burst", "rate_limited:", "fairness", "autoscale", "1-2 s"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestShares checks the max-min share arithmetic on known values.
func TestShares(t *testing.T) {
	got := maxMinShares(100, []float64{1, 1, 2}, []float64{10, 100, 100})
	if want := []float64{10, 30, 60}; !reflect.DeepEqual(got, want) {
		t.Errorf("max-min shares %v, want %v", got, want)
	}
}

func TestSourcesConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"stop past duration": func(c *Config) { c.Sources[0].Stop = c.Duration + 1 },
		"bad priority":       func(c *Config) { c.Sources[0].Priority = 5 },
		"empty mix":          func(c *Config) { c.Sources[0].Mix = nil },
		"too many requests":  func(c *Config) { c.Sources[0].Rate = 1e9 },
		"device models":      func(c *Config) { c.DeviceModels = make([][]string, c.Devices+1) },
		"empty model name":   func(c *Config) { c.DeviceModels = [][]string{{""}} },
		"windows decrease":   func(c *Config) { c.Windows = []time.Duration{time.Second, 0} },
		"too many sources":   func(c *Config) { c.Sources = make([]TrafficConfig, SourcesLimit+1) },
	} {
		cfg := shortReference(1)
		cfg.Sources = []TrafficConfig{DefaultTrafficConfig()}
		mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "sim config: ") {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
	cfg := shortReference(1)
	cfg.Sources = []TrafficConfig{DefaultTrafficConfig()}
	if err := cfg.Validate(); err != nil {
		t.Errorf("one default source: %v", err)
	}
}
