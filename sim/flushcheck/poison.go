package flushcheck

import (
	"time"

	"github.com/batchd/batchd/actors"
)

// suspects mirrors what the batcher remembers of poison inputs, as far as
// it batches tenants apart (actors.BatcherConfig.PoisonMemoryMax): the
// inputs a BatchDone reported isolated, and per tenant how many distinct
// ones, for PoisonMemoryAge, at most PoisonMemoryMax of each, the oldest
// forgotten first. A tenant with actors.TenantSuspectAfter of them is
// suspect: its requests are of an isolation group of their own, and while
// the batches of suspect tenants hold their most of the devices
// (actors.SuspectDevicesDiv) they wait, and the flush bound is that of
// the others' requests.
type suspects struct {
	inputs  map[string]seenAt
	inOrder []string
	tenants map[string]seenAt
	tOrder  []string
}

type seenAt struct {
	at    time.Duration
	fails int
}

// inputOf is what makes two requests the same computation for the
// batcher: model, version, parameters and input, as the batch carries them.
func inputOf(r actors.Request) string {
	return r.Model + "\x00" + r.Version + "\x00" + r.Params + "\x00" + r.Input
}

// remember records an input of tenant isolated at now.
func (s *suspects) remember(input, tenant string, now, age time.Duration, size int) {
	if s.inputs == nil {
		s.inputs, s.tenants = make(map[string]seenAt), make(map[string]seenAt)
	}
	in := lookup(s.inputs, &s.inOrder, input, now, age, size)
	s.inputs[input] = seenAt{at: now, fails: in.fails + 1}
	t := lookup(s.tenants, &s.tOrder, tenant, now, age, size)
	if in.fails == 0 {
		t.fails++
	}
	s.tenants[tenant] = seenAt{at: now, fails: t.fails}
}

// lookup is what m holds for k (zero if nothing, or last seen over age
// before now), with k given a place at the back of order, at most size
// long, if it is new.
func lookup(m map[string]seenAt, order *[]string, k string, now, age time.Duration, size int) seenAt {
	v, ok := m[k]
	if !ok {
		if len(*order) >= size {
			delete(m, (*order)[0])
			*order = (*order)[1:]
		}
		*order = append(*order, k)
	}
	if now-v.at > age {
		v = seenAt{}
	}
	return v
}

// suspect reports whether a request of tenant admitted at now is of an
// isolation group of its own.
func (s *suspects) suspect(tenant string, now, age time.Duration) bool {
	if len(s.inOrder) == 0 {
		return false
	}
	t, ok := s.tenants[tenant]
	return ok && t.fails >= actors.TenantSuspectAfter && now-t.at <= age
}

// capped reports whether the suspect tenants' batches on the devices
// (running or sent ahead) hold their most while a request of another
// tenant is queued, so that theirs wait.
func (f *Checker) capped() bool {
	if len(f.suspects.inOrder) == 0 {
		return false
	}
	n := 0
	for _, d := range f.devOrder {
		if d.phase == fcBusy && d.suspect {
			n++
		}
		if d.next != nil && d.next.suspect {
			n++
		}
	}
	if n < max(1, f.healthy/actors.SuspectDevicesDiv) {
		return false
	}
	for _, it := range f.queued {
		if !it.suspect {
			return true
		}
	}
	return false
}

// isolated applies a BatchDone's Isolated: the batcher remembers each
// input and regroups every queued request by its tenant's suspicion now.
func (f *Checker) isolated(at time.Duration, d *fcDev, ids []uint64) {
	c := &f.cfg.Config
	if c.PoisonMemoryMax == 0 || len(ids) == 0 {
		return
	}
	learned := false
	for _, id := range ids {
		for _, it := range d.inflight {
			if it.id == id {
				f.suspects.remember(it.input, it.tenant, at, c.PoisonMemoryAge, c.PoisonMemoryMax)
				learned = true
			}
		}
	}
	if !learned {
		return
	}
	for _, k := range f.keyOrder {
		for _, it := range k.items {
			it.suspect = f.suspects.suspect(it.tenant, at, c.PoisonMemoryAge)
		}
	}
}
