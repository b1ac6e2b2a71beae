package actors

import (
	"fmt"
	"slices"
	"time"
)

// Check verifies the batcher's books against each other, the way
// TigerBeetle asserts its invariants: the counts kept at batcher, key and
// tenant level agree with the items they count, every bound holds, and no
// idle device is left while a batch it could take is due at now. It returns
// the first disagreement. It walks every key, tenant and device, so it is
// for the simulator and tests, after every message (where now is the time
// the message was handled): the simulator runs it on the state each
// delivery to the batcher left (ledger.Config.SelfCheck in sim/ledger), this
// package's tests after every message their batchers handle (checkEvery);
// the live runtimes never call it.
func (b *Batcher) Check(now time.Duration) error {
	queued, held := 0, 0
	for _, t := range b.tenantOrder {
		t.check = tenantCheck{}
	}
	if len(b.order) != len(b.keys) || len(b.order) > b.cfg.KeysMax {
		return fmt.Errorf("batcher check: %d keys in order, %d in the table, KeysMax %d", len(b.order), len(b.keys), b.cfg.KeysMax)
	}
	// The tables are looked up only after they changed (newKey, released:
	// the only writes); the counts below are checked every time.
	lookup := b.tablesMoved
	b.tablesMoved = false
	for _, q := range b.order {
		if lookup && b.keys[q.key] != q {
			b.tablesMoved = true
			return fmt.Errorf("batcher check: key %+v is not in the table", q.key)
		}
		n := 0
		for _, s := range q.subs {
			n += s.items.len()
			s.tenant.check.queued += s.items.len()
			for i := 0; i < s.items.len(); i++ {
				if g := s.items.at(i).Group; g != s.group {
					return fmt.Errorf("batcher check: key %+v: an item of group %x in tenant %q's sub-queue of group %x", q.key, g, s.tenant.name, s.group)
				}
			}
		}
		hn := 0
		for i, h := range q.holders {
			if h.n < 1 || slices.ContainsFunc(q.holders[:i], func(o holder) bool { return o.t == h.t }) {
				return fmt.Errorf("batcher check: key %+v: tenant %q holds %d, or twice", q.key, h.t.name, h.n)
			}
			hn += h.n
			h.t.check.held += h.n
			h.t.check.keys++
		}
		switch {
		case n != q.n:
			return fmt.Errorf("batcher check: key %+v counts %d queued, holds %d", q.key, q.n, n)
		case hn != q.held || q.n > q.held:
			return fmt.Errorf("batcher check: key %+v: held %d, its tenants hold %d, %d queued", q.key, q.held, hn, q.n)
		case q.held > b.cfg.QueueMax:
			return fmt.Errorf("batcher check: key %+v holds %d, QueueMax %d", q.key, q.held, b.cfg.QueueMax)
		case q.model.keys < 1 || lookup && b.models[q.model.name] != q.model:
			b.tablesMoved = lookup
			return fmt.Errorf("batcher check: key %+v: its model is not stored", q.key)
		}
		queued += q.n
		held += q.held
	}
	switch {
	case queued != b.queued || len(b.where) != b.queued:
		return fmt.Errorf("batcher check: %d queued in keys, %d counted, %d located", queued, b.queued, len(b.where))
	case held != b.held || b.held > b.cfg.QueueTotalMax:
		return fmt.Errorf("batcher check: %d held in keys, %d counted, QueueTotalMax %d", held, b.held, b.cfg.QueueTotalMax)
	case len(b.tenantOrder) != len(b.tenants) || len(b.tenants) > b.cfg.TenantsMax:
		return fmt.Errorf("batcher check: %d tenants in order, %d in the table, TenantsMax %d", len(b.tenantOrder), len(b.tenants), b.cfg.TenantsMax)
	}
	for _, t := range b.tenantOrder {
		switch {
		case b.tenants[t.name] != t:
			return fmt.Errorf("batcher check: tenant %q is not in the table", t.name)
		case t.held != t.check.held || t.keys != t.check.keys || t.queued != t.check.queued:
			return fmt.Errorf("batcher check: tenant %q counts held %d, keys %d, queued %d; the keys say %d, %d, %d",
				t.name, t.held, t.keys, t.queued, t.check.held, t.check.keys, t.check.queued)
		case t.keys > b.cfg.TenantKeysMax:
			return fmt.Errorf("batcher check: tenant %q holds %d keys, TenantKeysMax %d", t.name, t.keys, b.cfg.TenantKeysMax)
		}
	}
	running, healthy := 0, 0
	for _, d := range b.devOrder {
		if d.phase != devQuarantined && !d.leaving {
			healthy++
		}
		if d.phase == devBusy {
			running += len(d.inflight.Items)
		}
		if d.next != nil {
			running += len(d.next.batch.Items)
		}
		switch {
		case (d.early || d.next != nil) && d.phase != devBusy:
			return fmt.Errorf("batcher check: device %v has a batch ahead or asked for one while not busy", d.addr)
		case d.early && d.next != nil:
			return fmt.Errorf("batcher check: device %v asks for a batch ahead and has one", d.addr)
		}
	}
	if running != b.held-b.queued || healthy != b.healthy {
		return fmt.Errorf("batcher check: %d items on devices, %d held less queued; %d healthy devices, %d counted", running, b.held-b.queued, healthy, b.healthy)
	}
	asking := 0
	for _, d := range b.ready {
		if d.early {
			asking++
		}
		if d.phase != devIdle && !d.early {
			return fmt.Errorf("batcher check: device %v is ready but not idle", d.addr)
		}
		for _, q := range b.order {
			if d.holds(q.key.Model) && b.takesAhead(d, q, now) && b.due(q, now) {
				return fmt.Errorf("batcher check: key %+v is due while device %v idles", q.key, d.addr)
			}
		}
	}
	if asking != b.asking {
		return fmt.Errorf("batcher check: %d devices ready asking ahead, %d counted", asking, b.asking)
	}
	return nil
}

// checkEvery makes b run Check after every message it handles, and calls
// fail with the first disagreement: the self-check of this package's own
// tests. The simulator runs Check from outside instead, on the state each
// delivery to the batcher left (ledger.Config.SelfCheck in sim/ledger),
// and records a failure as a violation of the run.
func (b *Batcher) checkEvery(fail func(error)) {
	b.afterReceive = func(now time.Duration) {
		if err := b.Check(now); err != nil {
			fail(err)
		}
	}
}
