package member

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func mustApply(t testing.TB, v *View, u Update) Change {
	t.Helper()
	c, err := v.Apply(u)
	if err != nil {
		t.Fatalf("apply %v: %v", u, err)
	}
	return c
}

// TestViewRules walks SWIM's precedence rules one by one.
func TestViewRules(t *testing.T) {
	steps := []struct {
		u    Update
		want Change
		live bool
	}{
		{Update{"a", 1, Alive, ""}, LiveChanged, true},
		{Update{"a", 1, Alive, ""}, Ignored, true},       // duplicate
		{Update{"a", 0, Dead, ""}, Ignored, true},        // older incarnation
		{Update{"a", 1, Suspect, ""}, Updated, true},     // suspect beats alive, same incarnation
		{Update{"a", 1, Alive, ""}, Ignored, true},       // alive does not clear it at the same incarnation
		{Update{"a", 2, Alive, ""}, Updated, true},       // refutation: a higher incarnation
		{Update{"a", 1, Dead, ""}, Ignored, true},        // dead of the old incarnation
		{Update{"a", 2, Dead, ""}, LiveChanged, false},   // dead at the current one
		{Update{"a", 2, Alive, ""}, Ignored, false},      // dead is final for its incarnation
		{Update{"a", 2, Suspect, ""}, Ignored, false},    //
		{Update{"a", 3, Alive, ""}, LiveChanged, true},   // returns with a higher incarnation
		{Update{"a", 2, Alive, ""}, Ignored, true},       // nothing of the old life afterwards
		{Update{"a", 2, Dead, ""}, Ignored, true},        //
		{Update{"a", 3, Left, ""}, LiveChanged, false},   // leave
		{Update{"a", 3, Dead, ""}, Ignored, false},       // left outranks dead
		{Update{"b", 5, Suspect, ""}, LiveChanged, true}, // first sight as a suspect: a member
	}
	v := NewView(0)
	for i, s := range steps {
		if got := mustApply(t, v, s.u); got != s.want {
			t.Fatalf("step %d %v: change %d, want %d", i, s.u, got, s.want)
		}
		if v.IsLive(s.u.Node) != s.live {
			t.Fatalf("step %d %v: live %v, want %v", i, s.u, !s.live, s.live)
		}
	}
	if got, _ := v.Get("a"); got != (Update{"a", 3, Left, ""}) {
		t.Errorf("a is %v, want left@3", got)
	}
	if !slices.Equal(v.Live(), []string{"b"}) {
		t.Errorf("live %v, want [b]", v.Live())
	}
	// a joined, died, rejoined, left; b joined: five changes of the live set.
	if v.Epoch() != 5 {
		t.Errorf("epoch %d, want 5", v.Epoch())
	}
}

func TestViewRejects(t *testing.T) {
	v := NewView(2)
	for _, u := range []Update{{"", 1, Alive, ""}, {strings.Repeat("x", MaxNameLen+1), 1, Alive, ""}, {"a", 1, 0, ""}, {"a", 1, Left + 1, ""}} {
		if _, err := v.Apply(u); err == nil {
			t.Errorf("apply %v: no error", u)
		}
	}
	mustApply(t, v, Update{"a", 1, Alive, ""})
	mustApply(t, v, Update{"b", 1, Dead, ""})
	if _, err := v.Apply(Update{"c", 1, Alive, ""}); !errors.Is(err, ErrFull) {
		t.Errorf("third name in a view of two: %v, want ErrFull", err)
	}
	// Known names still apply when full.
	if c := mustApply(t, v, Update{"b", 2, Alive, ""}); c != LiveChanged {
		t.Errorf("b's return: %d", c)
	}
	if v.Len() != 2 || NewView(MaxLimit+1).Limit() != MaxLimit {
		t.Errorf("len %d, limit %d", v.Len(), NewView(MaxLimit+1).Limit())
	}
}

// TestLiveSnapshot: a slice Live returned stays as it was.
func TestLiveSnapshot(t *testing.T) {
	v := NewView(0)
	mustApply(t, v, Update{"b", 1, Alive, ""})
	mustApply(t, v, Update{"d", 1, Alive, ""})
	snap := v.Live()
	mustApply(t, v, Update{"c", 1, Alive, ""})
	mustApply(t, v, Update{"b", 1, Dead, ""})
	if !slices.Equal(snap, []string{"b", "d"}) || !slices.Equal(v.Live(), []string{"c", "d"}) {
		t.Errorf("snapshot %v, now %v", snap, v.Live())
	}
}

// genUpdates draws updates about a few nodes with small incarnations, so
// that equal incarnations (where the kind decides) are common.
func genUpdates(t *rapid.T) []Update {
	nodes := rapid.IntRange(1, 4).Draw(t, "nodes")
	gen := rapid.Custom(func(t *rapid.T) Update {
		return Update{
			Node: fmt.Sprintf("n%d", rapid.IntRange(0, nodes-1).Draw(t, "node")),
			Inc:  uint64(rapid.IntRange(0, 3).Draw(t, "inc")),
			Kind: Kind(rapid.IntRange(int(Alive), int(Left)).Draw(t, "kind")),
		}
	})
	return rapid.SliceOfN(gen, 0, 40).Draw(t, "updates")
}

// greatest is the lattice maximum of the updates per node: what a View must
// hold after applying them in any order.
func greatest(us []Update) map[string]Update {
	out := map[string]Update{}
	for _, u := range us {
		if cur, ok := out[u.Node]; !ok || u.Overrides(cur) {
			out[u.Node] = u
		}
	}
	return out
}

// checkView checks a View against the greatest updates: every node's state,
// the live list (sorted, exactly the alive and suspect nodes).
func checkView(t *rapid.T, v *View, want map[string]Update) {
	if v.Len() != len(want) {
		t.Fatalf("view holds %d nodes, want %d", v.Len(), len(want))
	}
	var live []string
	for _, m := range v.Members() {
		if w := want[m.Node]; m != w {
			t.Fatalf("node %s is %v, want %v", m.Node, m, w)
		}
		if m.Kind.Live() {
			live = append(live, m.Node)
		}
	}
	if !slices.Equal(v.Live(), live) {
		t.Fatalf("live %v, want %v", v.Live(), live)
	}
}

// TestPropertyViewOrderFree is property (d): the precedence rules hold under
// any reordering (and duplication) of the same updates. A View applied the
// updates in one order and in a shuffled order with duplicates holds, per
// node, the greatest update (higher incarnation first, then alive < suspect
// < dead < left); each Apply says Ignored exactly when the update does not
// override, never moves a node's state back, and Epoch counts the changes of
// the live set.
func TestPropertyViewOrderFree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		us := genUpdates(t)
		want := greatest(us)
		perm := rapid.Permutation(append(slices.Clone(us), us...)).Draw(t, "reordered")
		for _, order := range [][]Update{us, perm} {
			v := NewView(0)
			var liveChanges uint64
			for _, u := range order {
				before, known := v.Get(u.Node)
				wasLive := v.IsLive(u.Node)
				c, err := v.Apply(u)
				if err != nil {
					t.Fatal(err)
				}
				after, _ := v.Get(u.Node)
				overrides := !known || u.Overrides(before)
				switch {
				case overrides && after != u:
					t.Fatalf("%v overrides %v but the view holds %v", u, before, after)
				case !overrides && (c != Ignored || after != before):
					t.Fatalf("%v does not override %v but the view holds %v (change %d)", u, before, after, c)
				case known && before.Overrides(after):
					t.Fatalf("%v moved %s back from %v to %v", u, u.Node, before, after)
				}
				if (c == LiveChanged) != (wasLive != v.IsLive(u.Node)) {
					t.Fatalf("%v: change %d, live %v → %v", u, c, wasLive, v.IsLive(u.Node))
				}
				if c == LiveChanged {
					liveChanges++
				}
			}
			checkView(t, v, want)
			if v.Epoch() != liveChanges {
				t.Fatalf("epoch %d after %d changes of the live set", v.Epoch(), liveChanges)
			}
		}
	})
}

// BenchmarkViewApply is the cost of one membership message applied to a
// View of 100 nodes: a stream of suspicions and refutations (alive at a
// higher incarnation), and one message in 32 a death, whose node's next
// alive is a return (each a change of the live set, which copies the live
// list).
func BenchmarkViewApply(b *testing.B) {
	const n = 100
	names := make([]string, n)
	v := NewView(0)
	for i := range names {
		names[i] = fmt.Sprintf("node-%03d", i)
		mustApply(b, v, Update{names[i], 1, Alive, ""})
	}
	incs := make([]uint64, n)
	for i := range incs {
		incs[i] = 1
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := (i * 7) % n
		var u Update
		switch i % 32 {
		case 0:
			u = Update{names[j], incs[j], Dead, ""}
		case 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31:
			u = Update{names[j], incs[j], Suspect, ""}
		default:
			incs[j]++
			u = Update{names[j], incs[j], Alive, ""}
		}
		if _, err := v.Apply(u); err != nil {
			b.Fatal(err)
		}
	}
}
