package config

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"time"
)

// Cluster is the node's place in a cluster of batchd nodes: its name and
// how it finds the others (hashicorp/memberlist: gossip over UDP and TCP).
// With no node name the server is a single node.
type Cluster struct {
	// Node is the node's name, unique in the cluster and the same across
	// its restarts (a host name, a StatefulSet pod's name). Empty: no
	// cluster.
	Node string `yaml:"node"`
	// Bind is where the node gossips (UDP and TCP), host:port; port 0
	// picks a free one.
	Bind string `yaml:"bind"`
	// Join lists members to join at start, host:port or a DNS name (a
	// Kubernetes headless service resolves to every pod). Empty: the
	// first node of a new cluster.
	Join []string `yaml:"join"`
	// SecretKeyEnv names the environment variable that holds the gossip
	// key, base64 of 16, 24 or 32 bytes: with it, gossip is encrypted and
	// a node without the key can neither join nor inject. Empty: gossip
	// in the clear (a trusted network only).
	SecretKeyEnv string `yaml:"secret_key_env"`
	// ProbeInterval, ProbeTimeout and SuspicionMult are the failure
	// detector's. The defaults, 300 ms, 150 ms and 3, declare a dead node
	// in about 1.4 s (p99 about 2.1 s) in a cluster of three; memberlist's
	// LAN settings (1 s, 500 ms, 4) take about 5.6 s. They raised no
	// false death in 10 minutes at full load on a 2-core machine, and a
	// node falsely declared dead takes a new life and comes back by
	// itself (cluster.Membership).
	ProbeInterval time.Duration `yaml:"probe_interval"`
	ProbeTimeout  time.Duration `yaml:"probe_timeout"`
	SuspicionMult int           `yaml:"suspicion_mult"`
	// LeaveTimeout bounds the graceful leave on shutdown: telling the
	// others the node is leaving, so they see it Left, not Dead.
	LeaveTimeout time.Duration `yaml:"leave_timeout"`
	// HandoverGrace is how long a node that is stopping waits, once it
	// has told the others it is leaving (and they move its models), before
	// it drains: the time for the news to reach every front. Past it, the
	// node waits on while the others' requests still come to it (until
	// they have stopped for 100 ms, 10 s at most).
	HandoverGrace time.Duration `yaml:"handover_grace"`
	// DataAddr is where the node's data plane (cluster/transport) listens
	// for the other nodes' actor messages, host:port (port 0 picks a free
	// one): with it the engine batches across nodes, each model at its
	// owner. A host of 0.0.0.0 or :: is advertised as the node's gossip
	// address. Empty: membership only, every node batching its own
	// requests. It needs the gossip key (secret_key_env), which
	// authenticates the data plane.
	DataAddr string `yaml:"data_addr"`
}

// Limits on the cluster section.
const (
	clusterJoinMax    = 64 // cluster.JoinMax
	clusterNodeLenMax = 128
)

// nodeName is what a node name may be: a DNS label's characters and dots,
// so it is safe in logs, metrics labels and URLs.
var nodeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// envName is what an environment variable's name may be.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func defaultCluster() Cluster {
	return Cluster{
		Bind:          "0.0.0.0:7946",
		Join:          []string{},
		ProbeInterval: 300 * time.Millisecond,
		ProbeTimeout:  150 * time.Millisecond,
		SuspicionMult: 3,
		LeaveTimeout:  5 * time.Second,
		HandoverGrace: time.Second,
	}
}

// Clustered reports whether the server runs as a node of a cluster.
func (f *File) Clustered() bool { return f.Cluster.Node != "" }

// GossipKey is the gossip key from the variable cluster.secret_key_env
// names: base64 of 16, 24 or 32 bytes (AES-128, -192 or -256); nil when
// none is named.
func (f *File) GossipKey() ([]byte, error) {
	env := f.Cluster.SecretKeyEnv
	if env == "" {
		return nil, nil
	}
	v := os.Getenv(env)
	if v == "" {
		return nil, fmt.Errorf("$%s is empty or unset", env)
	}
	key, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("$%s is not base64: %w", env, err)
	}
	if n := len(key); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("$%s holds %d bytes: want 16, 24 or 32 (AES-128, -192, -256)", env, n)
	}
	return key, nil
}

func (v *validator) cluster() {
	c := v.f.Cluster
	if c.Node == "" {
		if len(c.Join) > 0 {
			v.Bad("cluster.join", "needs cluster.node (--node): the node's name in the cluster")
		}
		return
	}
	if len(c.Node) > clusterNodeLenMax || !nodeName.MatchString(c.Node) {
		v.Bad("cluster.node", "%q: want 1 to %d letters, digits, '.', '_' or '-', not starting with a symbol", c.Node, clusterNodeLenMax)
	}
	if _, port, err := net.SplitHostPort(c.Bind); err != nil {
		v.Bad("cluster.bind", "%q: want host:port (0.0.0.0:7946): %v", c.Bind, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.Bad("cluster.bind", "%q: port %q: want 0 to 65535", c.Bind, port)
	}
	if len(c.Join) > clusterJoinMax {
		v.Bad("cluster.join", "%d addresses: want at most %d", len(c.Join), clusterJoinMax)
	}
	for i, a := range c.Join {
		if a == "" || len(a) > 255 {
			v.Bad("cluster.join["+strconv.Itoa(i)+"]", "%q: want host:port or a DNS name", a)
		}
	}
	if c.SecretKeyEnv != "" && !envName.MatchString(c.SecretKeyEnv) {
		v.Bad("cluster.secret_key_env", "%q: not an environment variable's name", c.SecretKeyEnv)
	} else if _, err := v.f.GossipKey(); err != nil {
		v.Bad("cluster.secret_key_env", "%v", err)
	}
	v.DurIn("cluster.probe_interval", c.ProbeInterval, 10*time.Millisecond, time.Minute)
	v.DurIn("cluster.probe_timeout", c.ProbeTimeout, time.Millisecond, c.ProbeInterval)
	v.IntIn("cluster.suspicion_mult", c.SuspicionMult, 1, 100)
	v.DurIn("cluster.leave_timeout", c.LeaveTimeout, 0, time.Minute)
	v.DurIn("cluster.handover_grace", c.HandoverGrace, 0, time.Minute)
	if c.DataAddr != "" {
		if _, port, err := net.SplitHostPort(c.DataAddr); err != nil {
			v.Bad("cluster.data_addr", "%q: want host:port (0.0.0.0:7947): %v", c.DataAddr, err)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			v.Bad("cluster.data_addr", "%q: port %q: want 0 to 65535", c.DataAddr, port)
		}
		if c.SecretKeyEnv == "" {
			v.Bad("cluster.data_addr", "needs cluster.secret_key_env: the gossip key authenticates the data plane")
		}
	}
}
