// Package swim is a deterministic model of SWIM membership (as
// hashicorp/memberlist and serf run it) for the simulator: given a
// cluster's true events (node crash, restart and graceful leave at given
// times; symmetric or one-way partitions between sets of nodes from one
// time to another), its parameters and a seed, Run produces, for every
// observing node, the timeline of membership messages (member.Update) its
// actors would receive, with when each arrives. The same Config (seed
// included) always gives the same output.
//
// What it models, per node, on virtual time:
//
//   - Probing: every ProbeInterval a node probes the next member of its own
//     shuffled round-robin list of live members. The direct ping and its ack
//     each survive the link with probability 1-Loss; failing that, the k =
//     IndirectProbes helpers each try ping-req, ping, ack, ack (four
//     messages). Partitions and crashed nodes drop everything. With no ack
//     by the end of the probe interval, the prober declares the target
//     suspect at the incarnation it holds.
//   - Suspicion: every node that accepts a suspicion starts its own timer of
//     SuspicionMult × max(1, log10 n) × ProbeInterval (n: its live members,
//     memberlist's formula) and declares the node dead when it fires, unless
//     a higher incarnation came first. A node that hears itself suspected or
//     declared dead refutes by raising its incarnation (alive, inc+1).
//   - Dissemination: piggybacked gossip, as memberlist does it. Each
//     update a node accepts goes into its broadcast queue (a newer update
//     about the same node replaces an older one) and is sent in up to
//     RetransmitMult × ceil(log10(n+1)) packets; every GossipInterval a node
//     with something queued sends one packet to each of GossipFanout random
//     members (live ones, and dead ones for GossipToTheDead after their
//     death). A packet is lost with probability Loss and takes Latency.
//     So an update reaches everyone in O(log n) gossip rounds, by the
//     epidemic itself, not by a formula.
//   - Anti-entropy: every PushPullInterval a node exchanges its whole state
//     with a random live member (over TCP: no loss, but partitions apply);
//     as in memberlist's merge, a node the peer holds dead is only
//     suspected by the receiver. Serf's reconnect: every ReconnectInterval
//     a node tries one member it holds dead (round robin), so the two sides
//     of a healed partition merge (memberlist alone would leave them split:
//     it neither probes nor push-pulls a dead member).
//   - Crash, restart, leave: a crashed node stops and loses its view; a
//     restarted one starts with a fresh view, an incarnation above any of
//     its old life's (memberlist gets there by refuting its own death, which
//     it learns in the join's push-pull; the model skips that step) and joins
//     through one reachable member (a push-pull), trying the configured
//     nodes in turn until one answers. A leaving node gossips Left and stops
//     after LeaveGrace.
//
// What it leaves out: Lifeguard (no local health multiplier, no NACKs, no
// suspicion timeout that starts longer and shrinks with confirmations; the
// timeout here is memberlist's minimum, so real detection can be slower),
// packet size limits on piggybacked updates, per-message latency spread
// (every packet takes Latency; a probe's outcome is decided when it is
// sent), TCP fallback probes, and a node's metadata. Push-pull state is the
// sender's at the moment of the exchange.
//
// The model is no actor: it computes timelines up front, and the cluster
// simulator, still to come, delivers them to each node's actors.
// It keeps its own random streams (derived from Config.Seed) and imports
// nothing of sim, so sim can import it.
//
// Imported by: sim/cluster (the cluster simulator, which delivers each
// node's timeline to its actors). It imports actors/member and nothing
// else of batchd.
package swim
