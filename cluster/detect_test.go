package cluster

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors/member"
)

var (
	detectTrials = flag.Int("detect.trials", 20, "BenchmarkFailureDetection: crashes measured (run side by side, one cluster each)")
	detectNodes  = flag.Int("detect.nodes", 3, "BenchmarkFailureDetection: nodes per cluster")
	// The failure detector's settings; zero: DefaultConfig's (the LAN's).
	detectProbe   = flag.Duration("detect.probe", 0, "BenchmarkFailureDetection: probe interval (0: DefaultConfig's)")
	detectTimeout = flag.Duration("detect.timeout", 0, "BenchmarkFailureDetection: probe timeout (0: DefaultConfig's)")
	detectMult    = flag.Int("detect.mult", 0, "BenchmarkFailureDetection: suspicion multiplier (0: DefaultConfig's)")
)

// BenchmarkFailureDetection measures memberlist's failure detection with
// DefaultConfig's LAN settings (1 s probes, 500 ms probe timeout,
// suspicion multiplier 4), or those -detect.probe, -detect.timeout and
// -detect.mult give, on loopback: detect.trials clusters of
// detect.nodes nodes each, side by side; in each, once every node holds
// every other alive, one node stops without a word, and the time from
// the stop (at a random point of the survivors' probe rounds, up to 2 s
// after the cluster formed) to each survivor's Dead is taken. Reported: p50 and p99 over
// trials of the first survivor's and of the last survivor's detection.
// Run it once (-benchtime 1x): a trial takes seconds of real time.
func BenchmarkFailureDetection(b *testing.B) {
	for range b.N {
		first, last := make([]time.Duration, *detectTrials), make([]time.Duration, *detectTrials)
		var wg sync.WaitGroup
		for i := range *detectTrials {
			wg.Add(1)
			go func() {
				defer wg.Done()
				first[i], last[i] = detectOnce(b, i, *detectNodes)
			}()
		}
		wg.Wait()
		slices.Sort(first)
		slices.Sort(last)
		q := func(d []time.Duration, p int) float64 { return d[min(len(d)-1, len(d)*p/100)].Seconds() * 1000 }
		b.ReportMetric(q(first, 50), "first-p50-ms")
		b.ReportMetric(q(first, 99), "first-p99-ms")
		b.ReportMetric(q(last, 50), "all-p50-ms")
		b.ReportMetric(q(last, 99), "all-p99-ms")
		b.Logf("%d trials of %d nodes; all survivors hold the node dead after (ms): %v", *detectTrials, *detectNodes, last)
	}
}

// detectOnce runs one trial and returns when the first and the last
// survivor saw the stopped node dead.
func detectOnce(b *testing.B, trial, n int) (first, last time.Duration) {
	var mu sync.Mutex
	var stopped time.Time
	var seen []time.Duration
	alive := map[string]int{}
	victim := fmt.Sprintf("t%d-n%d", trial, n-1)
	ms := make([]*Membership, n)
	for i := range n {
		cfg := DefaultConfig(fmt.Sprintf("t%d-n%d", trial, i))
		cfg.BindAddr, cfg.BindPort, cfg.SecretKey, cfg.Incarnation = "127.0.0.1", 0, key, 1
		if *detectProbe > 0 {
			cfg.ProbeInterval = *detectProbe
		}
		if *detectTimeout > 0 {
			cfg.ProbeTimeout = *detectTimeout
		}
		if *detectMult > 0 {
			cfg.SuspicionMult = *detectMult
		}
		if i > 0 {
			cfg.Join = []string{ms[0].Addr()}
		}
		self := cfg.Name
		m, err := Start(cfg, func(u member.Update) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case u.Kind == member.Alive:
				alive[self]++
			case u.Kind == member.Dead && u.Node == victim && !stopped.IsZero():
				seen = append(seen, time.Since(stopped))
			}
		})
		if err != nil {
			b.Error(err)
			return
		}
		ms[i] = m
	}
	defer func() {
		for _, m := range ms[:n-1] {
			m.Stop()
		}
	}()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		all := len(alive) == n
		for _, c := range alive {
			all = all && c >= n
		}
		mu.Unlock()
		if all {
			break
		}
		if time.Now().After(end) {
			b.Errorf("trial %d: the cluster did not form", trial)
			return
		}
	}
	// The crash falls anywhere in the survivors' probe rounds.
	time.Sleep(rand.N(2 * time.Second))
	mu.Lock()
	stopped = time.Now()
	mu.Unlock()
	ms[n-1].Stop()
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		k := len(seen)
		mu.Unlock()
		if k >= n-1 {
			break
		}
		if time.Now().After(end) {
			b.Errorf("trial %d: %d of %d survivors saw the crash in 60 s", trial, k, n-1)
			return
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Min(seen), slices.Max(seen)
}
