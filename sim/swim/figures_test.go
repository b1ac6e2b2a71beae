package swim

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/batchd/batchd/actors/member"
)

var figures = flag.Bool("swim.figures", false, "print the detection and false-suspicion figures for N=3, 30, 100 at 0, 1, 5% loss")

// crashCycle is the figures' workload: every minute one node crashes (in
// turn), and restarts 40 s later.
func crashCycle(n int, loss float64, d time.Duration, seed uint64) Config {
	cfg := DefaultConfig(nodeNames(n))
	cfg.Seed, cfg.Loss, cfg.Until = seed, loss, d
	for k := 0; time.Duration(k+1)*time.Minute < d; k++ {
		at := time.Duration(k+1)*time.Minute + time.Duration(k*7919%1000)*time.Millisecond
		name := cfg.Nodes[(k*7)%n]
		cfg.Events = append(cfg.Events,
			Event{At: at, Kind: Crash, Node: name},
			Event{At: at + 40*time.Second, Kind: Restart, Node: name})
	}
	return cfg
}

type detection struct {
	first, each []time.Duration // per crash; per crash and observer
}

// detections measures, for every crash, when each other node that was up
// first delivered the crashed node not live, and the first of them.
func detections(cfg Config, r *Result) detection {
	var out detection
	for _, e := range cfg.Events {
		if e.Kind != Crash {
			continue
		}
		seen := map[string]bool{}
		first := time.Duration(-1)
		for _, d := range r.Deliveries {
			if d.At < e.At || d.At > e.At+time.Minute || d.Update.Node != e.Node || d.Update.Kind.Live() || seen[d.Observer] {
				continue
			}
			seen[d.Observer] = true
			out.each = append(out.each, d.At-e.At)
			if first < 0 {
				first = d.At - e.At
			}
		}
		if first >= 0 {
			out.first = append(out.first, first)
		}
	}
	return out
}

func meanP99(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(ds))
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return sum / time.Duration(len(s)), s[min(len(s)-1, int(math.Ceil(0.99*float64(len(s))))-1)]
}

// TestDetectionDelay: with no loss, 30 nodes, the first node detects a
// crash about a suspicion timeout after the first probe that finds it (SWIM:
// the first probe comes within e/(e-1) protocol periods on average), every
// node within a gossip round or two of that, and no suspicion is false.
func TestDetectionDelay(t *testing.T) {
	cfg := crashCycle(30, 0, 20*time.Minute, 1)
	r := mustRun(t, cfg)
	det := detections(cfg, r)
	s := cfg.SuspicionTimeout(30)
	firstMean, _ := meanP99(det.first)
	eachMean, eachP99 := meanP99(det.each)
	if len(det.first) != 19 || len(det.each) != 19*29 {
		t.Fatalf("%d crashes detected (want 19), %d detections (want %d)", len(det.first), len(det.each), 19*29)
	}
	if firstMean < s || firstMean > s+3*cfg.ProbeInterval {
		t.Errorf("mean first detection %v; want within [S, S + 3 probe intervals] = [%v, %v]", firstMean, s, s+3*cfg.ProbeInterval)
	}
	if eachMean < firstMean || eachMean > firstMean+2*cfg.ProbeInterval || eachP99 > cfg.DetectionBound() {
		t.Errorf("every node's detection: mean %v, p99 %v (first: %v, bound %v)", eachMean, eachP99, firstMean, cfg.DetectionBound())
	}
	if r.Stats.FalseSuspicions != 0 || r.Stats.FalseDeaths != 0 {
		t.Errorf("no loss, yet %+v", r.Stats)
	}
}

// TestSWIMFigures prints (with -swim.figures) the detection delay and the
// false suspicions at N = 3, 30, 100 and loss 0, 1, 5%, over an hour of the
// crash cycle (60 crashes) per cell.
func TestSWIMFigures(t *testing.T) {
	if !*figures {
		t.Skip("run with -swim.figures")
	}
	fmt.Println("| N | loss | first detection mean / p99 | every node's detection mean / p99 | false suspicions per probe (analytic) | false suspicions per node-hour | false deaths | refutes |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, n := range []int{3, 30, 100} {
		for _, loss := range []float64{0, 0.01, 0.05} {
			cfg := crashCycle(n, loss, time.Hour, 1)
			r := mustRun(t, cfg)
			det := detections(cfg, r)
			fm, fp := meanP99(det.first)
			em, ep := meanP99(det.each)
			q := 1 - loss
			k := min(cfg.IndirectProbes, n-2)
			analytic := (1 - q*q) * math.Pow(1-q*q*q*q, float64(k))
			fmt.Printf("| %d | %.0f%% | %.2fs / %.2fs | %.2fs / %.2fs | %.2g (%.2g) | %.2f | %d | %d |\n",
				n, loss*100, fm.Seconds(), fp.Seconds(), em.Seconds(), ep.Seconds(),
				float64(r.Stats.FalseSuspicions)/float64(r.Stats.Probes), analytic,
				float64(r.Stats.FalseSuspicions)/float64(n), r.Stats.FalseDeaths, r.Stats.Refutes)
		}
	}
	fmt.Printf("suspicion timeout: N=3 %v, N=30 %v, N=100 %v\n", DefaultConfig(nodeNames(3)).SuspicionTimeout(3),
		DefaultConfig(nodeNames(30)).SuspicionTimeout(30), DefaultConfig(nodeNames(100)).SuspicionTimeout(100))
}

// BenchmarkRun is the model's cost: two simulated minutes of 100 nodes at
// 1% loss with one crash (at 1 m); it reports the deliveries and the wall
// time per simulated second.
func BenchmarkRun(b *testing.B) {
	cfg := crashCycle(100, 0.01, 2*time.Minute, 1)
	b.ReportAllocs()
	var del int
	for i := 0; i < b.N; i++ {
		r, err := Run(cfg)
		if err != nil {
			b.Fatal(err)
		}
		del = len(r.Deliveries)
	}
	b.ReportMetric(float64(del), "deliveries")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/cfg.Until.Seconds(), "ns/simulated-s")
}

// TestDetectionMatchesLive: the model, at memberlist's LAN settings, against
// the live detector measured on loopback (cluster's
// BenchmarkFailureDetection, 100 kills each: kill to Dead at every
// survivor, p50 5.6 s for 3 nodes and 5.8 to 6.0 s for 5, p99 7.2 to 8.2 s
// on an unloaded run), and at serve's defaults (probes every 300 ms,
// suspicion ×3, a state sync every 3 s; 3 nodes, 20 kills: p50 1.39 s,
// p99 2.03 s). One kill a seed, 1,000 seeds; the model's p50 must be
// within half a second of the live one and its p99 within a second at the
// LAN settings, within a fifth and two fifths of a second at serve's.
func TestDetectionMatchesLive(t *testing.T) {
	for _, c := range []struct {
		n             int
		liveP50, live time.Duration // live p50 and p99 of "every survivor holds it dead"
		probe         time.Duration // zero: the LAN settings
		mult          float64
		tol50, tol99  time.Duration
	}{
		{n: 3, liveP50: 5590 * time.Millisecond, live: 7270 * time.Millisecond, tol50: 500 * time.Millisecond, tol99: time.Second},
		{n: 5, liveP50: 5890 * time.Millisecond, live: 8220 * time.Millisecond, tol50: 500 * time.Millisecond, tol99: time.Second},
		{n: 3, liveP50: 1390 * time.Millisecond, live: 2030 * time.Millisecond, probe: 300 * time.Millisecond, mult: 3,
			tol50: 200 * time.Millisecond, tol99: 400 * time.Millisecond},
	} {
		var all []time.Duration
		for seed := range uint64(1000) {
			cfg := DefaultConfig(nodeNames(c.n))
			if c.probe > 0 {
				// serve's (engine/config's cluster defaults; the state
				// sync as cluster.PushPullFor sets it).
				cfg.ProbeInterval, cfg.SuspicionMult, cfg.PushPullInterval = c.probe, c.mult, 10*c.probe
			}
			cfg.Seed = seed
			at := 10*time.Second + time.Duration(seed%997)*2*time.Millisecond
			victim := cfg.Nodes[c.n-1]
			cfg.Until = at + time.Minute
			cfg.Events = []Event{{At: at, Kind: Crash, Node: victim}}
			res, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var last time.Duration
			seen := 0
			for _, d := range res.Deliveries {
				if d.Update.Node == victim && d.Update.Kind == member.Dead && d.Observer != victim {
					last, seen = max(last, d.At-at), seen+1
				}
			}
			if seen != c.n-1 {
				t.Fatalf("n=%d seed %d: %d survivors learned of the death, want %d", c.n, seed, seen, c.n-1)
			}
			all = append(all, last)
		}
		slices.Sort(all)
		p50, p99 := all[len(all)/2], all[len(all)*99/100]
		t.Logf("n=%d, probe %v: model p50 %v p99 %v; live p50 %v p99 %v", c.n, cmp.Or(c.probe, time.Second), p50, p99, c.liveP50, c.live)
		if d := p50 - c.liveP50; d < -c.tol50 || d > c.tol50 {
			t.Errorf("n=%d: the model's p50 %v is more than %v from the live %v", c.n, p50, c.tol50, c.liveP50)
		}
		if d := p99 - c.live; d < -c.tol99 || d > c.tol99 {
			t.Errorf("n=%d: the model's p99 %v is more than %v from the live %v", c.n, p99, c.tol99, c.live)
		}
	}
}
