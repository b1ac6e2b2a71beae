package swim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/batchd/batchd/actors/member"
)

// EventKind is what happens to the cluster at an Event.
type EventKind uint8

const (
	// Crash: Node stops at once (a no-op if it is down).
	Crash EventKind = iota + 1
	// Restart: Node starts again under its name with a new incarnation (a
	// no-op if it is up, leaving included).
	Restart
	// Leave: Node leaves gracefully: it gossips Left and stops after
	// LeaveGrace (a no-op if it is down or leaving).
	Leave
	// Partition: from At until Until, every packet from a node of A to a
	// node of B is dropped, and from B to A too unless OneWay.
	Partition
)

var eventNames = [...]string{"", "crash", "restart", "leave", "partition"}

func (k EventKind) String() string {
	if k >= Crash && k <= Partition {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one true event of the cluster.
type Event struct {
	At   time.Duration
	Kind EventKind
	// Node is the node that crashes, restarts or leaves.
	Node string
	// A, B, Until and OneWay describe a partition.
	A, B   []string
	Until  time.Duration
	OneWay bool
}

// Limits.
const (
	// MaxNodes bounds Config.Nodes (a member.View's default limit).
	MaxNodes = member.DefaultLimit
	// MaxEvents bounds Config.Events.
	MaxEvents = 10_000
	// MaxHorizon bounds Config.Until.
	MaxHorizon = 24 * time.Hour
	// MaxFanout bounds IndirectProbes and GossipFanout.
	MaxFanout = 16
	// DefaultMaxDeliveries is Config.MaxDeliveries when it is zero.
	DefaultMaxDeliveries = 10_000_000
)

// Config is one run of the model.
type Config struct {
	// Nodes are the cluster's node names, distinct. All are up at time 0,
	// at incarnation 1, and every node's view holds all of them alive.
	Nodes []string
	// Seed makes the run: the same Config gives the same Result.
	Seed uint64
	// Until is the horizon: nothing happens from Until on.
	Until time.Duration
	// Events are the true events (any order; ties keep their order).
	Events []Event

	// ProbeInterval is the protocol period: one probe per node per
	// interval; a probe without an ack by its end raises a suspicion.
	ProbeInterval time.Duration
	// IndirectProbes is k, the helpers asked to ping-req a target that did
	// not answer the direct ping.
	IndirectProbes int
	// SuspicionMult sets the suspicion timeout: SuspicionMult ×
	// max(1, log10 n) × ProbeInterval for n live members.
	SuspicionMult float64
	// GossipInterval, GossipFanout, RetransmitMult: dissemination (see the
	// package doc).
	GossipInterval time.Duration
	GossipFanout   int
	RetransmitMult int
	// GossipToTheDead is how long a node keeps gossiping to a member after
	// it died (so a falsely dead node hears of it and refutes).
	GossipToTheDead time.Duration
	// PushPullInterval is the full state exchange with a random member.
	PushPullInterval time.Duration
	// ReconnectInterval is serf's reconnect to a member held dead.
	ReconnectInterval time.Duration
	// LeaveGrace is how long a leaving node keeps gossiping its Left.
	LeaveGrace time.Duration
	// Latency is every packet's one-way delay.
	Latency time.Duration
	// Loss is each UDP packet's chance of being dropped, in [0, 1).
	Loss float64
	// LossUntil ends the loss: packets sent from then on arrive (zero:
	// loss all run long).
	LossUntil time.Duration
	// MaxDeliveries bounds Result.Deliveries (DefaultMaxDeliveries if
	// zero); Run fails past it.
	MaxDeliveries int
}

// DefaultConfig returns memberlist's LAN defaults (serf's reconnect
// interval) for nodes, with a 1 ms latency, no loss and a 10-minute
// horizon.
func DefaultConfig(nodes []string) Config {
	return Config{
		Nodes:             nodes,
		Until:             10 * time.Minute,
		ProbeInterval:     time.Second,
		IndirectProbes:    3,
		SuspicionMult:     4,
		GossipInterval:    200 * time.Millisecond,
		GossipFanout:      3,
		RetransmitMult:    4,
		GossipToTheDead:   30 * time.Second,
		PushPullInterval:  30 * time.Second,
		ReconnectInterval: 30 * time.Second,
		LeaveGrace:        time.Second,
		Latency:           time.Millisecond,
	}
}

// SuspicionTimeout is the suspicion timeout a node with n live members
// uses.
func (c Config) SuspicionTimeout(n int) time.Duration {
	f := math.Max(1, math.Log10(float64(max(n, 1))))
	return time.Duration(c.SuspicionMult * f * float64(c.ProbeInterval))
}

// retransmits is how many packets carry one update (memberlist's
// retransmitLimit).
func (c Config) retransmits(n int) int {
	return c.RetransmitMult * int(math.Ceil(math.Log10(float64(n+1))))
}

// DetectionBound is how long after a crash every node that stays up holds
// the crashed node dead, at the latest: its own round-robin reaches the
// node within two cycles (2n probes), the probe's interval ends, the
// suspicion times out; twice that, for a refutation the node sent just
// before it crashed that comes back and restarts the count once.
func (c Config) DetectionBound() time.Duration {
	n := len(c.Nodes)
	once := time.Duration(2*n+1)*c.ProbeInterval + c.SuspicionTimeout(n) + c.Latency
	return 2 * once
}

// SettleBound is how long after the last fault (the last event, the end
// of the last partition, the end of loss) every node that is up holds
// exactly the up nodes live, at their current incarnations: the crashed
// ones detected (DetectionBound); each side of a healed partition has
// reconnected to every member it held dead twice (once to make it refute,
// once to learn the refutation) and gossiped it; a restarted node's join
// retries have gone round the configured nodes.
func (c Config) SettleBound() time.Duration {
	n := time.Duration(len(c.Nodes))
	return c.DetectionBound() + (2*n+2)*c.ReconnectInterval + (n+2)*c.PushPullInterval +
		c.SuspicionTimeout(len(c.Nodes)) + 10*c.GossipInterval
}

// QuietAt is when the last fault ends: the last event, the end of the last
// partition, the end of loss (if any).
func (c Config) QuietAt() time.Duration {
	var q time.Duration
	for _, e := range c.Events {
		q = max(q, e.At)
		if e.Kind == Partition {
			q = max(q, e.Until)
		}
	}
	if c.Loss > 0 {
		if c.LossUntil == 0 {
			return c.Until
		}
		q = max(q, c.LossUntil)
	}
	return q
}

var errConfig = errors.New("swim: invalid config")

func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errConfig, fmt.Sprintf(format, args...))
	}
	if len(c.Nodes) == 0 || len(c.Nodes) > MaxNodes {
		return bad("%d nodes (want 1 to %d)", len(c.Nodes), MaxNodes)
	}
	sorted := slices.Sorted(slices.Values(c.Nodes))
	for i, n := range sorted {
		if n == "" || len(n) > member.MaxNameLen {
			return bad("node name %q (want 1 to %d bytes)", n, member.MaxNameLen)
		}
		if i > 0 && sorted[i-1] == n {
			return bad("node %q twice", n)
		}
	}
	if c.Until <= 0 || c.Until > MaxHorizon {
		return bad("until %v (want up to %v)", c.Until, MaxHorizon)
	}
	if len(c.Events) > MaxEvents {
		return bad("%d events (at most %d)", len(c.Events), MaxEvents)
	}
	if min(c.ProbeInterval, c.GossipInterval, c.PushPullInterval, c.ReconnectInterval) <= 0 {
		return bad("probe %v, gossip %v, push-pull %v, reconnect %v intervals (want all > 0)",
			c.ProbeInterval, c.GossipInterval, c.PushPullInterval, c.ReconnectInterval)
	}
	if c.Latency < 0 || c.LeaveGrace < 0 || c.GossipToTheDead < 0 || c.LossUntil < 0 {
		return bad("negative latency, leave grace, gossip-to-the-dead or loss-until")
	}
	if c.IndirectProbes < 0 || c.IndirectProbes > MaxFanout || c.GossipFanout < 1 || c.GossipFanout > MaxFanout {
		return bad("indirect probes %d, gossip fanout %d (want 0..%d and 1..%d)", c.IndirectProbes, c.GossipFanout, MaxFanout, MaxFanout)
	}
	if c.SuspicionMult <= 0 || c.RetransmitMult < 1 {
		return bad("suspicion mult %v, retransmit mult %d (want > 0 and >= 1)", c.SuspicionMult, c.RetransmitMult)
	}
	if !(c.Loss >= 0 && c.Loss < 1) {
		return bad("loss %v (want [0, 1))", c.Loss)
	}
	if c.MaxDeliveries < 0 {
		return bad("max deliveries %d", c.MaxDeliveries)
	}
	for i, e := range c.Events {
		if e.At < 0 {
			return bad("event %d at %v", i, e.At)
		}
		switch e.Kind {
		case Crash, Restart, Leave:
			if !slices.Contains(c.Nodes, e.Node) {
				return bad("event %d (%v): unknown node %q", i, e.Kind, e.Node)
			}
		case Partition:
			if len(e.A) == 0 || len(e.B) == 0 || e.Until <= e.At {
				return bad("event %d: partition needs two sides and until > at", i)
			}
			for _, n := range slices.Concat(e.A, e.B) {
				if !slices.Contains(c.Nodes, n) {
					return bad("event %d: partition names unknown node %q", i, n)
				}
			}
		default:
			return bad("event %d: kind %v", i, e.Kind)
		}
	}
	return nil
}
