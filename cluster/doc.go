// Package cluster is the live cluster's plumbing: membership with
// hashicorp/memberlist served as the actors' membership messages
// (member.Update), and each node's metadata (its incarnation, data-plane
// address, devices and warm models). The data plane (messages between
// nodes' actors) is in cluster/transport, its schema in cluster/wire.
//
// Why the incarnation is the node's own: memberlist keeps an incarnation
// per node but does not expose it, and raises it when a node refutes a
// suspicion as well as when it restarts. The actors need to tell a restart
// (everything the node held is gone) from a refutation (nothing is), so a
// node names each of its lives with a boot incarnation in its metadata
// (Config.Incarnation, which grows across restarts), and Updates carry it.
// memberlist does not report suspicion to its event delegate either, so
// the actors see alive, dead and left from it, never suspect. A death is
// final for an incarnation in every view, so a node the others declared
// dead while it lived (a pause, a partition that healed), which
// memberlist brings back by refuting its death, takes a new life at a
// higher incarnation: the others tell it, when they see it alive again
// at the incarnation they hold dead (see Membership).
//
// Imported by: engine/server (a node of a cluster: batchd serve --node
// --join; its tests, and this package's, run real memberlist nodes on
// loopback).
package cluster
