package actors

import (
	"fmt"
	"testing"
	"time"

	"github.com/batchd/batchd/actors/member"
)

var waiter = Address{Node: "a", ID: 99}

func newTestFront(t *testing.T, node string, live ...string) (*Front, *fakeCtx) {
	t.Helper()
	cfg := DefaultFrontConfig(node)
	f, err := NewFront(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := newFakeCtx(Address{Node: node, ID: 2})
	for _, n := range live {
		f.Receive(ctx, member.Update{Node: n, Inc: 1, Kind: member.Alive})
	}
	return f, ctx
}

func submits(s []sent) []sent {
	var out []sent
	for _, x := range s {
		if _, ok := x.msg.(Submit); ok {
			out = append(out, x)
		}
	}
	return out
}

func TestFrontSendsToTheModelsOwner(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a", "b", "c")
	f.Receive(ctx, Submit{Req: Request{ID: 7, Model: "m", Input: "x", ReplyTo: waiter}})
	s := submits(ctx.take())
	if len(s) != 1 {
		t.Fatalf("sent %d submits, want 1", len(s))
	}
	want, _ := member.Owner("m", []string{"a", "b", "c"})
	if s[0].to != (Address{Node: want, ID: 1}) {
		t.Fatalf("sent to %v, want the accumulator of %s", s[0].to, want)
	}
	r := s[0].msg.(Submit).Req
	if r.ReplyTo != ctx.self || r.ID == 7 || r.Deadline != 200*time.Millisecond {
		t.Fatalf("submitted %+v: want ReplyTo the front, a submission ID, the SLO deadline", r)
	}
}

// TestFrontSendsToAWarmHolder: a model goes to the owner among the live
// members holding it warm, whatever the rendezvous choice among all would
// be; a model no member holds goes to the choice among all.
func TestFrontSendsToAWarmHolder(t *testing.T) {
	f, ctx := newTestFront(t, "a")
	// The one holder of big is a node the choice among all would not pick.
	all, _ := member.Owner("big", []string{"a", "b", "c"})
	holder := map[string]string{"a": "b", "b": "c", "c": "a"}[all]
	for _, n := range []string{"a", "b", "c"} {
		models := []string{"small"}
		if n == holder {
			models = append(models, "big")
		}
		f.Receive(ctx, member.Update{Node: n, Inc: 1, Kind: member.Alive, Models: member.JoinModels(models)})
	}
	for i := range 50 {
		model := fmt.Sprintf("big%d", i)
		f.Receive(ctx, Submit{Req: Request{ID: uint64(2 * i), Model: "big", Input: "x", ReplyTo: waiter}})
		f.Receive(ctx, Submit{Req: Request{ID: uint64(2*i + 1), Model: model, Input: "x", ReplyTo: waiter}})
		s := submits(ctx.take())
		if len(s) != 2 || s[0].to.Node != holder {
			t.Fatalf("big went to %v, want %s, its one holder", s, holder)
		}
		if want, _ := member.Owner(model, []string{"a", "b", "c"}); s[1].to.Node != want {
			t.Fatalf("%s (held by none) went to %v, want %s, the choice among all", model, s[1].to, want)
		}
	}
}

// One answer per request: the first reply for the current submission wins,
// the rest are counted and dropped.
func TestFrontFirstReplyWins(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a")
	f.Receive(ctx, Submit{Req: Request{ID: 7, Model: "m", ReplyTo: waiter}})
	sub := submits(ctx.take())[0].msg.(Submit).Req
	f.Receive(ctx, Reply{ID: sub.ID, Outcome: Completed, Output: "one"})
	f.Receive(ctx, Reply{ID: sub.ID, Outcome: Completed, Output: "two"})
	rs := replies(ctx.take())
	if len(rs) != 1 || rs[0].ID != 7 || rs[0].Output != "one" {
		t.Fatalf("waiter got %+v, want one reply with ID 7 and the first output", rs)
	}
	if st := f.Stats(); st.Duplicates != 1 || st.Answered != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The owner dies: the waiting request goes to the new owner, and the old
// submission's late result still counts once (it is the request's output)
// while a second is dropped.
func TestFrontResubmitsWhenTheOwnerDies(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a", "b", "c")
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	first := submits(ctx.take())[0]
	f.Receive(ctx, member.Update{Node: first.to.Node, Inc: 1, Kind: member.Dead})
	s := submits(ctx.take())
	if len(s) != 1 || s[0].to.Node == first.to.Node {
		t.Fatalf("after the owner died sent %+v, want one submit to another node", s)
	}
	second := s[0].msg.(Submit).Req
	if second.ID == first.msg.(Submit).Req.ID {
		t.Fatal("a resubmission reused the old submission ID")
	}
	f.Receive(ctx, Reply{ID: first.msg.(Submit).Req.ID, Outcome: Completed, Output: "late"})
	f.Receive(ctx, Reply{ID: second.ID, Outcome: Completed, Output: "new"})
	rs := replies(ctx.take())
	if len(rs) != 1 || rs[0].Output != "late" {
		t.Fatalf("waiter got %+v, want exactly the first result", rs)
	}
	if st := f.Stats(); st.Resubmitted != 1 || st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A node that returns under its name with a higher incarnation forgot what
// it held: the front resubmits to it, and the old life's cancel reply for
// the superseded submission does not answer the request.
func TestFrontResubmitsWhenTheOwnerRestarts(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a")
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	old := submits(ctx.take())[0].msg.(Submit).Req.ID
	f.Receive(ctx, member.Update{Node: "a", Inc: 2, Kind: member.Alive})
	out := ctx.take()
	s := submits(out)
	if len(s) != 1 || s[0].to.Node != "a" {
		t.Fatalf("after a restart sent %+v, want a resubmission to a", s)
	}
	f.Receive(ctx, Reply{ID: old, Outcome: Cancelled})
	if rs := replies(ctx.take()); len(rs) != 0 {
		t.Fatalf("a superseded submission's cancel answered the waiter: %+v", rs)
	}
	f.Receive(ctx, Reply{ID: s[0].msg.(Submit).Req.ID, Outcome: Completed})
	if rs := replies(ctx.take()); len(rs) != 1 || rs[0].Outcome != Completed {
		t.Fatalf("waiter got %+v", rs)
	}
}

// With TimeoutMax, the front leaves a missing deadline to the accumulator
// (it sends the request as given) and expires it where the accumulator
// answers it, plus grace: at its own deadline capped at Arrival +
// TimeoutMax, or, without one, at Arrival + its model's SLO (ModelSLOs,
// else SLO) capped the same; not at TimeoutMax, so a lost reply to a
// request without a deadline (a job's item) costs its SLO, not a minute.
func TestFrontTimeoutMaxLeavesTheDeadline(t *testing.T) {
	cfg := DefaultFrontConfig("a")
	cfg.TimeoutMax, cfg.Grace = time.Second, 50*time.Millisecond
	cfg.ModelSLOs = map[string]time.Duration{"mid": 500 * time.Millisecond, "slow": 3 * time.Second}
	f, err := NewFront(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := newFakeCtx(Address{Node: "a", ID: 2})
	f.Receive(ctx, member.Update{Node: "a", Inc: 1, Kind: member.Alive})
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	f.Receive(ctx, Submit{Req: Request{ID: 2, Model: "m", Deadline: 5 * time.Second, ReplyTo: waiter}})
	f.Receive(ctx, Submit{Req: Request{ID: 3, Model: "m", Deadline: 100 * time.Millisecond, ReplyTo: waiter}})
	f.Receive(ctx, Submit{Req: Request{ID: 4, Model: "mid", ReplyTo: waiter}})
	f.Receive(ctx, Submit{Req: Request{ID: 5, Model: "slow", ReplyTo: waiter}})
	s := submits(ctx.take())
	if len(s) != 5 || s[0].msg.(Submit).Req.Deadline != 0 || s[1].msg.(Submit).Req.Deadline != 5*time.Second || s[3].msg.(Submit).Req.Deadline != 0 {
		t.Fatalf("submitted %+v: want the deadlines as given (0, 5 s, 100 ms, 0, 0)", s)
	}
	at := map[uint64]time.Duration{}
	for _, now := range []time.Duration{149, 150, 249, 250, 549, 550, 1049, 1050} {
		ctx.advance(f, now*time.Millisecond)
		for _, r := range replies(ctx.take()) {
			at[r.ID] = ctx.now
		}
	}
	want := map[uint64]time.Duration{1: 250 * time.Millisecond, 2: 1050 * time.Millisecond, 3: 150 * time.Millisecond,
		4: 550 * time.Millisecond, 5: 1050 * time.Millisecond}
	if fmt.Sprint(at) != fmt.Sprint(want) {
		t.Fatalf("expired at %v, want %v", at, want)
	}
}

// A request nobody answers is answered Expired at deadline + grace, once.
func TestFrontExpiresAtDeadlinePlusGrace(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a")
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", Arrival: 0, ReplyTo: waiter}})
	sub := submits(ctx.take())[0].msg.(Submit).Req
	ctx.advance(f, 299*time.Millisecond)
	if rs := replies(ctx.take()); len(rs) != 0 {
		t.Fatalf("answered before deadline+grace: %+v", rs)
	}
	ctx.advance(f, 300*time.Millisecond)
	rs := replies(ctx.take())
	if len(rs) != 1 || rs[0].Outcome != Expired || rs[0].ID != 1 {
		t.Fatalf("at deadline+grace the waiter got %+v, want one Expired", rs)
	}
	f.Receive(ctx, Reply{ID: sub.ID, Outcome: Completed})
	if rs := replies(ctx.take()); len(rs) != 0 || f.Stats().Duplicates != 1 {
		t.Fatalf("a reply after expiry reached the waiter: %+v", rs)
	}
}

// Requests whose owner did not change are not resubmitted: a member joining
// moves only the models it now owns.
func TestFrontMovesOnlyMovedModels(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a", "b")
	models := []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"}
	for i, m := range models {
		f.Receive(ctx, Submit{Req: Request{ID: uint64(i + 1), Model: m, ReplyTo: waiter}})
	}
	ctx.take()
	f.Receive(ctx, member.Update{Node: "c", Inc: 1, Kind: member.Alive})
	moved := 0
	for _, m := range models {
		before, _ := member.Owner(m, []string{"a", "b"})
		after, _ := member.Owner(m, []string{"a", "b", "c"})
		if before != after {
			moved++
		}
	}
	s := submits(ctx.take())
	if len(s) != moved || moved == 0 {
		t.Fatalf("resubmitted %d, want %d (the models c now owns)", len(s), moved)
	}
	for _, x := range s {
		if x.to.Node != "c" {
			t.Fatalf("a resubmission went to %v, want c", x.to)
		}
	}
}

func TestFrontBounds(t *testing.T) {
	cfg := DefaultFrontConfig("a")
	cfg.InFlightMax = 2
	f, _ := NewFront(cfg)
	ctx := newFakeCtx(Address{Node: "a", ID: 2})
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	if rs := replies(ctx.take()); len(rs) != 1 || rs[0].Reason != ReasonNoDevice {
		t.Fatalf("with no live member got %+v, want a no_device rejection", rs)
	}
	f.Receive(ctx, member.Update{Node: "a", Inc: 1, Kind: member.Alive})
	for id := uint64(1); id <= 3; id++ {
		f.Receive(ctx, Submit{Req: Request{ID: id, Model: "m", ReplyTo: waiter}})
	}
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	rs := replies(ctx.take())
	if len(rs) != 2 || rs[0].Reason != ReasonQueueFull || rs[1].Reason != ReasonInvalid {
		t.Fatalf("over the bound and a repeated ID got %+v, want queue_full then invalid", rs)
	}
	if _, err := NewFront(FrontConfig{Node: "a"}); err == nil {
		t.Fatal("a zero config was accepted")
	}
	// Resubmissions are bounded: an owner that restarts for ever fails the
	// request after ResubmitMax moves.
	cfg = DefaultFrontConfig("a")
	cfg.ResubmitMax = 2
	f, _ = NewFront(cfg)
	f.Receive(ctx, member.Update{Node: "a", Inc: 1, Kind: member.Alive})
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	for inc := uint64(2); inc <= 4; inc++ {
		f.Receive(ctx, member.Update{Node: "a", Inc: inc, Kind: member.Alive})
	}
	rs = replies(ctx.take())
	if len(rs) != 1 || rs[0].Reason != ReasonAttempts {
		t.Fatalf("after 3 restarts got %+v, want one attempts failure", rs)
	}
}

// BenchmarkFrontRoundTrip is the request actor's cost per request: a
// Submit routed to its owner and the Reply delivered to its waiter.
func BenchmarkFrontRoundTrip(b *testing.B) {
	f, _ := NewFront(DefaultFrontConfig("n001"))
	ctx := newFakeCtx(Address{Node: "n001", ID: 2})
	for i := range 30 {
		f.Receive(ctx, member.Update{Node: fmt.Sprintf("n%03d", i), Inc: 1, Kind: member.Alive})
	}
	ctx.take()
	var id uint64
	b.ReportAllocs()
	for b.Loop() {
		id++
		f.Receive(ctx, Submit{Req: Request{ID: id, Model: "m", Input: "x", ReplyTo: waiter}})
		sub := ctx.sent[0].msg.(Submit).Req
		f.Receive(ctx, Reply{ID: sub.ID, Outcome: Completed, Output: "y"})
		ctx.sent = ctx.sent[:0]
		clear(ctx.timers)
	}
}

// Answered requests with long deadlines do not pile up in the front: its
// expiry heap is compacted once answered entries are most of it.
func TestFrontStateBoundedWithLongDeadlines(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a")
	// One request nobody answers, due first, keeps the answered ones from
	// leaving the heap's top on their own.
	f.Receive(ctx, Submit{Req: Request{ID: 100_000, Model: "m", Deadline: 30 * time.Minute, ReplyTo: waiter}})
	for id := uint64(1); id <= 20_000; id++ {
		f.Receive(ctx, Submit{Req: Request{ID: id, Model: "m", Deadline: time.Hour, ReplyTo: waiter}})
		sub := ctx.sent[len(ctx.sent)-1].msg.(Submit).Req
		f.Receive(ctx, Reply{ID: sub.ID, Outcome: Completed})
		ctx.sent = ctx.sent[:0]
	}
	if n := f.expiry.len(); n > 2*1024+2 {
		t.Fatalf("%d entries in the expiry heap after 20,000 answered requests, want at most ~2,048", n)
	}
	if f.expiry.done < 0 || f.expiry.done > f.expiry.len() {
		t.Fatalf("done count %d of %d entries", f.expiry.done, f.expiry.len())
	}
	// The count stays right through expiry: the two live requests expire.
	f.Receive(ctx, Submit{Req: Request{ID: 99_999, Model: "m", Deadline: 2 * time.Hour, ReplyTo: waiter}})
	ctx.advance(f, 3*time.Hour)
	if f.expiry.len() != 0 || f.expiry.done != 0 || f.Stats().Expired != 2 {
		t.Fatalf("after expiry: %d entries, done %d, expired %d", f.expiry.len(), f.expiry.done, f.Stats().Expired)
	}
}

// A hand-over: the owner leaves (and drains) while it runs the request.
// The new owner's refusal is held while the old submission may complete:
// the old owner's result answers; its Cancelled releases the refusal.
func TestFrontHandOverHoldsARefusal(t *testing.T) {
	for _, oldAnswer := range []Outcome{Completed, Cancelled} {
		f, ctx := newTestFront(t, "a", "a", "b", "c")
		f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
		first := submits(ctx.take())[0]
		owner := first.to.Node
		f.Receive(ctx, member.Update{Node: owner, Inc: 1, Kind: member.Left})
		out := ctx.take()
		s := submits(out)
		if len(s) != 1 || s[0].to.Node == owner {
			t.Fatalf("after the owner left sent %+v, want one submit to another node", out)
		}
		cancelled := false
		for _, x := range out {
			if c, ok := x.msg.(Cancel); ok && x.to.Node == owner && c.ID == first.msg.(Submit).Req.ID {
				cancelled = true
			}
		}
		if !cancelled {
			t.Fatalf("sent %+v: want a Cancel to the leaving owner, which still runs what it took", out)
		}
		f.Receive(ctx, Reply{ID: s[0].msg.(Submit).Req.ID, Outcome: Rejected, Reason: ReasonQueueFull})
		if rs := replies(ctx.take()); len(rs) != 0 {
			t.Fatalf("the new owner's refusal answered while the old one runs the request: %+v", rs)
		}
		f.Receive(ctx, Reply{ID: first.msg.(Submit).Req.ID, Outcome: oldAnswer, Output: "old"})
		rs := replies(ctx.take())
		want := Completed
		if oldAnswer == Cancelled {
			want = Rejected // the held refusal, now that nothing else will come
		}
		if len(rs) != 1 || rs[0].Outcome != want || rs[0].ID != 1 {
			t.Fatalf("old owner answered %v: waiter got %+v, want one %v", oldAnswer, rs, want)
		}
		if st := f.Stats(); st.InFlight != 0 || st.Answered != 1 {
			t.Fatalf("stats %+v", st)
		}
	}
}

// The owner died: nothing will come from it, so the new owner's refusal
// answers at once; and a refusal held for a leaving owner is released
// when that owner is declared dead after all, or at the front's expiry.
func TestFrontReleasesAHeldRefusal(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a", "b", "c")
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	owner := submits(ctx.take())[0].to.Node
	f.Receive(ctx, member.Update{Node: owner, Inc: 1, Kind: member.Dead})
	s := submits(ctx.take())
	f.Receive(ctx, Reply{ID: s[0].msg.(Submit).Req.ID, Outcome: Rejected})
	if rs := replies(ctx.take()); len(rs) != 1 || rs[0].Outcome != Rejected {
		t.Fatalf("owner dead: waiter got %+v, want the refusal at once", rs)
	}

	f, ctx = newTestFront(t, "a", "a", "b", "c")
	f.Receive(ctx, Submit{Req: Request{ID: 2, Model: "m", ReplyTo: waiter}})
	owner = submits(ctx.take())[0].to.Node
	f.Receive(ctx, member.Update{Node: owner, Inc: 1, Kind: member.Left})
	s = submits(ctx.take())
	f.Receive(ctx, Reply{ID: s[0].msg.(Submit).Req.ID, Outcome: Expired, Reason: ReasonDeadline})
	if rs := replies(ctx.take()); len(rs) != 0 {
		t.Fatalf("held: waiter got %+v", rs)
	}
	f.Receive(ctx, member.Update{Node: owner, Inc: 2, Kind: member.Alive}) // it restarted: its old life is gone
	if rs := replies(ctx.take()); len(rs) != 1 || rs[0].Outcome != Expired || rs[0].ID != 2 {
		t.Fatalf("old owner restarted: waiter got %+v, want the held Expired", rs)
	}

	f, ctx = newTestFront(t, "a", "a", "b", "c")
	f.Receive(ctx, Submit{Req: Request{ID: 3, Model: "m", ReplyTo: waiter}})
	owner = submits(ctx.take())[0].to.Node
	f.Receive(ctx, member.Update{Node: owner, Inc: 1, Kind: member.Left})
	s = submits(ctx.take())
	f.Receive(ctx, Reply{ID: s[0].msg.(Submit).Req.ID, Outcome: Rejected, Reason: ReasonQueueFull})
	ctx.advance(f, time.Second)
	if rs := replies(ctx.take()); len(rs) != 1 || rs[0].Outcome != Rejected || rs[0].Reason != ReasonQueueFull {
		t.Fatalf("expiry: waiter got %+v, want the held refusal", rs)
	}
}

// The owner cannot be reached (a Submit to it came back undeliverable:
// the data plane lost its stream) while membership still holds it alive:
// the new owner's refusal answers at once, not when membership declares
// the old owner dead, seconds past the request's deadline; the old
// owner's answer could not come back anyway. Seen to fail holding the
// refusal: the waiter got nothing.
func TestFrontAnswersARefusalForAnUnreachableOwner(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a", "b", "c")
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	first := submits(ctx.take())[0]
	if first.to.Node == "a" {
		t.Skip("the model's owner is the front's own node") // not so for "m" among a, b, c
	}
	f.Receive(ctx, Undeliverable{To: first.to, Msg: first.msg})
	s := submits(ctx.take())
	if len(s) != 1 || s[0].to.Node == first.to.Node {
		t.Fatalf("after an undeliverable submit sent %+v, want one to another node", s)
	}
	f.Receive(ctx, Reply{ID: s[0].msg.(Submit).Req.ID, Outcome: Rejected, Reason: ReasonNoDevice})
	if rs := replies(ctx.take()); len(rs) != 1 || rs[0].ID != 1 || rs[0].Outcome != Rejected || rs[0].Reason != ReasonNoDevice {
		t.Fatalf("the new owner refused, the old one unreachable: waiter got %+v, want the refusal at once", rs)
	}
}

// TestFrontTakesBackAReachablePeer: a Submit to the owner that comes back
// Undeliverable makes the front route around it (the request goes to
// another node); once the data plane reaches it again (PeerUp) the model
// goes back to it, at the same incarnation, and so does a new request.
func TestFrontTakesBackAReachablePeer(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a", "b", "c")
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	first := submits(ctx.take())[0]
	owner := first.to.Node
	f.Receive(ctx, Undeliverable{To: first.to, Msg: first.msg})
	s := submits(ctx.take())
	if len(s) != 1 || s[0].to.Node == owner {
		t.Fatalf("after an undeliverable submit sent %+v, want one to another node than %s", s, owner)
	}
	f.Receive(ctx, PeerUp{Node: owner})
	s = submits(ctx.take())
	if len(s) != 1 || s[0].to.Node != owner {
		t.Fatalf("after the peer was up again sent %+v, want the waiting request back at %s", s, owner)
	}
	f.Receive(ctx, Submit{Req: Request{ID: 2, Model: "m", ReplyTo: waiter}})
	if s := submits(ctx.take()); len(s) != 1 || s[0].to.Node != owner {
		t.Fatalf("a new request went to %+v, want %s", s, owner)
	}
	f.Receive(ctx, PeerUp{Node: owner}) // not shunned: nothing moves
	if s := submits(ctx.take()); len(s) != 0 {
		t.Fatalf("a PeerUp for a node not avoided resubmitted %+v", s)
	}
}

// An owner on another node that refuses a request as draining is leaving
// (it hands its models over before it drains) before this front has heard:
// the refusal is held, and the request goes to the new owner once the
// view moves the model, whose answer the waiter gets. With no move by the
// deadline plus Grace, the held refusal answers; an owner on the front's
// own node draining is answered at once. Seen to fail without the hold:
// TestClusterHandover's draining owner answered 745 of 2,689 forwarded
// requests 503 on a loaded machine (make test, 2026-11-29).
func TestFrontHoldsALeavingOwnersRefusal(t *testing.T) {
	f, ctx := newTestFront(t, "a", "a", "b", "c")
	var first sent
	for id := uint64(1); ; id++ { // a request whose owner is not a
		f.Receive(ctx, Submit{Req: Request{ID: id, Model: fmt.Sprintf("m%d", id), ReplyTo: waiter}})
		if first = submits(ctx.take())[0]; first.to.Node != "a" {
			break
		}
		f.Receive(ctx, Reply{ID: first.msg.(Submit).Req.ID, Outcome: Completed})
		ctx.take()
	}
	req := first.msg.(Submit).Req
	owner := first.to.Node
	f.Receive(ctx, Reply{ID: req.ID, Outcome: Rejected, Reason: ReasonDraining})
	if rs := replies(ctx.take()); len(rs) != 0 {
		t.Fatalf("the leaving owner's refusal answered: %+v", rs)
	}
	f.Receive(ctx, member.Update{Node: owner, Inc: 1, Kind: member.Left})
	s := submits(ctx.take())
	if len(s) != 1 || s[0].to.Node == owner {
		t.Fatalf("after the owner left sent %+v, want one submit to another node", s)
	}
	f.Receive(ctx, Reply{ID: s[0].msg.(Submit).Req.ID, Outcome: Completed, Output: "moved"})
	if rs := replies(ctx.take()); len(rs) != 1 || rs[0].Outcome != Completed || rs[0].Output != "moved" {
		t.Fatalf("waiter got %+v, want the new owner's answer", rs)
	}
	if st := f.Stats(); st.HeldLeaving != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}

	// No move: the held refusal answers at the expiry.
	f, ctx = newTestFront(t, "a", "b")
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	s = submits(ctx.take())
	f.Receive(ctx, Reply{ID: s[0].msg.(Submit).Req.ID, Outcome: Rejected, Reason: ReasonDraining})
	if rs := replies(ctx.take()); len(rs) != 0 {
		t.Fatalf("held: waiter got %+v", rs)
	}
	ctx.advance(f, time.Second)
	if rs := replies(ctx.take()); len(rs) != 1 || rs[0].Outcome != Rejected || rs[0].Reason != ReasonDraining {
		t.Fatalf("no move: waiter got %+v, want the held refusal at the expiry", rs)
	}

	// The front's own node drains: answered at once.
	f, ctx = newTestFront(t, "a", "a")
	f.Receive(ctx, Submit{Req: Request{ID: 1, Model: "m", ReplyTo: waiter}})
	s = submits(ctx.take())
	f.Receive(ctx, Reply{ID: s[0].msg.(Submit).Req.ID, Outcome: Rejected, Reason: ReasonDraining})
	if rs := replies(ctx.take()); len(rs) != 1 || rs[0].Reason != ReasonDraining {
		t.Fatalf("own node draining: waiter got %+v, want the refusal at once", rs)
	}
}
