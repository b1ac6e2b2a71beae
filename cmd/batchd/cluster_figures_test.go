package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// The cluster's figures on real processes (RESULTS.md), not run by make
// test: BATCHD_CLUSTER_FIGURES=kill or soak runs them, with the settings
// below from the environment.
//
//	BATCHD_CLUSTER_FIGURES=kill BATCHD_CLUSTER_RATE=360 go test -run TestClusterFigures -v -timeout 5m ./cmd/batchd/
//	BATCHD_CLUSTER_FIGURES=soak BATCHD_CLUSTER_SOAK=10m BATCHD_CLUSTER_RATE=3000 BATCHD_CLUSTER_BATCH_MAX=100 go test -run TestClusterFigures -v -timeout 20m ./cmd/batchd/

// figureEnv reads a setting of the figures, def when unset.
func figureEnv[T any](t *testing.T, name string, def T, parse func(string) (T, error)) T {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		t.Fatalf("$%s=%q: %v", name, v, err)
	}
	return x
}

// sent is one request of the figures' open-loop load.
type sent struct {
	front   string
	at      time.Duration // since the load's start, when it was due
	latency time.Duration
	status  int // 0: no answer
	ok      bool
}

// openLoad sends Poisson arrivals at rate a second to one front until
// stop, each request on a goroutine of its own (at most inFlightMax).
type openLoad struct {
	start  time.Time
	client *http.Client
	mu     sync.Mutex
	all    []sent
	stop   chan struct{}
	wg     sync.WaitGroup
	flight atomic.Int64
	seq    atomic.Int64
}

const openInFlightMax = 4000

func newOpenLoad(timeout time.Duration) *openLoad {
	tr := &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}
	return &openLoad{start: time.Now(), stop: make(chan struct{}), client: &http.Client{Timeout: timeout, Transport: tr}}
}

// front runs one front's arrivals; alive, when it turns false, stops
// them (its front died) and drops what it sent since.
func (l *openLoad) front(name, base string, rate float64, seed uint64, alive *atomic.Bool) {
	l.wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, seed))
		due := time.Now()
		for {
			due = due.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-l.stop:
					return
				case <-time.After(d):
				}
			}
			select {
			case <-l.stop:
				return
			default:
			}
			if alive != nil && !alive.Load() {
				return
			}
			if l.flight.Load() >= openInFlightMax {
				l.record(sent{front: name, at: due.Sub(l.start)}) // counted as lost
				continue
			}
			l.flight.Add(1)
			at := due
			l.wg.Go(func() {
				defer l.flight.Add(-1)
				in := fmt.Sprintf("%s-%d", name, l.seq.Add(1))
				r := l.one(base, in)
				r.front, r.at, r.latency = name, at.Sub(l.start), time.Since(at)
				if alive != nil && !alive.Load() {
					return
				}
				l.record(r)
			})
		}
	})
}

func (l *openLoad) one(base, in string) sent {
	resp, err := l.client.Post(base+"/v1/models/echo/infer", "application/json", strings.NewReader(fmt.Sprintf(`{"input": %q}`, in)))
	if err != nil {
		return sent{}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	r := sent{status: resp.StatusCode}
	if resp.StatusCode == http.StatusOK {
		var out struct{ Output, Version string }
		_ = json.Unmarshal(body, &out)
		r.ok = out.Output == actors.EmulatedOutput("echo", out.Version, in)
	}
	return r
}

func (l *openLoad) record(r sent) {
	l.mu.Lock()
	l.all = append(l.all, r)
	l.mu.Unlock()
}

func (l *openLoad) end() []sent {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.SortFunc(l.all, func(a, b sent) int { return int(a.at - b.at) })
	return l.all
}

// p99 is the 99th percentile latency of rs (no answer: infinite).
func p99(rs []sent) time.Duration {
	if len(rs) == 0 {
		return 0
	}
	lat := make([]time.Duration, len(rs))
	for i, r := range rs {
		lat[i] = r.latency
		if r.status == 0 {
			lat[i] = time.Hour
		}
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, len(lat)*99/100)]
}

// TestClusterFigures: the kill and soak figures (see the top of the file).
func TestClusterFigures(t *testing.T) {
	mode := os.Getenv("BATCHD_CLUSTER_FIGURES")
	if mode == "" {
		t.Skip("set BATCHD_CLUSTER_FIGURES=kill or soak to measure the cluster's figures on real processes")
	}
	dur := func(s string) (time.Duration, error) { return time.ParseDuration(s) }
	ps := procSettings{
		devices:   figureEnv(t, "BATCHD_CLUSTER_DEVICES", 1, strconv.Atoi),
		latency:   figureEnv(t, "BATCHD_CLUSTER_LATENCY", 100*time.Millisecond, dur),
		batchMax:  figureEnv(t, "BATCHD_CLUSTER_BATCH_MAX", 20, strconv.Atoi),
		slo:       figureEnv(t, "BATCHD_CLUSTER_SLO", 200*time.Millisecond, dur),
		probe:     figureEnv(t, "BATCHD_CLUSTER_PROBE", 250*time.Millisecond, dur),
		timeout:   figureEnv(t, "BATCHD_CLUSTER_PROBE_TIMEOUT", 125*time.Millisecond, dur),
		suspicion: figureEnv(t, "BATCHD_CLUSTER_SUSPICION_MULT", 3, strconv.Atoi),
	}
	// Capacity: every node's devices serve the owner, batches full.
	capacity := float64(3*ps.devices*ps.batchMax) / ps.latency.Seconds()
	rate := figureEnv(t, "BATCHD_CLUSTER_RATE", 0.6*capacity, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
	t.Logf("settings %+v; device capacity %.0f req/s, offered %.0f req/s (%.0f%%)", ps, capacity, rate, 100*rate/capacity)
	dir := t.TempDir()
	nodes := startProcCluster(t, dir, 3, ps)
	switch mode {
	case "kill":
		clusterKillFigure(t, nodes, ps, rate)
	case "soak":
		clusterSoakFigure(t, nodes, rate, figureEnv(t, "BATCHD_CLUSTER_SOAK", 5*time.Minute, dur))
	default:
		t.Fatalf("BATCHD_CLUSTER_FIGURES=%q: want kill or soak", mode)
	}
}

// clusterKillFigure: load at rate through the three fronts; the owner of
// echo killed (SIGKILL) after 6 s; detection at each survivor (its
// /v1/cluster shows the node dead), what the surviving fronts' requests
// got, and the p99 by 250 ms of send time around the kill.
func clusterKillFigure(t *testing.T, nodes []*procNode, ps procSettings, rate float64) {
	victimName := owner(t, nodes[0])
	load := newOpenLoad(ps.slo + procReplyGrace + procSlack)
	var victimAlive atomic.Bool
	victimAlive.Store(true)
	var survivors []*procNode
	var victim *procNode
	for i, nd := range nodes {
		if nd.name == victimName {
			victim = nd
			load.front(nd.name, nd.s.base, rate/3, uint64(i+1), &victimAlive)
		} else {
			survivors = append(survivors, nd)
			load.front(nd.name, nd.s.base, rate/3, uint64(i+1), nil)
		}
	}
	time.Sleep(6 * time.Second)
	victimAlive.Store(false)
	kill := time.Since(load.start)
	victim.s.kill(t)
	detected := map[string]time.Duration{}
	for end := time.Now().Add(procWait); len(detected) < len(survivors); time.Sleep(5 * time.Millisecond) {
		for _, nd := range survivors {
			if _, done := detected[nd.name]; done {
				continue
			}
			if m, _ := memberOf(clusterStatus(t, nd.s.base), victimName); m.State == "dead" {
				detected[nd.name] = time.Since(load.start) - kill
			}
		}
		if time.Now().After(end) {
			t.Fatalf("not detected in %v: %v", procWait, detected)
		}
	}
	time.Sleep(8 * time.Second)
	all := load.end()
	var lastDetect time.Duration
	for _, d := range detected {
		lastDetect = max(lastDetect, d)
	}
	// Among the surviving fronts' requests: lost, wrong, errors.
	var n, ok, wrong, lost int
	statuses := map[int]int{}
	var errs []string // non-200s: sent (from the kill) and answered after
	const bin = 250 * time.Millisecond
	bins := map[int][]sent{}
	for _, r := range all {
		if r.front == victimName {
			continue
		}
		n++
		statuses[r.status]++
		switch {
		case r.status == 0:
			lost++
		case r.status == http.StatusOK && r.ok:
			ok++
		case r.status == http.StatusOK:
			wrong++
		default:
			errs = append(errs, fmt.Sprintf("%d@%+.3fs/%.0fms", r.status, (r.at-kill).Seconds(), r.latency.Seconds()*1000))
		}
		bins[int(r.at/bin)] = append(bins[int(r.at/bin)], r)
	}
	// Recovery: from the last survivor's detection, the end of the last
	// bin whose p99 is over the SLO.
	detectAt := kill + lastDetect
	recovered := time.Duration(0)
	var rows []string
	for b := int((kill - 2*time.Second) / bin); b <= int((detectAt+5*time.Second)/bin); b++ {
		q := p99(bins[b])
		rows = append(rows, fmt.Sprintf("%+.2fs:%d:%.0fms", (time.Duration(b)*bin-kill).Seconds(), len(bins[b]), q.Seconds()*1000))
		if q >= ps.slo && time.Duration(b+1)*bin > detectAt {
			recovered = time.Duration(b+1)*bin - detectAt
		}
	}
	var before []sent
	for b := int((kill - 5*time.Second) / bin); b < int(kill/bin); b++ {
		before = append(before, bins[b]...)
	}
	t.Logf("killed %s at %.2fs; detected dead after %v", victimName, kill.Seconds(), detected)
	t.Logf("surviving fronts: %d requests: %d 200 with their own output, %d 200 with another's, %d lost (no answer), statuses %v", n, ok, wrong, lost, statuses)
	t.Logf("errors (status@sent from the kill/answered after): %s", strings.Join(errs, " "))
	t.Logf("p99 in the 5 s before the kill %.1f ms; p99 under the SLO (%v) from %v after the last detection (0: never over it after)", p99(before).Seconds()*1000, ps.slo, recovered)
	t.Logf("p99 by 250 ms of send time (start from the kill : requests : p99): %s", strings.Join(rows, " "))
	if lost != 0 || wrong != 0 {
		t.Errorf("%d lost, %d wrong outputs: want none", lost, wrong)
	}
}

// clusterSoakFigure: load at rate through the three fronts for d; then
// every node's membership events: a suspicion or death is a false one.
func clusterSoakFigure(t *testing.T, nodes []*procNode, rate float64, d time.Duration) {
	load := newOpenLoad(10 * time.Second)
	for i, nd := range nodes {
		load.front(nd.name, nd.s.base, rate/3, uint64(i+1), nil)
	}
	time.Sleep(d)
	all := load.end()
	ok := 0
	for _, r := range all {
		if r.ok {
			ok++
		}
	}
	t.Logf("%v at %.0f req/s offered: %d requests, %d 200 with their own output (%.0f/s)", d, rate, len(all), ok, float64(ok)/d.Seconds())
	falses := 0
	for _, nd := range nodes {
		resp, err := http.Get(nd.s.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			for _, kind := range []string{"suspect", "dead"} {
				if v, found := strings.CutPrefix(line, `batchd_cluster_events_total{kind="`+kind+`"} `); found {
					t.Logf("%s: %s events %s", nd.name, kind, v)
					if v != "0" {
						falses++
					}
				}
			}
		}
		st := clusterStatus(t, nd.s.base)
		for _, m := range st.Members {
			if m.State != "alive" {
				t.Errorf("%s sees %s %s", nd.name, m.Node, m.State)
			}
		}
	}
	if falses != 0 {
		t.Errorf("%d nodes counted suspicions or deaths with every node up: false suspicions", falses)
	}
}
