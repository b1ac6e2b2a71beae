package devicemodel

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// TestDeviceModelDrawsAFixedCount: a batch draws the same random numbers
// whatever its fate and whether the faults have healed, so a batch's fate
// depends only on the seed and how many batches ran before it (what lets a
// simulated run and a live one with the same plan be compared, and a seed
// sweep explore failure mixes).
func TestDeviceModelDrawsAFixedCount(t *testing.T) {
	plan := FaultPlan{CrashRate: 0.2, HangRate: 0.1, SlowRate: 0.3, SlowFactor: 2, BatchErrorRate: 0.1, ItemErrorRate: 0.1}
	healed := plan
	healed.HealAt = time.Nanosecond
	a, err := New(actors.FixedLatency(100*time.Millisecond), plan)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(actors.FixedLatency(100*time.Millisecond), healed)
	if err != nil {
		t.Fatal(err)
	}
	ra, rb := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(1, 2))
	kinds := map[FateKind]int{}
	inputs := []string{"a", "b", "c"}
	for i := range 1000 {
		now := time.Duration(i+1) * time.Second
		fa := a.Draw(now, ra, inputs)
		fb := b.Draw(now, rb, inputs)
		kinds[fa.Kind]++
		if fb.Kind != FateDone || fb.ItemFail != nil || fb.Slow {
			t.Fatalf("batch %d after HealAt: %+v, want a plain completion", i, fb)
		}
		if ra.Uint64() != rb.Uint64() {
			t.Fatalf("batch %d: the healed and the faulty device drew different counts", i)
		}
	}
	for _, k := range []FateKind{FateDone, FateHang, FateCrash, FateBatchError} {
		if kinds[k] == 0 {
			t.Errorf("no batch of kind %d in 1000 at these rates", k)
		}
	}
}

// TestDeviceModelPoisonOutlivesHeal: poison fails its batch whole, healed
// or not, at the batch's full latency.
func TestDeviceModelPoisonOutlivesHeal(t *testing.T) {
	m, err := New(actors.FixedLatency(time.Second), FaultPlan{PoisonPrefix: "!", HealAt: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	f := m.Draw(time.Hour, rand.New(rand.NewPCG(1, 1)), []string{"ok", "!bad"})
	if f.Kind != FatePoison || f.Took != time.Second {
		t.Errorf("got %+v, want poison at 1s", f)
	}
}
