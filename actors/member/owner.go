package member

// Ownership by rendezvous (highest-random-weight) hashing: the owner of a
// key among some members is the member m with the greatest weight
// w(key, m), a hash of both.
//
// Why rendezvous: when a member leaves, only the keys it owned move (each
// to the member with its next-greatest weight), and when one joins, only
// the keys it now wins move to it: 1/N of the keys either way, the least
// any scheme can move. It keeps no ring and no virtual nodes, so it needs
// no state beyond the member list the View already has, and every node
// that holds the same live list computes the same owner. Its cost is
// O(N) hashes per lookup, a few hundred nanoseconds at N = 100 (see
// BenchmarkOwner); a consistent-hash ring is O(log N) but moves keys
// unevenly unless it keeps hundreds of virtual nodes per member.

// Owners computes owners among one list of members: it hashes each member's
// name once. Build one per live set (per View.Epoch).
type Owners struct {
	names  []string
	hashes []uint64
}

// NewOwners returns the owner function over members (no duplicates; order
// does not matter). It keeps members; the caller must not modify it.
func NewOwners(members []string) Owners {
	o := Owners{names: members, hashes: make([]uint64, len(members))}
	for i, m := range members {
		o.hashes[i] = mix(fnv1a(m) ^ 0x5bd1e9955bd1e995)
	}
	return o
}

// Owner returns the member that owns key, or false when there are no
// members. Equal weights (a 2^-64 chance) go to the lesser name, so the
// answer never depends on the members' order.
func (o Owners) Owner(key string) (string, bool) {
	if len(o.names) == 0 {
		return "", false
	}
	kh := fnv1a(key)
	best := -1
	var bestW uint64
	for i, h := range o.hashes {
		w := mix(kh ^ h)
		if best < 0 || w > bestW || (w == bestW && o.names[i] < o.names[best]) {
			best, bestW = i, w
		}
	}
	return o.names[best], true
}

// Owner returns the member of members that owns key (see Owners), or false
// when members is empty.
func Owner(key string, members []string) (string, bool) {
	return NewOwners(members).Owner(key)
}

func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix is SplitMix64's finaliser: it spreads every input bit over every
// output bit, so the weights of one key across members are unrelated.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
