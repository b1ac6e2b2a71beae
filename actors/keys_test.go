package actors

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// finishAll completes every batch sent so far, as the devices would.
func finishAll(b *Batcher, c *fakeCtx) {
	for _, s := range c.take() {
		if m, ok := s.msg.(RunBatch); ok {
			b.Receive(c, BatchDone{Device: s.to, BatchID: m.Batch.ID})
		}
	}
}

// The reproduction as reported: once 1,024 distinct params had been seen, every
// new params was refused queue_full for good. Keys that hold nothing now
// make room.
func TestBatcherReleasesKeysOfPastRequests(t *testing.T) {
	cfg := DefaultBatcherConfig()
	b, c := newTestBatcher(t, cfg, 1)
	for i := 0; i < cfg.KeysMax+10; i++ {
		id := uint64(i + 1)
		b.Receive(c, Submit{Req: Request{ID: id, Model: "m", Params: fmt.Sprintf("p=%d", i), Input: "k", Arrival: c.now, ReplyTo: Address{ID: 2}}})
		c.advance(b, c.now+cfg.Linger(1, 1))
		runs := ofType[RunBatch](c.sent)
		if len(runs) != 1 {
			t.Fatalf("request %d: want one batch, got %+v", id, replies(c.sent))
		}
		c.take()
		b.Receive(c, BatchDone{Device: Address{ID: 100}, BatchID: runs[0].Batch.ID})
		if err := b.Check(c.now); err != nil {
			t.Fatal(err)
		}
	}
	if s := b.Stats(); s.Keys > cfg.KeysMax || s.KeysReleased == 0 {
		t.Fatalf("%d keys tracked, %d released; want at most %d", s.Keys, s.KeysReleased, cfg.KeysMax)
	}
}

func TestBatcherRejectedRequestLeavesNoKey(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.Tenants = []TenantConfig{{Name: "t", Rate: 1, Burst: 1}}
	b, c := newTestBatcher(t, cfg, 1)
	sub := func(id uint64, params string) {
		b.Receive(c, Submit{Req: Request{ID: id, Tenant: "t", Model: "m", Params: params, Input: "x", Arrival: c.now, ReplyTo: Address{ID: 2}}})
	}
	sub(1, "a") // takes the one token
	sub(2, "b") // rate limited
	sub(3, "c")
	rs := replies(c.take())
	if len(rs) != 2 || rs[0].Reason != ReasonRateLimited || rs[1].Reason != ReasonRateLimited {
		t.Fatalf("want requests 2 and 3 rate limited, got %+v", rs)
	}
	if s := b.Stats(); s.Keys != 1 || s.Models != 1 {
		t.Fatalf("rejected requests left state: %d keys, %d models; want 1 and 1", s.Keys, s.Models)
	}
}

func TestBatcherTenantKeyQuota(t *testing.T) {
	cfg := DefaultBatcherConfig()
	cfg.TenantKeysMax = 3
	cfg.SLO = 5 * time.Second // room for every key on one device
	b, c := newTestBatcher(t, cfg, 1)
	sub := func(id uint64, tenant, params string) {
		b.Receive(c, Submit{Req: Request{ID: id, Tenant: tenant, Model: "m", Params: params, Input: "x", Arrival: c.now, ReplyTo: Address{ID: 2}}})
	}
	for i := range 3 {
		sub(uint64(i+1), "greedy", fmt.Sprint(i))
	}
	sub(4, "greedy", "3") // a fourth key: over its quota
	sub(5, "greedy", "0") // a key it already holds: fine
	sub(6, "other", "3")  // another tenant makes the fourth key
	rs := replies(c.take())
	if len(rs) != 1 || rs[0].ID != 4 || rs[0].Reason != ReasonQuota || rs[0].RetryAfter <= 0 {
		t.Fatalf("want only request 4 rejected for quota with a retry hint, got %+v", rs)
	}
	if s := b.Stats(); s.Keys != 4 || s.Queued != 5 {
		t.Fatalf("want 4 keys and 5 queued, got %+v", s)
	}
	if err := b.Check(c.now); err != nil {
		t.Fatal(err)
	}
}

// TestPropertyBoundedState: under any sequence of requests with random
// params, models, versions, tenants and lengths, completions and time, the
// batcher's state stays within its bounds and its books agree; and once
// the devices are done, a valid request on a key never seen is admitted.
func TestPropertyBoundedState(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultBatcherConfig()
		cfg.KeysMax = rapid.IntRange(1, 40).Draw(rt, "keys_max")
		cfg.TenantKeysMax = rapid.IntRange(1, 10).Draw(rt, "tenant_keys_max")
		cfg.TenantsMax = rapid.IntRange(1, 6).Draw(rt, "tenants_max")
		cfg.QueueMax = 50
		cfg.QueueTotalMax = 200
		cfg.BatchMax = rapid.IntRange(1, 8).Draw(rt, "batch_max")
		if rapid.Bool().Draw(rt, "registry") {
			cfg.Models = []ModelConfig{
				{Name: "a", Versions: []VersionConfig{{"v1", 1}, {"v2", 1}}, BucketEdges: []int{2, 4}},
				{Name: "b", Versions: []VersionConfig{{"v1", 1}}},
			}
		}
		devices := rapid.IntRange(1, 4).Draw(rt, "devices")
		b, c := newTestBatcher(t, cfg, devices)
		steps := rapid.IntRange(1, 400).Draw(rt, "steps")
		id := uint64(0)
		for range steps {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				c.advance(b, c.now+time.Duration(rapid.IntRange(1, 3000).Draw(rt, "ms"))*time.Millisecond)
			case 1:
				finishAll(b, c)
			default:
				id++
				b.Receive(c, Submit{Req: Request{
					ID:      id,
					Tenant:  fmt.Sprint("t", rapid.IntRange(0, 9).Draw(rt, "tenant")),
					Model:   []string{"a", "b", "c"}[rapid.IntRange(0, 2).Draw(rt, "model")],
					Version: []string{"", "v1", "v2"}[rapid.IntRange(0, 2).Draw(rt, "version")],
					Params:  fmt.Sprint(rapid.IntRange(0, 1000).Draw(rt, "params")),
					Input:   "xxxxxx"[:rapid.IntRange(1, 6).Draw(rt, "len")],
					Arrival: c.now, ReplyTo: Address{ID: 2},
				}})
			}
			if err := b.Check(c.now); err != nil {
				rt.Fatal(err)
			}
			s := b.Stats()
			models := 3
			if len(cfg.Models) > 0 {
				models = len(cfg.Models)
			}
			if s.Keys > cfg.KeysMax || s.Tenants > cfg.TenantsMax || s.Models > models {
				rt.Fatalf("state past its bounds: %+v", s)
			}
		}
		// Let everything finish or expire, then ask for a key never seen.
		for range 3 {
			finishAll(b, c)
			c.advance(b, c.now+cfg.TimeoutMax)
		}
		finishAll(b, c)
		c.take()
		b.Receive(c, Submit{Req: Request{ID: id + 1, Tenant: "fresh", Model: "a", Params: "never seen", Input: "x", Arrival: c.now, ReplyTo: Address{ID: 2}}})
		if rs := replies(c.take()); len(rs) != 0 {
			rt.Fatalf("a valid request on a new key after the load: %+v", rs)
		}
	})
}

// The batchers of this package's tests check themselves after every
// message (newTestBatcher): a disagreement in the books fails at the
// message that made it, not at the end of the test.
func TestCheckEveryMessage(t *testing.T) {
	b, err := NewBatcher(DefaultBatcherConfig())
	if err != nil {
		t.Fatal(err)
	}
	var failed []error
	b.checkEvery(func(err error) { failed = append(failed, err) })
	c := newFakeCtx(batcherAddr)
	b.Receive(c, Start{})
	submit(b, c, 1)
	if len(failed) != 0 {
		t.Fatalf("sound books failed the check: %v", failed)
	}
	b.queued++ // a count that no longer agrees with the items
	c.now += ms
	b.Receive(c, Cancel{ID: 99})
	if len(failed) != 1 || !strings.Contains(failed[0].Error(), "queued") {
		t.Fatalf("a broken count after a message: %v, want one failure naming the queued count", failed)
	}
}

// TestBatcherCheckLooksUpChangedTables: Check looks the key and model
// tables up after they changed (a key made or released), and finds a key
// that the table maps to another queue.
func TestBatcherCheckLooksUpChangedTables(t *testing.T) {
	b, c := newTestBatcher(t, DefaultBatcherConfig(), 1)
	b.afterReceive = nil
	submit(b, c, 1)
	q := b.order[0]
	b.keys[q.key] = &keyQueue{key: q.key, model: q.model}
	if err := b.Check(c.now); err == nil || !strings.Contains(err.Error(), "not in the table") {
		t.Fatalf("a key mapped to another queue after a new key: Check says %v", err)
	}
	b.keys[q.key] = q
	if err := b.Check(c.now); err != nil {
		t.Fatalf("restored: %v", err)
	}
}

// TestAheadOfASpreadTenant: a tenant that holds requests in two keys takes
// about half of its fair share through each, so a newcomer to one of them
// has about half as many of its requests ahead there as when it queues in
// that key alone (and the predicted wait, which counts the other key's
// batch too, is no longer). Seen to fail counting its whole share in each
// key: the same count whether it queues elsewhere or not.
func TestAheadOfASpreadTenant(t *testing.T) {
	ahead := func(models ...string) (int, int) {
		cfg := DefaultBatcherConfig()
		cfg.KeyPolicy = PolicyFair
		cfg.BatchMax = 4
		cfg.SLO = 10 * time.Second
		b, c := newTestBatcher(t, cfg, 1)
		id := uint64(0)
		for _, m := range models {
			for range 12 {
				id++
				b.Receive(c, Submit{Req: Request{ID: id, Model: m, Version: "v1", Tenant: "a", Input: "x", Arrival: c.now, ReplyTo: Address{ID: 2}}})
			}
		}
		newcomer := newTenant("b", cfg.DefaultTenant)
		for _, q := range b.order {
			if q.key.Model != "m0" {
				continue
			}
			perItem := float64(b.cfg.Latency.Predict(q.model.batchMax, q.maxLen)) / float64(q.model.batchMax)
			// The newcomer has been served 6 items more than a: a's turn
			// for about 7 of its queued items before the newcomer's one.
			served := b.tenants["a"].served + 6*perItem
			n := q.aheadOf(newcomer, served, perItem, time.Second, c.now, 1, func(s *Tenant) int { return b.spread(s, c.now) })
			return n, b.spread(b.tenants["a"], c.now)
		}
		t.Fatal("no key for m0")
		return 0, 0
	}
	alone, keys := ahead("m0")
	if keys != 1 {
		t.Fatalf("a queues in %d keys, want 1", keys)
	}
	spread, keys := ahead("m0", "m1")
	if keys != 2 {
		t.Fatalf("a queues in %d keys, want 2", keys)
	}
	t.Logf("a's requests ahead of a newcomer in m0: %d alone, %d queuing in m1 too", alone, spread)
	if spread >= alone || spread < alone/2-1 || spread > alone/2+1 {
		t.Fatalf("a's requests ahead of a newcomer in m0: %d queuing elsewhere too, %d alone; want about half", spread, alone)
	}
}
