package scenarios

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/actors/schema"
	"github.com/batchd/batchd/sim/cluster"
)

// ClusterScenario is one cluster scenario file: the same actors on every
// node of a simulated cluster (package sim/cluster), membership as the
// SWIM model says each node learns it, a seeded network between nodes,
// and true faults (crashes, restarts, leaves, partitions) at given times.
//
// The top-level cluster: section is what makes a file a cluster scenario:
// `batchd sim-cluster` runs it, `batchd sim` refuses it with that advice
// (and the other way round). The built-in ones are the files of
// scenarios/cluster/. Durations are Go durations; a key the file leaves
// out keeps the default its field's comment gives (cluster.DefaultConfig's:
// 3 nodes of 2 devices, batches of up to 100 at 100 ms, SLO 200 ms, a LAN
// link, memberlist's LAN settings, 600 req/s for 30 s); an unknown key is
// an error.
type ClusterScenario struct {
	// Name, Description, Long and Seed are as in a one-node scenario:
	// lowercase letters, digits and dashes; what the scenario shows; a
	// scenario `go test` runs only with -scenarios.long; the master seed
	// (default 1).
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Long        bool   `yaml:"long"`
	Seed        uint64 `yaml:"seed"`
	// Cluster is the nodes, their devices, the network and membership.
	Cluster Cluster `yaml:"cluster"`
	// Devices is every device's latency model (the accumulators plan
	// with it too) and supervision.
	Devices ClusterDevices `yaml:"devices"`
	// Policy is every accumulator's policy (the schema's, as in a serve
	// config); every default is cluster.DefaultConfig's (batch_max 100).
	Policy schema.Policy `yaml:"policy"`
	// Traffic is the offered load.
	Traffic ClusterTraffic `yaml:"traffic"`
	// Faults are the true events, one an entry, in the syntax of
	// `batchd sim-cluster --faults` (cluster.ParseFaults):
	//
	//	crash:NODE@T, restart:NODE@T, leave:NODE@T,
	//	partition:A|B@T1-T2, oneway:A|B@T1-T2 (A, B: nodes joined by +)
	//
	// A NODE is a node's name (n000, n001, ...), owner(MODEL), the node
	// that owns MODEL in the healthy cluster, or nonowner(MODEL), the
	// first node by name that does not.
	Faults []string `yaml:"faults"`
	// Expect lists what must hold, one check a line, in the one-node
	// scenarios' syntax "[scope...] metric op value" over the cluster's
	// report (see ClusterMetrics): "lost == 0",
	// "node:owner(m) detection_ms < 7000",
	// "window:detected(owner(m))+2s-30s p99_step_max_ms < 200".
	Expect []string `yaml:"expect"`

	// Filled in by the loader.
	file    string
	lines   map[string]int
	latency actors.LatencyModel
	names   []string
	faults  []fault
	checks  []clusterCheck
}

// Cluster is a cluster scenario's nodes, network and membership.
type Cluster struct {
	// Nodes is the number of nodes, named n000, n001, ...; each has a
	// front (clients send it an equal share of the traffic), an
	// accumulator and its devices. Default 3.
	Nodes int `yaml:"nodes"`
	// DevicesPerNode is the devices on every node. Default 2.
	DevicesPerNode int `yaml:"devices_per_node"`
	// Devices, when given, is the fleet's size instead, dealt round-robin
	// over the nodes (fewer devices than nodes leaves nodes with a front
	// and no device).
	Devices int `yaml:"devices"`
	// PerNode is per-node batching: each front sends to its own node's
	// accumulator, each device serves its own node. Default false: each
	// model is batched by the one node that owns it.
	PerNode bool `yaml:"per_node"`
	// Grace is a front's wait past a deadline before it answers Expired.
	// Default 100ms.
	Grace time.Duration `yaml:"grace"`
	// Link is every link between two nodes.
	Link Link `yaml:"link"`
	// Membership is the SWIM protocol's settings.
	Membership Membership `yaml:"membership"`
}

// Link is the network model of every link (cluster.LinkConfig).
type Link struct {
	// Latency is the one-way delay's fixed part (default 200us), Jitter
	// the mean of an exponential part added to it (default 50us).
	Latency time.Duration `yaml:"latency"`
	Jitter  time.Duration `yaml:"jitter"`
	// Loss is each message's chance of being lost, in [0, 1). Default 0.
	Loss float64 `yaml:"loss"`
}

// Membership is the SWIM model's settings (swim.Config); the defaults are
// memberlist's LAN settings (swim.DefaultConfig).
type Membership struct {
	// ProbeInterval is the protocol period (1s); a probe without an ack by
	// its end raises a suspicion.
	ProbeInterval time.Duration `yaml:"probe_interval"`
	// IndirectProbes is the helpers asked to ping a silent target (3).
	IndirectProbes int `yaml:"indirect_probes"`
	// SuspicionMult sets the suspicion timeout: suspicion_mult ×
	// max(1, log10 n) × probe_interval (4).
	SuspicionMult float64 `yaml:"suspicion_mult"`
	// GossipInterval (200ms), GossipFanout (3) and RetransmitMult (4):
	// dissemination.
	GossipInterval time.Duration `yaml:"gossip_interval"`
	GossipFanout   int           `yaml:"gossip_fanout"`
	RetransmitMult int           `yaml:"retransmit_mult"`
	// GossipToTheDead is how long a node gossips to a member after it
	// died (30s).
	GossipToTheDead time.Duration `yaml:"gossip_to_the_dead"`
	// PushPullInterval is the full state exchange (30s),
	// ReconnectInterval serf's reconnect to a member held dead.
	PushPullInterval  time.Duration `yaml:"push_pull_interval"`
	ReconnectInterval time.Duration `yaml:"reconnect_interval"`
	// LeaveGrace is how long a leaving node gossips its leave before it
	// stops.
	LeaveGrace time.Duration `yaml:"leave_grace"`
}

// ClusterDevices describes the devices of every node.
type ClusterDevices struct {
	// Latency is the batch cost model, as a one-node scenario's
	// devices.latency (fixed, base/per_item/table/fanout, or a profile
	// relative to the file). Default: fixed 100ms.
	Latency Latency `yaml:"latency"`
	// Supervision: watchdog, restart backoff, quarantine
	// (actors.DefaultDeviceConfig's).
	schema.Supervision `yaml:",inline"`
}

// ClusterTraffic is the offered load: Poisson arrivals at Rate, spread
// evenly over the fronts (as a load balancer would), from 0 to Duration.
type ClusterTraffic struct {
	// Rate is requests per second over the whole cluster. Default 600.
	Rate float64 `yaml:"rate"`
	// Duration is when arrivals stop (default 30s); Drain how long after
	// it everything must be answered (default 10s).
	Duration time.Duration `yaml:"duration"`
	Drain    time.Duration `yaml:"drain"`
	// Models are the models asked for, in equal shares; every device
	// holds all of them. Default [m].
	Models []string `yaml:"models"`
}

// ClusterModelsLimit bounds a cluster scenario's models.
const ClusterModelsLimit = 64

// fault is one resolved entry of faults: its ParseFaults text with node
// references replaced by names, its kind, the nodes it touches and when
// it starts.
type fault struct {
	spec  string
	kind  string
	nodes []string
	at    time.Duration
}

// clusterDefaults is a cluster scenario holding every default.
func clusterDefaults() ClusterScenario {
	d := cluster.DefaultConfig()
	sw := d.SWIM
	return ClusterScenario{
		Seed: 1,
		Cluster: Cluster{
			Nodes: d.Nodes, DevicesPerNode: d.DevicesPerNode, Grace: d.Grace,
			Link: Link{Latency: d.Link.Latency, Jitter: d.Link.Jitter, Loss: d.Link.Loss},
			Membership: Membership{
				ProbeInterval: sw.ProbeInterval, IndirectProbes: sw.IndirectProbes, SuspicionMult: sw.SuspicionMult,
				GossipInterval: sw.GossipInterval, GossipFanout: sw.GossipFanout, RetransmitMult: sw.RetransmitMult,
				GossipToTheDead: sw.GossipToTheDead, PushPullInterval: sw.PushPullInterval,
				ReconnectInterval: sw.ReconnectInterval, LeaveGrace: sw.LeaveGrace,
			},
		},
		Devices: ClusterDevices{Supervision: schema.SupervisionOf(d.Device)},
		Policy:  schema.PolicyOf(d.Batcher),
		Traffic: ClusterTraffic{Rate: d.Rate, Duration: d.Duration, Drain: d.Drain},
	}
}

// File is the name of the file the scenario was read from.
func (s *ClusterScenario) File() string { return s.file }

// clusterDir is the folder of the built-in cluster scenarios.
const clusterDir = "cluster"

// ClusterBuiltins returns the names of the built-in cluster scenarios
// (the files of scenarios/cluster/), sorted.
func ClusterBuiltins() []string { return builtinNames(clusterDir) }

// ClusterBuiltin loads the built-in cluster scenario called name.
func ClusterBuiltin(name string) (*ClusterScenario, error) {
	file := path.Join(clusterDir, name+".yaml")
	unknown := func() error {
		msg := fmt.Sprintf("cluster scenario %q: %%w (built-in: %s)", name, strings.Join(ClusterBuiltins(), ", "))
		if slices.Contains(Builtins(), name) {
			msg += "; " + name + " is a one-node scenario: batchd sim " + name
		}
		return fmt.Errorf(msg, ErrUnknown)
	}
	if !fs.ValidPath(file) || strings.Contains(name, "/") || name == "" {
		return nil, unknown()
	}
	data, err := fs.ReadFile(builtin, file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, unknown()
	}
	if err != nil {
		return nil, fmt.Errorf("cluster scenario %q: %w", name, err)
	}
	return ParseCluster("scenarios/"+file, data, func(rel string) ([]byte, error) {
		return readLimited(func() (io.ReadCloser, error) { return builtin.Open(path.Join(clusterDir, rel)) }, ProfileBytesMax)
	})
}

// LoadCluster reads and validates the cluster scenario file at file; a
// latency profile is read relative to its folder.
func LoadCluster(file string) (*ClusterScenario, error) {
	data, readProfile, err := readFile(file)
	if err != nil {
		return nil, fmt.Errorf("cluster scenario: %w", err)
	}
	return ParseCluster(file, data, readProfile)
}

// FindCluster loads a cluster scenario named on a command line: a file
// when arg names one (or looks like a path), else a built-in one.
func FindCluster(arg string) (*ClusterScenario, error) {
	if isFile(arg) {
		return LoadCluster(arg)
	}
	return ClusterBuiltin(arg)
}

// isCluster reports whether data is a mapping with a top-level cluster:
// key: a cluster scenario, whatever else is wrong with it.
func isCluster(data []byte) bool {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return false
	}
	doc := root.Content[0]
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == "cluster" {
			return true
		}
	}
	return false
}

// ParseCluster decodes and validates a cluster scenario; name is how
// errors name the file, and readProfile reads a latency profile named
// relative to it.
func ParseCluster(name string, data []byte, readProfile func(rel string) ([]byte, error)) (*ClusterScenario, error) {
	if !isCluster(data) {
		return nil, &Error{Fields: []FieldError{{Where: name, Path: "cluster",
			Msg: "missing: a cluster scenario has a cluster: section (a file without one is a one-node scenario: batchd sim FILE)"}}}
	}
	s := clusterDefaults()
	lines, err := schema.Decode(name, data, &s)
	if err != nil {
		return nil, err
	}
	s.file, s.lines = name, lines
	if err := s.validate(readProfile); err != nil {
		return nil, err
	}
	return &s, nil
}

// validate checks the decoded scenario, resolves its node references and
// parses its faults and expectations.
func (s *ClusterScenario) validate(readProfile func(string) ([]byte, error)) error {
	v := &schema.Validator{Src: schema.Sources(s.file, s.lines), Default: s.file}
	if !nameRE.MatchString(s.Name) {
		v.Bad("name", "%q: want lowercase letters, digits and dashes", s.Name)
	}
	c := &s.Cluster
	v.IntIn("cluster.nodes", c.Nodes, 1, cluster.MaxNodes)
	v.IntIn("cluster.devices_per_node", c.DevicesPerNode, 0, cluster.MaxDevicesPerNode)
	v.IntIn("cluster.devices", c.Devices, 0, max(c.Nodes, 1)*cluster.MaxDevicesPerNode)
	if c.Devices == 0 && c.DevicesPerNode == 0 {
		v.Bad("cluster", "no devices: give devices_per_node or devices")
	}
	v.DurIn("cluster.grace", c.Grace, 0, time.Minute)
	v.DurIn("cluster.link.latency", c.Link.Latency, 0, time.Second)
	v.DurIn("cluster.link.jitter", c.Link.Jitter, 0, time.Second)
	if !(c.Link.Loss >= 0 && c.Link.Loss < 1) {
		v.Bad("cluster.link.loss", "%v: want a chance in [0, 1)", c.Link.Loss)
	}
	m := c.Membership
	v.DurIn("cluster.membership.probe_interval", m.ProbeInterval, time.Millisecond, time.Minute)
	v.IntIn("cluster.membership.indirect_probes", m.IndirectProbes, 0, 16)
	v.Finite("cluster.membership.suspicion_mult", m.SuspicionMult, 1)
	if m.SuspicionMult > 100 {
		v.Bad("cluster.membership.suspicion_mult", "%v: at most 100", m.SuspicionMult)
	}
	v.DurIn("cluster.membership.gossip_interval", m.GossipInterval, time.Millisecond, time.Minute)
	v.IntIn("cluster.membership.gossip_fanout", m.GossipFanout, 1, 16)
	v.IntIn("cluster.membership.retransmit_mult", m.RetransmitMult, 1, 100)
	v.DurIn("cluster.membership.gossip_to_the_dead", m.GossipToTheDead, 0, time.Hour)
	v.DurIn("cluster.membership.push_pull_interval", m.PushPullInterval, time.Millisecond, time.Hour)
	v.DurIn("cluster.membership.reconnect_interval", m.ReconnectInterval, time.Millisecond, time.Hour)
	v.DurIn("cluster.membership.leave_grace", m.LeaveGrace, 0, time.Minute)

	s.latency = latencyModel(v, "devices.latency", s.Devices.Latency, readProfile)
	s.Devices.Supervision.Check(v, "devices")
	s.Policy.Check(v, "policy")

	t := &s.Traffic
	v.Finite("traffic.rate", t.Rate, 0)
	if t.Rate > 1e7 {
		v.Bad("traffic.rate", "%v: at most 1e7", t.Rate)
	}
	v.DurIn("traffic.duration", t.Duration, time.Millisecond, cluster.MaxDuration)
	v.DurIn("traffic.drain", t.Drain, 0, cluster.MaxDuration)
	if len(t.Models) == 0 {
		t.Models = []string{"m"}
	}
	if len(t.Models) > ClusterModelsLimit {
		v.Bad("traffic.models", "%d models: at most %d", len(t.Models), ClusterModelsLimit)
	}
	seen := map[string]bool{}
	for i, name := range t.Models {
		if name == "" || seen[name] || strings.ContainsAny(name, " ,()+|@") {
			v.Bad(fmt.Sprintf("traffic.models[%d]", i), "%q: empty, repeated, or holds one of ' ,()+|@'", name)
		}
		seen[name] = true
	}

	s.names = nil
	for i := range max(c.Nodes, 0) {
		s.names = append(s.names, cluster.NodeName(i))
	}
	s.validateFaults(v)
	if len(s.Expect) > ExpectLimit {
		v.Bad("expect", "%d checks: at most %d", len(s.Expect), ExpectLimit)
	}
	s.checks = nil
	for i, e := range s.Expect {
		p := fmt.Sprintf("expect[%d]", i)
		c, err := s.parseCheck(e)
		if err != nil {
			v.Bad(p, "%q: %v", e, err)
			continue
		}
		c.Line = s.lines[p]
		s.checks = append(s.checks, c)
	}
	if err := v.Err(); err != nil {
		return err
	}
	// The simulator's own checks are the backstop.
	cfg, err := s.ClusterConfig(s.Seed)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return &Error{Fields: []FieldError{{Where: s.file, Path: "(scenario)", Msg: err.Error()}}}
	}
	return nil
}

// nodeRefRE matches a node reference by model: owner(MODEL) or
// nonowner(MODEL).
var nodeRefRE = regexp.MustCompile(`\b(non)?owner\(([^()]*)\)`)

// resolveNodes replaces the node references of text by node names.
func (s *ClusterScenario) resolveNodes(text string) (string, error) {
	var bad error
	out := nodeRefRE.ReplaceAllStringFunc(text, func(ref string) string {
		m := nodeRefRE.FindStringSubmatch(ref)
		name, err := s.nodeOf(m[1] == "non", m[2])
		if err != nil && bad == nil {
			bad = err
		}
		return name
	})
	return out, bad
}

// nodeOf is the owner of model in the healthy cluster, or the first node
// by name that is not.
func (s *ClusterScenario) nodeOf(non bool, model string) (string, error) {
	if !slices.Contains(s.Traffic.Models, model) {
		return "", fmt.Errorf("owner(%s): no model %q in traffic.models %v", model, model, s.Traffic.Models)
	}
	owner, ok := member.Owner(model, s.names)
	if !ok {
		return "", fmt.Errorf("owner(%s): no nodes", model)
	}
	if !non {
		return owner, nil
	}
	for _, n := range s.names {
		if n != owner {
			return n, nil
		}
	}
	return "", fmt.Errorf("nonowner(%s): one node only", model)
}

// validateFaults resolves and parses the faults.
func (s *ClusterScenario) validateFaults(v *schema.Validator) {
	if len(s.Faults) > cluster.FaultsLimit {
		v.Bad("faults", "%d faults: at most %d", len(s.Faults), cluster.FaultsLimit)
		return
	}
	s.faults = nil
	end := s.Traffic.Duration + s.Traffic.Drain
	for i, text := range s.Faults {
		p := fmt.Sprintf("faults[%d]", i)
		if strings.Contains(text, ",") {
			v.Bad(p, "%q: one fault an entry", text)
			continue
		}
		spec, err := s.resolveNodes(strings.TrimSpace(text))
		if err != nil {
			v.Bad(p, "%q: %v", text, err)
			continue
		}
		evs, err := cluster.ParseFaults(spec)
		if err != nil || len(evs) != 1 {
			v.Bad(p, "%q: %v", text, err)
			continue
		}
		e := evs[0]
		kind, _, _ := strings.Cut(spec, ":")
		f := fault{spec: spec, kind: kind, at: e.At}
		if e.Node != "" {
			f.nodes = []string{e.Node}
		}
		f.nodes = append(append(f.nodes, e.A...), e.B...)
		for _, n := range f.nodes {
			if !slices.Contains(s.names, n) {
				v.Bad(p, "%q: no node %q (the nodes are n000 to %s)", text, n, cluster.NodeName(len(s.names)-1))
			}
		}
		if len(e.A) > 0 {
			for _, a := range e.A {
				if slices.Contains(e.B, a) {
					v.Bad(p, "%q: node %q on both sides", text, a)
				}
			}
		}
		if e.At >= end || e.Until > end {
			v.Bad(p, "%q: after the run's end (traffic.duration + traffic.drain: %v)", text, end)
		}
		s.faults = append(s.faults, f)
	}
}

// ClusterConfig returns the cluster simulator's configuration for the
// scenario with the given master seed (s.Seed for its own); the caller
// may change it (batchd sim-cluster's flags do) before cluster.Run.
func (s *ClusterScenario) ClusterConfig(seed uint64) (cluster.Config, error) {
	cfg := cluster.DefaultConfig()
	cfg.Seed = seed
	c := s.Cluster
	cfg.Nodes, cfg.DevicesPerNode, cfg.Devices, cfg.PerNode = c.Nodes, c.DevicesPerNode, c.Devices, c.PerNode
	cfg.Grace = c.Grace
	cfg.Link = cluster.LinkConfig{Latency: c.Link.Latency, Jitter: c.Link.Jitter, Loss: c.Link.Loss}
	m := c.Membership
	sw := &cfg.SWIM
	sw.ProbeInterval, sw.IndirectProbes, sw.SuspicionMult = m.ProbeInterval, m.IndirectProbes, m.SuspicionMult
	sw.GossipInterval, sw.GossipFanout, sw.RetransmitMult = m.GossipInterval, m.GossipFanout, m.RetransmitMult
	sw.GossipToTheDead, sw.PushPullInterval, sw.ReconnectInterval = m.GossipToTheDead, m.PushPullInterval, m.ReconnectInterval
	sw.LeaveGrace = m.LeaveGrace

	s.Policy.Apply(&cfg.Batcher)
	devices := c.Devices
	if devices == 0 {
		devices = c.Nodes * c.DevicesPerNode
	}
	// A fleet larger than the policy's bound is the scenario's to ask for.
	cfg.Batcher.DevicesMax = max(cfg.Batcher.DevicesMax, devices)
	cfg.Batcher.Latency = s.latency
	s.Devices.Supervision.Apply(&cfg.Device)
	cfg.Device.Latency = s.latency

	t := s.Traffic
	cfg.Rate, cfg.Duration, cfg.Drain = t.Rate, t.Duration, t.Drain
	cfg.Models = slices.Clone(t.Models)
	specs := make([]string, len(s.faults))
	for i, f := range s.faults {
		specs[i] = f.spec
	}
	events, err := cluster.ParseFaults(strings.Join(specs, ","))
	if err != nil {
		return cluster.Config{}, fmt.Errorf("cluster scenario %s: %w", s.Name, err)
	}
	cfg.Events = events
	return cfg, nil
}
