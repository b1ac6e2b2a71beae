package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
	"github.com/batchd/batchd/engine"
)

// TestClusterNewLife: a falsely declares b, the model's owner, dead at
// incarnation 1, and moves the model to itself. b takes a new life at 2
// (membership tells both engines): a's batcher takes b's device again,
// and a's requests run on b, the owner again. Then b's batcher restarts
// (supervision) while it queues requests of both fronts: its notice of a
// new batcher life carries the node's new incarnation, both fronts
// resubmit, and every request completes once. Seen to fail without the
// engine taking the new incarnation: the notice names incarnation 1,
// which both fronts hold over, and the queued requests expire.
func TestClusterNewLife(t *testing.T) {
	model := ownedBy("b", "a", "b")
	a, b := slowPair(t, model)
	waitDevices := func(e *engine.Engine, n int, what string) {
		for end := time.Now().Add(waitMax); stats(t, e).Batcher.Devices < n; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("gave up waiting: " + what)
			}
		}
	}
	waitDevices(b, 2, "a's device at b, the owner")

	// The false death: only a hears of it.
	a.Member(member.Update{Node: "b", Inc: 1, Kind: member.Dead})
	ctx := context.Background()
	if rep, err := a.Do(ctx, actors.Request{Model: model, Version: "v1", Tenant: "t", Input: "dead"}); err != nil || rep.Outcome != actors.Completed || rep.Device.Node != "a" {
		t.Fatalf("b dead to a: %v on %v, err %v: want completed on a", rep.Outcome, rep.Device, err)
	}

	// The new life.
	b2 := member.Update{Node: "b", Inc: 2, Kind: member.Alive, Models: model}
	b.Member(b2)
	a.Member(b2)
	waitDevices(b, 2, "a's device back at b")
	before := stats(t, b).Batcher.Batches
	if rep, err := a.Do(ctx, actors.Request{Model: model, Version: "v1", Tenant: "t", Input: "alive"}); err != nil || rep.Outcome != actors.Completed {
		t.Fatalf("b alive at 2: %v (%s), err %v", rep.Outcome, rep.Err, err)
	}
	if after := stats(t, b).Batcher.Batches; after == before {
		t.Fatal("a's request after b's new life did not run at b's batcher, the owner")
	}

	// b's batcher restarts within the new life.
	restartQueued(t, a, b, model)
	if sa, sb := stats(t, a), stats(t, b); sa.Unanswered+sb.Unanswered != 0 {
		t.Errorf("expired %d: want none", sa.Unanswered+sb.Unanswered)
	}
}
