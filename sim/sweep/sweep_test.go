package sweep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/sim"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []float64
	}{
		{"rate=100:500:100", []float64{100, 200, 300, 400, 500}},
		{"rate=100:450:100", []float64{100, 200, 300, 400}},
		{"devices=1:3:1", []float64{1, 2, 3}},
		{"batch-max=10:10:5", []float64{10}},
		{"linger=0ms:10ms:2500us", []float64{0, 2.5, 5, 7.5, 10}},
		{"rate=0.1:0.3:0.1", []float64{0.1, 0.2, 0.30000000000000004}},
	} {
		sp, err := ParseSpec(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got := sp.Values(); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: values %v, want %v", c.in, got, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"rate", "want PARAM=FROM:TO:STEP"},
		{"speed=1:2:1", `unknown setting "speed"`},
		{"rate=1:2", "want FROM:TO:STEP"},
		{"rate=1:2:0", "STEP must be positive"},
		{"rate=5:2:1", "TO is below FROM"},
		{"rate=1:x:1", `"x": want a finite number`},
		{"rate=-1:2:1", "want a finite number >= 0"},
		{"devices=1.5:3:1", "want a whole number"},
		{"devices=0:3:1", "devices starts at 1"},
		{"linger=1:2:1", "want a duration"},
		{"linger=-1ms:2ms:1ms", "must not be negative"},
		{"rate=1:1000:1", "1000 points, at most 200"},
	} {
		_, err := ParseSpec(c.in)
		if err == nil || !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.in, err, c.want)
		}
	}
}

// base is a 2 s run on 2 devices at a fixed 100 ms per batch of up to 100:
// capacity 2000 req/s, latency floor 100 ms, derived linger
// min(SLO 200 - 100 - margin 5, 100/2) = 50 ms.
func base() sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Devices = 2
	cfg.Duration = 2 * time.Second
	return cfg
}

// TestRunCurves: the results come in point-then-policy order, identical
// whatever the parallelism, and follow the physics: at 5 req/s every
// request finds a free device, so eager answers in exactly the floor and
// derived in the floor plus its linger; above capacity the throughput
// stays under the bound and the excess is rejected.
func TestRunCurves(t *testing.T) {
	spec := Spec{Param: Rate, From: 5, To: 4005, Step: 4000}
	one, err := Run(context.Background(), base(), spec, Options{Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	four, err := Run(context.Background(), base(), spec, Options{Parallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(one) != fmt.Sprint(four) {
		t.Fatalf("parallelism changed the results:\n%v\n%v", one, four)
	}
	if len(one) != 4 {
		t.Fatalf("%d results, want 2 points x 2 policies", len(one))
	}
	for i, want := range []struct {
		value  float64
		policy string
	}{{5, "derived"}, {5, "eager"}, {4005, "derived"}, {4005, "eager"}} {
		if r := one[i]; r.Value != want.value || r.Policy != want.policy || r.Param != Rate || r.OfferedRPS != want.value {
			t.Errorf("result %d: %s=%v policy %s offered %v; want %v, %s", i, r.Param, r.Value, r.Policy, r.OfferedRPS, want.value, want.policy)
		}
	}
	for _, r := range one {
		if r.CapacityRPS != 2000 || r.FloorMs != 100 {
			t.Errorf("%s at %v: bound %v req/s, %v ms; want 2000 and 100", r.Policy, r.Value, r.CapacityRPS, r.FloorMs)
		}
		if r.ThroughputRPS > r.CapacityRPS || r.P50Ms < r.FloorMs || r.Violations != 0 {
			t.Errorf("%s at %v beats the physical bound or broke an invariant: %+v", r.Policy, r.Value, r)
		}
	}
	lowDerived, lowEager, hiDerived, hiEager := one[0], one[1], one[2], one[3]
	if lowEager.P50Ms != 100 || lowEager.P99Ms != 100 || lowEager.BatchSizeMean != 1 {
		t.Errorf("eager at 5 req/s: %+v, want every request in 100 ms, alone", lowEager)
	}
	if lowDerived.P50Ms != 150 {
		t.Errorf("derived at 5 req/s: p50 %v, want 150 (floor + 50 ms linger)", lowDerived.P50Ms)
	}
	for _, r := range []Result{hiDerived, hiEager} {
		if r.Rejected == 0 || r.ThroughputRPS < 1500 {
			t.Errorf("%s at 4005 req/s (twice capacity): %+v; want rejections and most of capacity", r.Policy, r)
		}
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, one); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 5 || !strings.Contains(lines[0], "capacity/s") || !strings.Contains(lines[2], "eager") {
		t.Errorf("table:\n%s", buf.String())
	}
}

// TestConfigure: each setting lands where the batcher reads it; a rate
// scales several sources in proportion; a replay's rate is refused.
func TestConfigure(t *testing.T) {
	b := base()
	b.Sources = []sim.TrafficConfig{sim.DefaultTrafficConfig(), sim.DefaultTrafficConfig()}
	b.Sources[0].Rate, b.Sources[1].Rate = 300, 100
	cfg, err := Configure(b, Rate, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sources[0].Rate != 1500 || cfg.Sources[1].Rate != 500 || b.Sources[0].Rate != 300 {
		t.Errorf("sources %v, %v (base now %v)", cfg.Sources[0].Rate, cfg.Sources[1].Rate, b.Sources[0].Rate)
	}
	if cfg, _ := Configure(base(), Devices, 7); cfg.Devices != 7 {
		t.Errorf("devices %d", cfg.Devices)
	}
	if cfg, _ := Configure(base(), BatchMax, 32); cfg.Batcher.BatchMax != 32 {
		t.Errorf("batch max %d", cfg.Batcher.BatchMax)
	}
	if cfg, _ := Configure(base(), Linger, 2.5); cfg.Batcher.LingerMax != 2500*time.Microsecond {
		t.Errorf("linger %v", cfg.Batcher.LingerMax)
	}
	if cfg, _ := Configure(base(), Linger, 0); cfg.Batcher.LingerMax != time.Nanosecond {
		t.Errorf("linger 0 became %v, want 1 ns (no linger, not the derived one)", cfg.Batcher.LingerMax)
	}
	r := base()
	r.Replay = []sim.ReplayRequest{{Model: "m", InputLen: 1}}
	if _, err := Configure(r, Rate, 10); !errors.Is(err, ErrSpec) {
		t.Errorf("rate sweep of a replay: %v, want ErrSpec", err)
	}
}

// TestRunLingerAndErrors: a linger sweep draws one curve whose latency at
// low load follows the linger; an invalid point fails the sweep before
// any run; a cancelled context stops it.
func TestRunLingerAndErrors(t *testing.T) {
	b := base()
	b.Rate = 5
	rs, err := Run(context.Background(), b, Spec{Param: Linger, From: 0, To: 20, Step: 10}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("%d results, want 3", len(rs))
	}
	for i, want := range []float64{100, 110, 120} {
		if rs[i].Policy != "linger" || rs[i].P50Ms != want {
			t.Errorf("linger %v ms: policy %s, p50 %v; want %v", rs[i].Value, rs[i].Policy, rs[i].P50Ms, want)
		}
	}
	if _, err := Run(context.Background(), b, Spec{Param: Devices, From: 1, To: 5000, Step: 4999}, Options{}); err == nil || !strings.Contains(err.Error(), "devices=5000") {
		t.Errorf("5000 devices: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, b, Spec{Param: Rate, From: 1, To: 3, Step: 1}, Options{Parallel: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled sweep: %v", err)
	}
}
