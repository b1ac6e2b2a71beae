package member

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Kind is what an Update says about a node.
type Kind uint8

// The kinds, in precedence order at one incarnation: a greater kind
// overrides a lesser one of the same incarnation.
const (
	// Alive: the node joined, or refuted a suspicion by raising its
	// incarnation.
	Alive Kind = iota + 1
	// Suspect: a member failed to reach the node; it stays a member (it is
	// live) until it refutes with a higher incarnation or is declared dead.
	Suspect
	// Dead: the suspicion timed out, or the node was found down. Final for
	// its incarnation.
	Dead
	// Left: the node left gracefully. Final for its incarnation.
	Left
)

var kindNames = [...]string{"", "alive", "suspect", "dead", "left"}

func (k Kind) String() string {
	if k >= Alive && k <= Left {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Live reports whether a node in this state counts as a member: alive or
// suspect. A suspect node keeps its keys; moving them on every suspicion
// would turn each false suspicion into a reshuffle.
func (k Kind) Live() bool { return k == Alive || k == Suspect }

// Update is the one membership message: node Node is in state Kind at
// incarnation Inc. It is plain data and can cross a node boundary.
type Update struct {
	Node string
	Inc  uint64
	Kind Kind
	// Models are the models the node holds warm, as JoinModels writes
	// them; empty: any model (the node keeps no warm set). They are the
	// node's for its incarnation, as memberlist's metadata carries them.
	Models string
}

// modelSep separates the names in Update.Models: a model name holds no
// newline (the registry refuses one, as it is a URL path segment).
const modelSep = "\n"

// JoinModels is models as Update.Models holds them: sorted, each once,
// joined by newlines.
func JoinModels(models []string) string {
	s := slices.Clone(models)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), modelSep)
}

// Holds reports whether the node holds model warm (any model, when it
// names none).
func (u Update) Holds(model string) bool {
	if u.Models == "" {
		return true
	}
	for rest := u.Models; rest != ""; {
		name, tail, _ := strings.Cut(rest, modelSep)
		if name == model {
			return true
		}
		rest = tail
	}
	return false
}

// Overrides reports whether u takes precedence over cur, the state a View
// holds for the same node: a higher incarnation, or the same incarnation
// and a greater kind (alive < suspect < dead < left).
func (u Update) Overrides(cur Update) bool {
	if u.Inc != cur.Inc {
		return u.Inc > cur.Inc
	}
	return u.Kind > cur.Kind
}

func (u Update) String() string { return fmt.Sprintf("%s %s@%d", u.Kind, u.Node, u.Inc) }

// Limits.
const (
	// DefaultLimit is the number of node names a View holds when NewView is
	// given no limit: far above the 100-node fleet the cluster is sized for.
	DefaultLimit = 1024
	// MaxLimit bounds any View's limit.
	MaxLimit = 1 << 16
	// MaxNameLen bounds a node name, in bytes.
	MaxNameLen = 255
)

// ErrFull is returned by Apply for a node the View has never seen once it
// holds its limit of names. Dead and departed nodes count: their entries
// are what refuses their old incarnations.
var ErrFull = errors.New("member: view is full")

// Change says what an Apply did.
type Change uint8

const (
	// Ignored: the update did not override what the View holds (stale,
	// duplicate, or from an old incarnation).
	Ignored Change = iota
	// Updated: the node's state or incarnation changed, its liveness did
	// not.
	Updated
	// LiveChanged: the node joined or left the live set; Epoch moved.
	LiveChanged
)

// View is one observer's picture of the cluster: per node name, the
// greatest Update it has applied. Not safe for concurrent use (an actor
// owns it).
type View struct {
	limit   int
	index   map[string]int // name → position in nodes
	nodes   []Update       // in order of first sight
	live    []string       // sorted; replaced, never modified in place
	epoch   uint64
	version uint64
	// owners caches, per model, the owner function over the live members
	// that hold it, as of version ownersAt.
	owners   map[string]Owners
	ownersAt uint64
}

// ownersCacheMax bounds View.owners: past it the cache starts over (an
// open registry may name any number of models).
const ownersCacheMax = 1024

// Owner returns the owner of model: the rendezvous choice (Owners) among
// the live members that hold it warm, or among all the live members when
// none does (any node can load it); false when no member is live. Every
// observer with the same live members and warm sets computes the same
// owner.
func (v *View) Owner(model string) (string, bool) {
	if v.ownersAt != v.version || v.owners == nil || len(v.owners) >= ownersCacheMax {
		v.owners, v.ownersAt = map[string]Owners{}, v.version
	}
	o, ok := v.owners[model]
	if !ok {
		o = NewOwners(v.Holders(model, v.live))
		v.owners[model] = o
	}
	return o.Owner(model)
}

// Holders returns the members of among (live members, say, less some an
// actor avoids) that hold model warm, or among itself when none does: the
// candidates a model's owner is chosen from. A name the View does not
// know holds every model.
func (v *View) Holders(model string, among []string) []string {
	var holders []string
	for _, name := range among {
		if u, ok := v.Get(name); !ok || u.Holds(model) {
			holders = append(holders, name)
		}
	}
	if len(holders) == 0 {
		return among
	}
	return holders
}

// NewView returns an empty View that holds at most limit node names
// (DefaultLimit if limit <= 0; at most MaxLimit).
func NewView(limit int) *View {
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	return &View{limit: limit, index: map[string]int{}}
}

// Apply applies u by the precedence rules (Update.Overrides) and says what
// changed. An invalid update (no node name, a name over MaxNameLen, an
// unknown kind) or a new name past the limit (ErrFull) is an error and
// changes nothing.
func (v *View) Apply(u Update) (Change, error) {
	if u.Node == "" || len(u.Node) > MaxNameLen {
		return Ignored, fmt.Errorf("member: apply %v: node name of %d bytes (want 1 to %d)", u, len(u.Node), MaxNameLen)
	}
	if u.Kind < Alive || u.Kind > Left {
		return Ignored, fmt.Errorf("member: apply %v: unknown kind", u)
	}
	i, ok := v.index[u.Node]
	if !ok {
		if len(v.nodes) >= v.limit {
			return Ignored, fmt.Errorf("member: apply %v: %w (%d names)", u, ErrFull, v.limit)
		}
		v.index[u.Node] = len(v.nodes)
		v.nodes = append(v.nodes, u)
		v.version++
		if u.Kind.Live() {
			v.setLive(u.Node, true)
			return LiveChanged, nil
		}
		return Updated, nil
	}
	cur := v.nodes[i]
	if !u.Overrides(cur) {
		return Ignored, nil
	}
	v.nodes[i] = u
	v.version++
	if u.Kind.Live() != cur.Kind.Live() {
		v.setLive(u.Node, u.Kind.Live())
		return LiveChanged, nil
	}
	return Updated, nil
}

// setLive adds or removes name in a fresh copy of the live list, so a slice
// Live returned earlier stays as it was.
func (v *View) setLive(name string, live bool) {
	at, found := slices.BinarySearch(v.live, name)
	if live == found {
		return
	}
	next := make([]string, 0, len(v.live)+1)
	next = append(next, v.live[:at]...)
	if live {
		next = append(next, name)
	} else {
		at++
	}
	next = append(next, v.live[at:]...)
	v.live = next
	v.epoch++
}

// Live returns the live members (alive or suspect), sorted by name. The
// slice is a snapshot: later Applies never modify it, and the caller must
// not either.
func (v *View) Live() []string { return v.live }

// IsLive reports whether node is a live member.
func (v *View) IsLive(node string) bool {
	u, ok := v.Get(node)
	return ok && u.Kind.Live()
}

// Get returns the state the View holds for node: its kind and incarnation.
func (v *View) Get(node string) (Update, bool) {
	i, ok := v.index[node]
	if !ok {
		return Update{}, false
	}
	return v.nodes[i], true
}

// Members returns every node the View knows, live or not, sorted by name.
func (v *View) Members() []Update {
	out := slices.Clone(v.nodes)
	slices.SortFunc(out, func(a, b Update) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	return out
}

// Len is the number of node names the View holds (live or not).
func (v *View) Len() int { return len(v.nodes) }

// Limit is the most node names the View holds.
func (v *View) Limit() int { return v.limit }

// Epoch changes (grows by one) whenever the live set changes: a node joins
// it or leaves it. Comparing epochs tells an actor whether to recompute
// what depends on the live set (owners).
func (v *View) Epoch() uint64 { return v.epoch }

// Version grows by one whenever any node's state or incarnation changes.
func (v *View) Version() uint64 { return v.version }
