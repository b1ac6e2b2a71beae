// Package transport is the cluster's data plane: it carries actor
// messages between nodes over gRPC, one long-lived bidirectional stream
// per ordered pair of nodes (the sender dials the peer's data-plane
// address, its memberlist Meta.DataAddr), in the schema of cluster/wire.
//
// Sending. Send(from, to, msg) never blocks: the message joins its peer's
// bounded queue, and the peer's one writer goroutine writes what is queued
// in frames of up to Config.Batch messages (a busy link shares one write
// among many messages). A message comes back to its sender as
// actors.Undeliverable{To, Msg}, through Deliver, when its node is unknown
// (not, or no longer, a member: Apply follows membership), when its peer
// is unreachable (the last connection attempt failed or the stream broke:
// answered in Send itself, so actors re-route at once), when the peer's
// queue is full, and for what was queued when a stream broke or a
// connection attempt failed. As on the simulator's lossy links, messages
// already written to a stream that then breaks may be lost without a word.
// Three exceptions keep a reply to a live node from coming back when only
// membership lags behind the data plane (a node's address and life carry
// no incarnation, so a reply lost there waits for its front's guard).
// A node whose own stream into this node is up, while none from here is
// (membership has not yet told its new life's address, or the stream is
// being re-established), is alive: a message for it is held, up to
// Config.Queue of them, each for up to Config.Hold, and goes out first
// once its stream is up, or comes back Undeliverable then. And a node
// membership declares dead while its streams are up both ways (as
// memberlist does to a node's new life with a stale report of its
// previous life's death, until the node refutes it) keeps its stream
// until it breaks or the node is alive again. A Reply is held so for
// any node without a stream from here, unknown or declared dead
// included, and so is one that was queued for a stream that broke or
// was still being set up when membership removed the node (a restarted
// node's new life declared dead by a stale report, then alive again: a
// third node's devices answer its fronts meanwhile): its front
// submitted the request, so its node lived lately, and a Reply that
// comes back has no one to reach (a lost one costs its front's guard,
// SLO + grace). Submits take none of these: to a node not up, or held
// dead, they come back at once, so fronts re-route.
// Messages from one sender to one node arrive in the order sent (across a
// reconnect, what the broken stream had delivered comes first unless the
// receiver still reads it while the new one starts). Messages
// for the node itself never need the transport (the runtime keeps them);
// Send hands them to Deliver if it gets them.
//
// Reconnecting. After a failure a peer's writer waits a backoff that
// doubles from Config.BackoffMin to Config.BackoffMax, each wait drawn in
// [d/2, d), and dials again, until membership removes the peer. A
// connection attempt, handshake included, is bounded by DialTimeout.
//
// A broken stream. When a peer's stream, once up, breaks (the peer died,
// or the link was cut), Config.OnDown tells the node: what was written
// and not yet read may be lost, so the engine's fronts resubmit at once
// what they had placed there, without waiting for membership to declare
// the peer dead (or for ever, when only the data plane failed).
//
// Partitions (a fault knob for tests: loopback cannot be cut). Cut
// partitions the node's data plane from some peers or all: their streams,
// both ways, break at once (so the peers see OnDown too), Send answers
// Undeliverable, connections are refused both ways and a frame from a cut
// peer is dropped; Cut(false) heals. Membership, on memberlist's own
// sockets, is not cut.
//
// Authentication: the cluster's gossip key, not mTLS. Every node already
// holds the gossip key (memberlist refuses a node without it), so a key
// derived from it (HMAC-SHA256 with a fixed label) authenticates the data
// plane with nothing more to issue, rotate or mount. The handshake is a
// challenge-response: each side sends a 32-byte nonce and proves the key
// with an HMAC over both nonces and both names (the server first, so a
// client never talks to an impostor), and the session key derived from
// the same proves every Data frame (HMAC over its sequence number and
// payload). So a client without the key is refused, a recorded stream
// cannot be replayed (fresh nonces), and a frame cannot be injected,
// reordered or replayed into an established stream, even on a plain TCP
// link. The key does not hide the messages: TLS (Config.TLS, TLS 1.3,
// mutual with a CA file) encrypts them, and the key check still runs
// under it. A node's name is proven only to be a member's: members trust
// each other.
//
// Bounds: the queue per peer (Config.Queue), the peers (PeersMax), a
// frame's size (wire.FrameMax, also gRPC's receive limit), the streams
// per client connection, the handshake's time on the server
// (Config.HandshakeTimeout); idle streams are kept alive and a vanished peer
// found by gRPC keepalives (10 s + 2 s; membership usually declares it
// dead first).
//
// Imported by: engine/server (a node's data plane, with cluster.data_addr:
// the engine's runtime sends through it, and it delivers into the engine;
// its tests run real transports on loopback).
package transport
