package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/cluster"
	"github.com/batchd/batchd/cluster/transport"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/config"
)

// clusterNode is the server's membership in a cluster (cluster.node set):
// memberlist finds the other nodes and tells this one who joined, left or
// died; the node keeps the view those updates build, as the actors keep
// theirs, for GET /v1/cluster and /metrics.
type clusterNode struct {
	ml    *cluster.Membership
	self  string
	leave time.Duration
	log   *slog.Logger

	models []string // the registry's: /v1/cluster names each one's owner
	// engine, with a data plane, passes each update on to the engine's
	// actors (Engine.Member).
	engine func(member.Update)

	mu   sync.Mutex
	view *member.View
	// inc is the node's incarnation: its start's, then its last new
	// life's (the node itself alive at a higher one).
	inc    uint64
	events [member.Left + 1]int64 // updates applied, by kind
}

// clusterViewMax bounds the members a node keeps in its view.
const clusterViewMax = 4096

// clusterRejoinEvery is how often a node whose join names a DNS name
// resolves it again and joins who is new there.
const clusterRejoinEvery = 5 * time.Second

// rejoinEvery is the period at which a node resolves its join list again:
// clusterRejoinEvery when an entry is a DNS name (a Kubernetes headless
// service lists no one until the first pod is up, and two pods that each
// found only themselves must still merge), else never (a join by address
// that reaches no one fails the start).
func rejoinEvery(join []string) time.Duration {
	for _, e := range join {
		host, _, err := net.SplitHostPort(strings.TrimPrefix(e, cluster.SRVPrefix))
		if err != nil {
			host = strings.TrimPrefix(e, cluster.SRVPrefix)
		}
		if net.ParseIP(host) == nil {
			return clusterRejoinEvery
		}
	}
	return 0
}

// startCluster joins f's cluster, telling the others the node's devices
// and models. The gossip key comes from the variable cluster.secret_key_env
// names.
func startCluster(f *config.File, devices int, dp *dataPlane, log *slog.Logger) (*clusterNode, error) {
	c := f.Cluster
	host, port, _ := net.SplitHostPort(c.Bind) // validated
	p, _ := strconv.Atoi(port)
	cfg := cluster.DefaultConfig(c.Node)
	cfg.BindAddr, cfg.BindPort = host, p
	cfg.Join, cfg.JoinEvery = c.Join, rejoinEvery(c.Join)
	cfg.ProbeInterval, cfg.ProbeTimeout, cfg.SuspicionMult = c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult
	cfg.PushPullInterval = cluster.PushPullFor(c.ProbeInterval)
	key, err := f.GossipKey()
	if err != nil {
		return nil, fmt.Errorf("cluster.secret_key_env: %w", err)
	}
	cfg.SecretKey = key
	cfg.Meta = cluster.Meta{Devices: devices, Models: f.Devices.WarmModels}
	n := &clusterNode{self: c.Node, inc: cfg.Incarnation, leave: c.LeaveTimeout, log: log, view: member.NewView(clusterViewMax)}
	if dp != nil {
		// The engine's actors are told what the node's view is told, and
		// the data plane follows membership to the others' addresses.
		cfg.Incarnation, n.inc = dp.inc, dp.inc
		cfg.NextLife = cluster.NextIncarnation
		cfg.Meta.DataAddr = dp.tr.Addr()
		cfg.OnPeer = dp.onPeer(log)
		n.engine = dp.member
	}
	for _, m := range f.Models {
		n.models = append(n.models, m.Name)
	}
	ml, err := cluster.Start(cfg, n.apply)
	if err != nil {
		return nil, err
	}
	n.ml = ml
	log.Info("cluster: joined", "node", c.Node, "incarnation", cfg.Incarnation, "gossip", ml.Addr(), "join", c.Join, "encrypted", cfg.SecretKey != nil)
	return n, nil
}

// apply takes one membership update (memberlist calls it one at a time).
func (n *clusterNode) apply(u member.Update) {
	if n.engine != nil {
		// Before the view: a member /v1/cluster shows is one the
		// engine's actors were told of.
		n.engine(u)
	}
	n.mu.Lock()
	ch, err := n.view.Apply(u)
	if err == nil && ch != member.Ignored {
		n.events[u.Kind]++
	}
	life := u.Node == n.self && u.Kind == member.Alive && u.Inc > n.inc
	if life {
		n.inc = u.Inc
	}
	n.mu.Unlock()
	if err != nil {
		n.log.Warn("cluster: update dropped", "update", u.String(), "err", err)
		return
	}
	if life {
		n.log.Warn("cluster: the others declared this node dead: it takes a new life", "incarnation", u.Inc)
	}
	if ch != member.Ignored {
		n.log.Info("cluster: member", "node", u.Node, "incarnation", u.Inc, "state", u.Kind.String())
	}
}

// dataPlane is the node's end of the cluster's data plane
// (cluster/transport): the engine's actors send to other nodes through
// it, and what other nodes send comes in through it to the engine.
type dataPlane struct {
	tr  *transport.Transport
	inc uint64
	// eng is the engine, once started: messages that come before are
	// dropped (the actors' heartbeats and retries cover them).
	eng atomic.Pointer[engine.Engine]
	// forward is batchd_cluster_forward_seconds (forwarded).
	forward *prometheus.HistogramVec
	// stopFaults ends the fault knob (faultSignals).
	stopFaults func()
	// lastSubmit is when a request last came from another node (UnixNano;
	// 0: never), which a node handing its models over waits to go quiet.
	lastSubmit atomic.Int64
}

// lastRemoteSubmit is when a request last came from another node (the
// zero time: never).
func (dp *dataPlane) lastRemoteSubmit() time.Time {
	if n := dp.lastSubmit.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// openDataPlane listens on f.Cluster.DataAddr with the gossip key.
func openDataPlane(f *config.File) (*dataPlane, error) {
	key, err := f.GossipKey()
	if err != nil {
		return nil, fmt.Errorf("cluster.secret_key_env: %w", err)
	}
	// With a data plane the node's incarnation is cluster.NextIncarnation's
	// (device incarnations carry it in 31 bits: engine.ClusterConfig, which
	// Unix seconds would outgrow in 2038 and milliseconds at once), held
	// only once the clock has passed it (at most a quarter second), so a
	// restart reads a higher one.
	inc, wait := cluster.NextIncarnation(time.Now(), 0)
	time.Sleep(wait)
	dp := &dataPlane{inc: inc,
		forward: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "batchd_cluster_forward_seconds",
			Help: "Requests this node's front sent to another node's batcher (the model's owner), from the send to the first reply's arrival back at the front: " +
				"part round_trip is all of it (the owner's queue and the batch's compute included), part transit that less the time from the owner's batcher taking the request to its device finishing it " +
				"(the two hops and the mailboxes on the way; across hosts, plus the clocks' skew between the owner and the device's node).",
			Buckets: forwardBuckets,
		}, []string{"part"})}
	onDown := func(node string) {
		if e := dp.eng.Load(); e != nil {
			e.PeerDown(node)
		}
	}
	onUp := func(node string) {
		if e := dp.eng.Load(); e != nil {
			e.PeerUp(node)
		}
	}
	dp.tr, err = transport.New(transport.Config{Node: f.Cluster.Node, Listen: f.Cluster.DataAddr, Key: key, OnDown: onDown, OnUp: onUp},
		func(from, to actors.Address, msg actors.Message) {
			if _, ok := msg.(actors.Submit); ok {
				dp.lastSubmit.Store(time.Now().UnixNano())
			}
			if e := dp.eng.Load(); e != nil {
				e.Deliver(from, to, msg)
			}
		})
	if err != nil {
		return nil, fmt.Errorf("cluster.data_addr: %w", err)
	}
	return dp, nil
}

// forwardBuckets (seconds) run from a loopback hop (tens of µs) to past
// a request's deadline.
var forwardBuckets = prometheus.ExponentialBuckets(25e-6, 2, 20)

// forwarded is the engine's ClusterConfig.Forwarded: it observes a
// forwarded request's round trip and transit.
func (dp *dataPlane) forwarded(total, atOwner time.Duration) {
	dp.forward.WithLabelValues("round_trip").Observe(total.Seconds())
	if atOwner > 0 {
		dp.forward.WithLabelValues("transit").Observe(max(total-atOwner, 0).Seconds())
	}
}

// member passes a membership update to the engine's actors.
func (dp *dataPlane) member(u member.Update) {
	if e := dp.eng.Load(); e != nil {
		e.Member(u)
	}
}

// onPeer is membership's OnPeer: the data plane dials each live member at
// its data-plane address, and forgets the dead and departed.
func (dp *dataPlane) onPeer(log *slog.Logger) func(member.Update, cluster.Meta) {
	return func(u member.Update, meta cluster.Meta) {
		if err := dp.tr.Apply(u, meta.DataAddr); err != nil {
			log.Warn("cluster: data plane", "node", u.Node, "err", err)
		}
	}
}

// ClusterMember is one member as GET /v1/cluster shows it.
type ClusterMember struct {
	Node        string `json:"node"`
	Incarnation uint64 `json:"incarnation"`
	State       string `json:"state"`
	Gossip      string `json:"gossip,omitempty"`
	Devices     int    `json:"devices"`
	// Models are the models the member holds warm; empty: any.
	Models []string `json:"models"`
}

// ClusterStatus is GET /v1/cluster: this node, every member it has heard
// of (the dead and departed too, until they return), and the owner of
// each model of the registry: the node whose accumulator batches it, the
// rendezvous choice among the live members that hold it warm (among all
// of them when none does).
type ClusterStatus struct {
	Node        string            `json:"node"`
	Incarnation uint64            `json:"incarnation"`
	Members     []ClusterMember   `json:"members"`
	Owners      map[string]string `json:"owners"`
}

// status is the node's view now.
func (n *clusterNode) status() ClusterStatus {
	meta := map[string]cluster.Node{}
	for _, m := range n.ml.Members() {
		meta[m.Name] = m
	}
	st := ClusterStatus{Node: n.self, Owners: map[string]string{}}
	n.mu.Lock()
	st.Incarnation = n.inc
	all := n.view.Members()
	for _, name := range n.models {
		if o, ok := n.view.Owner(name); ok {
			st.Owners[name] = o
		}
	}
	n.mu.Unlock()
	st.Members = make([]ClusterMember, 0, len(all))
	for _, u := range all {
		cm := ClusterMember{Node: u.Node, Incarnation: u.Inc, State: u.Kind.String(), Models: []string{}}
		if m, ok := meta[u.Node]; ok && m.Incarnation == u.Inc {
			cm.Gossip, cm.Devices = m.Addr, m.Devices
			if len(m.Models) > 0 {
				cm.Models = m.Models
			}
		}
		st.Members = append(st.Members, cm)
	}
	return st
}

// collectors are the cluster's series for /metrics: members by state and
// membership events by kind.
func (n *clusterNode) collectors() []prometheus.Collector {
	members := prometheus.NewDesc("batchd_cluster_members", "Members of the cluster this node knows of, by state (alive, suspect, dead, left).", []string{"state"}, nil)
	events := prometheus.NewDesc("batchd_cluster_events_total", "Membership changes this node applied, by kind (alive: a join, a return or a refutation; suspect; dead; left).", []string{"kind"}, nil)
	return []prometheus.Collector{collectorFunc{descs: []*prometheus.Desc{members, events}, collect: func(ch chan<- prometheus.Metric) {
		n.mu.Lock()
		var byState [member.Left + 1]int
		for _, u := range n.view.Members() {
			byState[u.Kind]++
		}
		ev := n.events
		n.mu.Unlock()
		for k := member.Alive; k <= member.Left; k++ {
			ch <- prometheus.MustNewConstMetric(members, prometheus.GaugeValue, float64(byState[k]), k.String())
			ch <- prometheus.MustNewConstMetric(events, prometheus.CounterValue, float64(ev[k]), k.String())
		}
	}}}
}

// collectors are the data plane's series for /metrics: the messages it
// carried between this node and the others, by fate, and the forwarded
// requests' times.
func (dp *dataPlane) collectors() []prometheus.Collector {
	msgs := prometheus.NewDesc("batchd_cluster_messages_total",
		"Actor messages the data plane carried: sent to other nodes, received from them, undeliverable (back to their sender: the node unknown, down or its queue full), dropped (from a peer, not decoded or not for this node).",
		[]string{"fate"}, nil)
	return []prometheus.Collector{dp.forward, collectorFunc{descs: []*prometheus.Desc{msgs}, collect: func(ch chan<- prometheus.Metric) {
		st := dp.tr.Stats()
		for _, c := range []struct {
			fate string
			n    uint64
		}{{"sent", st.Sent}, {"received", st.Received}, {"undeliverable", st.Undeliverable}, {"dropped", st.Dropped}} {
			ch <- prometheus.MustNewConstMetric(msgs, prometheus.CounterValue, float64(c.n), c.fate)
		}
	}}}
}

// collectorFunc is a prometheus.Collector of fixed descriptions.
type collectorFunc struct {
	descs   []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// stop leaves the cluster gracefully (the others see the node Left, not
// Dead), within cluster.leave_timeout.
// handOver tells the others the node is leaving, so they move its models
// (their fronts resubmit what waits here to the new owners), and waits
// grace for that to take effect before the node drains: a request another
// front sends here meanwhile would find the batcher draining and be
// refused.
func (n *clusterNode) handOver(ctx context.Context, grace time.Duration, lastRemote func() time.Time) error {
	if err := n.ml.Announce(n.leave); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.log.Info("cluster: leaving: the others move this node's models", "grace", grace)
	if waited := awaitHandover(ctx, grace, lastRemote); waited > grace+handoverQuiet {
		n.log.Info("cluster: the others' requests came on past the grace", "waited", waited)
	}
	return nil
}

// A node handing its models over waits the grace, then on while other
// nodes' requests still come to it (their fronts have not all heard yet:
// the gossip is slower on a loaded machine), until none has come for
// handoverQuiet, handoverWaitMax at the most. Without the second wait, a
// full make test on a loaded 2-core machine once had the draining owner
// answer 46 of 1,726 forwarded requests 503 (TestClusterHandover): most
// likely the leave had not reached the other node within the grace. No
// quiet period makes that exact (another run answered 745 of 2,689 503:
// the other node paused past it), so the fronts also hold an owner's
// draining refusal until their view moves the model, and then send the
// request to the new owner (actors.Front).
const (
	handoverQuiet   = 100 * time.Millisecond
	handoverWaitMax = 10 * time.Second
)

// awaitHandover waits as handOver says, or until ctx ends (the
// shutdown's bound comes first), and returns how long it waited.
func awaitHandover(ctx context.Context, grace time.Duration, lastRemote func() time.Time) time.Duration {
	return awaitQuiet(ctx, lastRemote, grace, handoverQuiet, max(grace, handoverWaitMax))
}

func (n *clusterNode) stop() error {
	if err := n.ml.Leave(n.leave); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// FetchClusterStatus asks the node at base (http://host:port) for its
// view of the cluster (GET /v1/cluster), with key as the bearer token
// when the node's metrics are behind one.
func FetchClusterStatus(ctx context.Context, base, key string) (ClusterStatus, error) {
	var st ClusterStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/v1/cluster", nil)
	if err != nil {
		return st, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, statusBodyMax))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s: %s: %s", req.URL, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("GET %s: %w", req.URL, err)
	}
	return st, nil
}

// statusBodyMax bounds the answer FetchClusterStatus reads: a view of
// clusterViewMax members.
const statusBodyMax = 8 << 20

// WriteClusterStatus writes st as a table, a member a row (this node
// marked *), then the owner of each model.
func WriteClusterStatus(w io.Writer, st ClusterStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "node\tincarnation\tstate\tdevices\tmodels\tgossip")
	for _, m := range st.Members {
		name := m.Node
		if name == st.Node {
			name += " *"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", name, m.Incarnation, m.State, m.Devices, strings.Join(m.Models, ","), m.Gossip)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	models := slices.Sorted(maps.Keys(st.Owners))
	fmt.Fprintln(w)
	for _, m := range models {
		fmt.Fprintf(w, "model %s: owner %s\n", m, st.Owners[m])
	}
	return nil
}
