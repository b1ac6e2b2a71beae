package fidelity

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batchd/batchd/actors"
	simcluster "github.com/batchd/batchd/sim/cluster"
)

// ClusterConfig is one cluster fidelity run: Config's workload on Nodes
// nodes of Config.Devices devices each, the load spread evenly over their
// fronts (each front a Poisson source of RateRPS/Nodes, live and
// simulated), live as Nodes `batchd serve` processes that batch together
// (cluster.data_addr: each model at its owner) and simulated in
// sim/cluster.
type ClusterConfig struct {
	Config
	// Nodes is the number of nodes, 2 to ClusterNodesMax.
	Nodes int
	// LinkLatency is the simulated one-way delay between two nodes (the
	// live data plane's hop on loopback).
	LinkLatency time.Duration
}

// Bounds of a cluster fidelity run.
const (
	ClusterNodesMax = 8
	// clusterInFlightMax bounds the live requests in flight; one due past
	// it is dropped and counted.
	clusterInFlightMax = 20_000
	// clusterSamplesMax bounds the live latencies kept.
	clusterSamplesMax = 4_000_000
	// membershipMax bounds the wait for every node to see every other.
	membershipMax = 30 * time.Second
	// clusterReplyMax is the most bytes of a reply read.
	clusterReplyMax = 1 << 16
)

// DefaultClusterConfig is `make fidelity`'s cluster workload: 3 nodes of
// 2 devices (the local cluster's shape, `make cluster`) at DefaultConfig's
// rate, batch, latency and SLO, a loopback link of 0.2 ms.
func DefaultClusterConfig() ClusterConfig {
	c := DefaultConfig()
	c.Devices = 2
	return ClusterConfig{Config: c, Nodes: 3, LinkLatency: 200 * time.Microsecond}
}

// Validate reports the first setting of c out of its bounds.
func (c ClusterConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	switch {
	case c.Nodes < 2 || c.Nodes > ClusterNodesMax:
		return fmt.Errorf("nodes %d: need 2 to %d", c.Nodes, ClusterNodesMax)
	case c.LinkLatency < 0:
		return fmt.Errorf("link latency %v: must not be negative", c.LinkLatency)
	case c.CrashRate != 0:
		return errors.New("crash rate: the cluster run is fault-free")
	case c.ServeConfig != "" && c.ServeConfig != EmbeddedConfig:
		return errors.New("serve configuration: the cluster run serves the embedded default (the flags over it)")
	}
	return nil
}

// ClusterResult is the cluster comparison: over all requests, and front
// by front (the owner's front batches locally, the others forward).
type ClusterResult struct {
	Nodes         int       `json:"nodes"`
	DevicesEach   int       `json:"devices_per_node"`
	RateRPS       float64   `json:"rate_rps"`
	BatchMax      int       `json:"batch_max"`
	LatencyMs     float64   `json:"latency_ms"`
	SLOMs         float64   `json:"slo_ms"`
	DurationS     float64   `json:"duration_s"`
	WarmupS       float64   `json:"warmup_s"`
	LinkLatencyMs float64   `json:"link_latency_ms"`
	Live          Figures   `json:"live"`
	Sim           Figures   `json:"sim"`
	RelErr        RelErrors `json:"rel_err"`
	// Fronts are node i's front: live, simulated, and the error.
	Fronts []ClusterFront `json:"fronts"`
	// Owner is the node that owns the model live (GET /v1/cluster).
	Owner string `json:"owner"`
	// HTTPOverheadMs is the live mean of client latency minus the
	// server's own (the reply's latency_ms): HTTP and the generator. The
	// simulator has no HTTP: each simulated request gets one of the live
	// requests' overheads, drawn at random (seeded), added to its latency.
	HTTPOverheadMs float64 `json:"http_overhead_ms"`
	// HTTPOverheadP99Ms is that overhead's p99 live.
	HTTPOverheadP99Ms float64 `json:"http_overhead_p99_ms"`
	// LiveOther counts live requests with neither a 200 nor a rejection,
	// LiveDropped those due while clusterInFlightMax were in flight.
	LiveOther   int64 `json:"live_other"`
	LiveDropped int64 `json:"live_dropped"`
	// SendLagP99Ms is the live generator's lateness at p99.
	SendLagP99Ms  float64 `json:"send_lag_p99_ms"`
	LoadAvgBefore float64 `json:"loadavg_before"`
	LoadAvgAfter  float64 `json:"loadavg_after"`
	TargetPct     float64 `json:"target_pct"`
	Pass          bool    `json:"pass"`
}

// ClusterFront is one front's comparison.
type ClusterFront struct {
	Node   string    `json:"node"`
	Live   Figures   `json:"live"`
	Sim    Figures   `json:"sim"`
	RelErr RelErrors `json:"rel_err"`
}

// RunCluster runs cfg's workload on a live cluster, then in the cluster
// simulator, and compares them; ClusterResult.Pass is the verdict (every
// percentile over all requests within TargetPct). It takes cfg.Duration of
// real time and more; ctx ends the live run early.
func RunCluster(ctx context.Context, cfg ClusterConfig, log io.Writer) (ClusterResult, error) {
	if err := cfg.Validate(); err != nil {
		return ClusterResult{}, fmt.Errorf("fidelity: %w", err)
	}
	res := ClusterResult{
		Nodes: cfg.Nodes, DevicesEach: cfg.Devices, RateRPS: cfg.RateRPS, BatchMax: cfg.BatchMax,
		LatencyMs: msOf(cfg.Latency), SLOMs: msOf(cfg.SLO), DurationS: cfg.Duration.Seconds(),
		WarmupS: cfg.Warmup.Seconds(), LinkLatencyMs: msOf(cfg.LinkLatency), TargetPct: cfg.TargetPct,
	}
	res.LoadAvgBefore = loadAvg()
	fmt.Fprintf(log, "fidelity: live cluster, %d nodes of %d devices, %g req/s over their fronts for %v (load average %.2f)\n",
		cfg.Nodes, cfg.Devices, cfg.RateRPS, cfg.Duration, res.LoadAvgBefore)
	live, err := runLiveCluster(ctx, cfg, log)
	if err != nil {
		return res, err
	}
	res.LoadAvgAfter = loadAvg()
	res.Owner, res.LiveOther, res.LiveDropped = live.owner, live.other, live.dropped
	res.SendLagP99Ms = quantileMs(live.lags, 0.99)
	if len(live.all) == 0 {
		return res, errors.New("no request of the live cluster run completed")
	}
	res.HTTPOverheadMs = live.overheadMs()
	res.HTTPOverheadP99Ms = quantileMs(live.overheads, 0.99)
	window := (cfg.Duration - cfg.Warmup).Seconds()
	res.Live = latencyFigures(live.all, window)
	res.Live.Rejected = live.rejected

	fmt.Fprintf(log, "fidelity: simulated cluster, link %v, the live HTTP overheads added (mean %.3f ms, p99 %.3f ms)\n",
		cfg.LinkLatency, res.HTTPOverheadMs, res.HTTPOverheadP99Ms)
	obs, err := simCluster(cfg, live.overheads)
	if err != nil {
		return res, err
	}
	res.Sim = latencyFigures(obs.all, window)
	res.Sim.Rejected = obs.rejected
	res.RelErr = relErrors(res.Live, res.Sim)
	for i := range cfg.Nodes {
		f := ClusterFront{Node: liveNodeName(i), Live: latencyFigures(live.fronts[i], window), Sim: latencyFigures(obs.fronts[i], window)}
		f.RelErr = relErrors(f.Live, f.Sim)
		res.Fronts = append(res.Fronts, f)
	}
	res.Pass = res.RelErr.within(cfg.TargetPct / 100)
	return res, nil
}

// liveNodeName is node i's name live: the simulator's, so that both
// sides pick the same owner (rendezvous over the names).
func liveNodeName(i int) string { return simcluster.NodeName(i) }

// latencyFigures are the percentiles of ls (sorted here) and their
// throughput over window seconds.
func latencyFigures(ls []time.Duration, window float64) Figures {
	slices.Sort(ls)
	f := Figures{Completed: int64(len(ls)), P50Ms: quantileMs(ls, 0.50), P95Ms: quantileMs(ls, 0.95), P99Ms: quantileMs(ls, 0.99)}
	if window > 0 {
		f.ThroughputRPS = float64(len(ls)) / window
	}
	return f
}

// quantileMs is the p quantile of sorted ls (nearest rank), in ms.
func quantileMs(ls []time.Duration, p float64) float64 {
	if len(ls) == 0 {
		return 0
	}
	if !slices.IsSorted(ls) {
		ls = slices.Sorted(slices.Values(ls))
	}
	i := min(max(int(math.Ceil(p*float64(len(ls))))-1, 0), len(ls)-1)
	return msOf(ls[i])
}

// liveClusterRun is what the live run measured: the 200s' latencies from
// their intended send time, over all fronts and front by front, within
// the measured window.
type liveClusterRun struct {
	mu        sync.Mutex
	all       []time.Duration
	fronts    [][]time.Duration
	overhead  time.Duration // the sum of client minus server latency
	overheads []time.Duration
	lags      []time.Duration
	rejected  int64
	other     int64
	dropped   int64
	owner     string
	errSample string
}

func (r *liveClusterRun) overheadMs() float64 {
	if len(r.all) == 0 {
		return 0
	}
	return msOf(r.overhead) / float64(len(r.all))
}

// clusterNode is one live node: its process and its front.
type clusterNode struct {
	cmd  *exec.Cmd
	base string
	done chan error
}

// freeLoopbackPort is a TCP port (and the same UDP port, with udp) free on
// loopback now. It is picked below the kernel's ephemeral range (from
// 32768 on Linux): a port the kernel hands out for ":0" can be taken by
// another process's outgoing connection before the node binds it.
func freeLoopbackPort(udp bool) (int, error) {
	for range 50 {
		p := 20000 + mrand.IntN(12000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		if !udp {
			return p, nil
		}
		if pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			pc.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free loopback port below 32000")
}

// runLiveCluster starts cfg.Nodes `batchd serve` nodes on loopback (a
// fresh gossip key, each node's data plane on), waits until every node
// sees every other alive, sends the load, and stops the nodes one at a
// time, gracefully.
func runLiveCluster(ctx context.Context, cfg ClusterConfig, log io.Writer) (*liveClusterRun, error) {
	// The nodes' stderr and this run's own lines go to log at once.
	log = &lockedWriter{w: log}
	dir, err := os.MkdirTemp("", "batchd-fidelity-cluster-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	const keyEnv = "BATCHD_FIDELITY_GOSSIP_KEY"
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(conf, []byte("cluster:\n  secret_key_env: "+keyEnv+"\n"), 0o600); err != nil {
		return nil, err
	}
	var nodes []*clusterNode
	stopAll := func() error {
		var errs []error
		for i := len(nodes) - 1; i >= 0; i-- { // one at a time: each leave is heard
			n := nodes[i]
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-n.done:
				if err != nil {
					errs = append(errs, fmt.Errorf("node %s: %w", liveNodeName(i), err))
				}
			case <-time.After(serverStopMax):
				_ = n.cmd.Process.Kill()
				errs = append(errs, fmt.Errorf("node %s did not stop in time; killed: %v", liveNodeName(i), <-n.done))
			}
		}
		return errors.Join(errs...)
	}
	seedGossip := ""
	for i := range cfg.Nodes {
		gossip, err := freeLoopbackPort(true)
		if err != nil {
			return nil, errors.Join(err, stopAll())
		}
		args := append([]string{"serve", "--config", conf, "--addr", "127.0.0.1:0", "--log-level", "warn",
			"--node", liveNodeName(i), "--cluster-bind", "127.0.0.1:" + strconv.Itoa(gossip), "--data-addr", "127.0.0.1:0",
			"--data-dir", filepath.Join(dir, liveNodeName(i))}, serveArgs(cfg.Config)...)
		if seedGossip != "" {
			args = append(args, "--join", seedGossip)
		} else {
			seedGossip = "127.0.0.1:" + strconv.Itoa(gossip)
		}
		n, err := startNode(cfg.Server, args, keyEnv+"="+base64.StdEncoding.EncodeToString(key), log)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("node %s: %w", liveNodeName(i), err), stopAll())
		}
		nodes = append(nodes, n)
	}
	owner, err := awaitMembership(ctx, nodes)
	if err != nil {
		return nil, errors.Join(err, stopAll())
	}
	run := sendClusterLoad(ctx, cfg, nodes)
	run.owner = owner
	if run.errSample != "" {
		fmt.Fprintf(log, "fidelity: a live request that failed: %s\n", run.errSample)
	}
	return run, stopAll()
}

// startNode starts one `batchd serve` and waits for its ready line.
func startNode(server string, args []string, env string, log io.Writer) (*clusterNode, error) {
	cmd := exec.Command(server, args...)
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	n := &clusterNode{cmd: cmd, done: make(chan error, 1)}
	urls, readDone := watchServing(out)
	go func() { <-readDone; n.done <- cmd.Wait() }()
	select {
	case u, ok := <-urls:
		if !ok {
			return nil, fmt.Errorf("exited before serving: %v", <-n.done)
		}
		n.base = u
		return n, nil
	case <-time.After(serverStartMax):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("did not start in time: %v", <-n.done)
	}
}

// awaitMembership polls every node's GET /v1/cluster until each sees
// every node alive and they agree on the model's owner, which it returns.
func awaitMembership(ctx context.Context, nodes []*clusterNode) (string, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(membershipMax)
	last := ""
	for {
		owners := map[string]bool{}
		settled := true
		for _, n := range nodes {
			var st struct {
				Members []struct {
					Node, State string
				}
				Owners map[string]string
			}
			resp, err := client.Get(n.base + "/v1/cluster")
			if err == nil {
				err = json.NewDecoder(io.LimitReader(resp.Body, clusterReplyMax)).Decode(&st)
				resp.Body.Close()
			}
			alive := 0
			for _, m := range st.Members {
				if m.State == "alive" {
					alive++
				}
			}
			if err != nil || alive != len(nodes) {
				settled = false
				last = fmt.Sprintf("%s: %d of %d alive (%v)", n.base, alive, len(nodes), err)
				break
			}
			owners[st.Owners["echo"]] = true
		}
		if settled && len(owners) == 1 && !owners[""] {
			for o := range owners {
				return o, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the nodes did not see each other within %v: %s, owners %v", membershipMax, last, owners)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling gossip's convergence, bounded by the deadline
		}
	}
}

// sendClusterLoad sends the open-loop load: each front a Poisson source
// of RateRPS/Nodes (seeds Seed+i), each request's latency from its
// intended send time to its reply read; the warm-up's are sent, not kept.
func sendClusterLoad(ctx context.Context, cfg ClusterConfig, nodes []*clusterNode) *liveClusterRun {
	run := &liveClusterRun{fronts: make([][]time.Duration, len(nodes))}
	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 30 * time.Second}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	slots := make(chan struct{}, clusterInFlightMax)
	var wg sync.WaitGroup
	start := time.Now().Add(50 * time.Millisecond)
	pad := strings.Repeat("x", cfg.InputLen)
	var seq sync.Mutex
	next := uint64(0)
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(cfg.Seed, uint64(i)+1))
			rate := cfg.RateRPS / float64(len(nodes))
			var at time.Duration
			for {
				at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
				if at >= cfg.Duration {
					return
				}
				due := at // the request's own: the loop moves at on
				intended := start.Add(due)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(intended)):
				}
				select {
				case slots <- struct{}{}:
				default:
					run.mu.Lock()
					run.dropped++
					run.mu.Unlock()
					continue
				}
				seq.Lock()
				next++
				id := next
				seq.Unlock()
				input := strconv.FormatUint(id, 10)
				if len(input) < len(pad) {
					input += pad[len(input):]
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					sent := time.Now()
					status, serverMs, err := inferOnce(ctx, client, n.base, input)
					lat := time.Since(intended)
					run.mu.Lock()
					defer run.mu.Unlock()
					counted := due >= cfg.Warmup
					switch {
					case err == nil && status == http.StatusOK:
						if counted && len(run.all) < clusterSamplesMax {
							run.all = append(run.all, lat)
							run.fronts[i] = append(run.fronts[i], lat)
							run.lags = append(run.lags, sent.Sub(intended))
							oh := max(lat-time.Duration(serverMs*float64(time.Millisecond)), 0)
							run.overhead += oh
							run.overheads = append(run.overheads, oh)
						}
					case err == nil && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable):
						if counted {
							run.rejected++
						}
					default:
						if counted {
							run.other++
						}
						if run.errSample == "" {
							run.errSample = fmt.Sprintf("%s: status %d, %v", n.base, status, err)
						}
					}
				}()
			}
		}()
	}
	wg.Wait()
	return run
}

// inferOnce sends one request and returns its status and the server's own
// latency (the reply's latency_ms).
func inferOnce(ctx context.Context, client *http.Client, base, input string) (int, float64, error) {
	body := `{"input":"` + input + `"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/models/echo/infer", strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var r struct {
		LatencyMs float64 `json:"latency_ms"`
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, clusterReplyMax))
	if err != nil {
		return resp.StatusCode, 0, err
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, &r); err != nil {
			return resp.StatusCode, 0, fmt.Errorf("reply: %w", err)
		}
	}
	return resp.StatusCode, r.LatencyMs, nil
}

// clusterObserver measures a simulated cluster as the live run is
// measured: the latency (reply at the front's waiter - arrival) of the
// completed requests that arrived in [from, to), plus an HTTP overhead
// drawn from extra (the live requests'; none when empty), over all fronts
// and front by front.
type clusterObserver struct {
	from, to time.Duration
	extra    []time.Duration
	rng      *mrand.Rand
	index    map[string]int
	all      []time.Duration
	fronts   [][]time.Duration
	rejected int64
}

// Deliver implements sim.Observer.
func (o *clusterObserver) Deliver(at time.Duration, _, to actors.Address, msg actors.Message) {
	r, ok := msg.(actors.Reply)
	if !ok || to.ID != simcluster.WaiterID || r.Arrival < o.from || r.Arrival >= o.to {
		return
	}
	switch r.Outcome {
	case actors.Completed:
		if len(o.all) < clusterSamplesMax {
			l := at - r.Arrival
			if len(o.extra) > 0 {
				l += o.extra[o.rng.IntN(len(o.extra))]
			}
			o.all = append(o.all, l)
			if i, ok := o.index[to.Node]; ok {
				o.fronts[i] = append(o.fronts[i], l)
			}
		}
	case actors.Rejected:
		o.rejected++
	}
}

// simCluster runs cfg's workload in the cluster simulator: the batcher
// and the devices the embedded serve configuration (with cfg's settings)
// gives the live nodes, an accumulator per model as live (the registry
// names echo: the split).
func simCluster(cfg ClusterConfig, overheads []time.Duration) (*clusterObserver, error) {
	f, err := serveConfig(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	sc := simcluster.DefaultConfig()
	sc.Seed = cfg.Seed
	sc.Nodes, sc.DevicesPerNode = cfg.Nodes, cfg.Devices
	sc.Rate = cfg.RateRPS
	sc.Duration = cfg.Duration
	sc.Models = []string{"echo"}
	sc.Batcher = f.BatcherConfig()
	sc.Device = f.DeviceConfig()
	sc.Grace = f.HTTP.ReplyGrace
	sc.Split = true
	sc.Link = simcluster.LinkConfig{Latency: cfg.LinkLatency}
	obs := &clusterObserver{
		from: cfg.Warmup, to: cfg.Duration, extra: overheads, rng: mrand.New(mrand.NewPCG(cfg.Seed, 0x0e7)),
		index: map[string]int{}, fronts: make([][]time.Duration, cfg.Nodes),
	}
	for i := range cfg.Nodes {
		obs.index[simcluster.NodeName(i)] = i
	}
	sc.Observers = append(sc.Observers, obs)
	if _, err := simcluster.Run(sc); err != nil {
		return nil, fmt.Errorf("simulate the cluster: %w", err)
	}
	return obs, nil
}

// lockedWriter serialises writes to w: the nodes' stderr copiers and the
// run write to one log.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
