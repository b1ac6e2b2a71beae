// Package member is cluster membership as the actors see it: plain-data
// messages (Update: a node is alive, suspect, dead or has left, at an
// incarnation), a View that applies them with SWIM's precedence rules, and
// the key ownership the live members imply (rendezvous hashing, Owner).
//
// Why messages: the actors never ask a membership library anything. The
// runtime feeds them Updates (live: from hashicorp/memberlist; in the
// simulator: from the seeded SWIM model of package sim/swim) and each actor
// keeps the View it needs, so the same actors run on either.
//
// The precedence rules form a lattice: every update is a point (incarnation,
// kind) with alive < suspect < dead < left at one incarnation, and a View
// keeps, per node, the greatest point it has been given. So a higher
// incarnation overrides anything lower; suspect overrides alive at the same
// incarnation; dead and left are final for their incarnation; a node that
// returns under the same name must carry a higher incarnation, and nothing
// of its old incarnations is accepted afterwards. Because the rule is a
// maximum, a View ends in the same state whatever order the same updates
// arrive in (TestPropertyViewOrderFree).
//
// It is pure, as package actors is (actors' TestPurity checks it too), and
// bounded: a View holds at most its limit of node names (DefaultLimit),
// names are at most MaxNameLen bytes.
//
// Imported by: actors (the front, the batcher and the device keep Views),
// sim/swim (the simulator's SWIM model, which produces the Updates),
// sim/cluster (the cluster simulator), cluster (memberlist's events as
// Updates), cluster/transport (it follows membership), cluster/wire
// (Updates on the wire), engine/server (a node's view of its cluster, for
// GET /v1/cluster), scenarios (a cluster scenario's owner(MODEL), the
// node that owns a model), engine (a node's view of itself, for its
// fronts). It imports nothing of batchd.
package member
