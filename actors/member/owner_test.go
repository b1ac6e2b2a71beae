package member

import (
	"flag"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

var ownerFigures = flag.Bool("owner.figures", false, "print the ownership figures (keys moved on a join or leave, load balance)")

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%03d", i)
	}
	return out
}

// TestPropertyOwnerMinimalMovement: for any members and keys, the owner does
// not depend on the members' order; removing a member moves exactly the keys
// it owned; adding one moves exactly the keys it now owns (to it).
func TestPropertyOwnerMinimalMovement(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		all := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z]{1,6}`), 2, 12, rapid.ID[string]).Draw(t, "members")
		keys := rapid.SliceOfN(rapid.String(), 1, 50).Draw(t, "keys")
		gone := rapid.IntRange(0, len(all)-1).Draw(t, "leaver")
		shuffled := rapid.Permutation(all).Draw(t, "order")
		rest := slices.Delete(slices.Clone(all), gone, gone+1)
		full, again, less := NewOwners(all), NewOwners(shuffled), NewOwners(rest)
		for _, k := range keys {
			a, _ := full.Owner(k)
			if b, _ := again.Owner(k); a != b {
				t.Fatalf("key %q: owner %s among %v, %s among %v", k, a, all, b, shuffled)
			}
			r, ok := less.Owner(k)
			if !ok || !slices.Contains(rest, r) {
				t.Fatalf("key %q: owner %q is not among %v", k, r, rest)
			}
			// Leave: only the leaver's keys move. Join (read backwards):
			// only the keys the joiner wins move, to it.
			if moved := a != r; moved != (a == all[gone]) {
				t.Fatalf("key %q: owner %s with %s, %s without it", k, a, all[gone], r)
			}
		}
	})
}

func TestOwnerEmpty(t *testing.T) {
	if o, ok := Owner("k", nil); ok || o != "" {
		t.Errorf("owner among none: %q, %v", o, ok)
	}
	if o, _ := Owner("k", []string{"only"}); o != "only" {
		t.Errorf("owner among one: %q", o)
	}
}

// ownerStats returns, over nKeys keys and n members, the share of keys that
// move when the last member leaves, and the greatest and mean load.
func ownerStats(n, nKeys int) (moved float64, maxOverMean float64) {
	ms := names(n)
	full, less := NewOwners(ms), NewOwners(ms[:n-1])
	load := map[string]int{}
	mv := 0
	for i := 0; i < nKeys; i++ {
		k := fmt.Sprintf("model-%d", i)
		a, _ := full.Owner(k)
		b, _ := less.Owner(k)
		load[a]++
		if a != b {
			mv++
		}
	}
	mx := 0
	for _, m := range ms {
		mx = max(mx, load[m])
	}
	return float64(mv) / float64(nKeys), float64(mx) / (float64(nKeys) / float64(n))
}

// TestOwnerFigures: over 100,000 keys, a leave (or, read backwards, a join)
// moves about 1/N of them, and the busiest member holds little more than the
// mean. Bounds: moved within 15% of 1/N; max/mean under 1.02 (N=3), 1.06
// (N=30), 1.15 (N=100), about four standard deviations of a fair draw.
func TestOwnerFigures(t *testing.T) {
	const nKeys = 100_000
	for _, c := range []struct {
		n       int
		maxLoad float64
	}{{3, 1.02}, {30, 1.06}, {100, 1.15}} {
		moved, maxLoad := ownerStats(c.n, nKeys)
		want := 1 / float64(c.n)
		if moved < 0.85*want || moved > 1.15*want || maxLoad > c.maxLoad {
			t.Errorf("N=%d: %.4f of the keys moved (want about %.4f), max/mean load %.3f (want < %.2f)", c.n, moved, want, maxLoad, c.maxLoad)
		}
		if *ownerFigures {
			fmt.Printf("N=%3d  keys moved on one leave or join: %.4f (1/N = %.4f)  max/mean load: %.3f\n", c.n, moved, want, maxLoad)
		}
	}
}

func BenchmarkOwner(b *testing.B) {
	for _, n := range []int{3, 30, 100} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			o := NewOwners(names(n))
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = fmt.Sprintf("model-%d", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, ok := o.Owner(keys[i%len(keys)]); !ok {
					b.Fatal("no owner")
				}
			}
		})
	}
}

// TestViewOwnerAmongHolders: a model's owner is chosen among the live
// members that hold it warm, all of them agreeing; a model no live member
// holds goes to any live member; a node that names no warm set holds
// every model; the choice follows the live set.
func TestViewOwnerAmongHolders(t *testing.T) {
	v := NewView(0)
	for _, u := range []Update{
		{Node: "a", Inc: 1, Kind: Alive, Models: JoinModels([]string{"small"})},
		{Node: "b", Inc: 1, Kind: Alive, Models: JoinModels([]string{"big", "small"})},
		{Node: "c", Inc: 1, Kind: Alive, Models: JoinModels([]string{"big"})},
		{Node: "d", Inc: 1, Kind: Alive, Models: JoinModels([]string{"small"})},
	} {
		if _, err := v.Apply(u); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		model := fmt.Sprintf("big-%d", i)
		// Not held by anyone: any live member, as Owner over all.
		if got, _ := v.Owner(model); got != mustOwner(t, model, v.Live()) {
			t.Fatalf("%s: owner %s, want the choice among every live member", model, got)
		}
	}
	if o, _ := v.Owner("big"); o != "b" && o != "c" {
		t.Errorf("big: owner %s, want b or c (its holders)", o)
	}
	if o, _ := v.Owner("small"); o != mustOwner(t, "small", []string{"a", "b", "d"}) {
		t.Errorf("small: owner %s, want the rendezvous choice among a, b, d", o)
	}
	// The holder that owns big dies: the other holder takes it.
	o, _ := v.Owner("big")
	if _, err := v.Apply(Update{Node: o, Inc: 1, Kind: Dead, Models: JoinModels([]string{"big"})}); err != nil {
		t.Fatal(err)
	}
	if next, _ := v.Owner("big"); next == o || (next != "b" && next != "c") {
		t.Errorf("after %s died, big is owned by %s, want the other holder", o, next)
	}
	// A node with no warm set holds everything.
	if _, err := v.Apply(Update{Node: "e", Inc: 1, Kind: Alive}); err != nil {
		t.Fatal(err)
	}
	if u, _ := v.Get("e"); !u.Holds("anything") {
		t.Error("a node with no warm set does not hold every model")
	}
	if u, _ := v.Get("a"); u.Holds("big") || !u.Holds("small") || u.Holds("smal") {
		t.Errorf("a's warm set %q: holds big %v, small %v, smal %v", u.Models, u.Holds("big"), u.Holds("small"), u.Holds("smal"))
	}
}

func mustOwner(t *testing.T, key string, members []string) string {
	t.Helper()
	o, ok := Owner(key, members)
	if !ok {
		t.Fatal("no owner")
	}
	return o
}
