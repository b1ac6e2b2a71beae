package actors

import "time"

// poisonMemory remembers the inputs that failed a run alone with a
// whole-batch error (poison), and the tenants that sent them, for
// BatcherConfig.PoisonMemoryAge; at most PoisonMemoryMax of each, the
// oldest forgotten first. It decides nothing by map order: it is only
// looked up.
type poisonMemory struct {
	inputs  map[uint64]poisonSeen // by signature
	inOrder []uint64              // signatures, oldest first
	tenants map[string]poisonSeen // by tenant: fails counts distinct inputs
	tOrder  []string
}

type poisonSeen struct {
	at    time.Duration // the last failure alone
	fails int           // for a tenant: distinct poison inputs remembered
}

// TenantSuspectAfter is how many distinct poison inputs make their tenant
// suspect, its requests batched apart from other tenants' (and its
// batches capped, see SuspectDevicesDiv): a pattern, as
// of a client probing with new poisons, each of which would otherwise
// fail a batch of everyone's once. Not sooner: batching a tenant apart
// costs every tenant batches (two streams of batches where there was one),
// which at a few devices misses more SLOs than a few poison inputs, each
// refused once it is known.
const TenantSuspectAfter = 3

// signature hashes what defines a computation's input (FNV-1a, 64 bits): a
// collision only runs an innocent request alone.
func signature(model, version, params, input string) uint64 {
	h := uint64(14695981039346656037)
	for _, s := range [...]string{model, version, params, input} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
		h ^= 0xff // a separator no byte of a string equals after the xor above
		h *= 1099511628211
	}
	return h
}

// remember records a poison input of tenant, failed alone at now; what
// was last seen longer than age ago counts afresh.
func (p *poisonMemory) remember(sig uint64, tenant string, now, age time.Duration, size int) {
	if p.inputs == nil {
		p.inputs = make(map[uint64]poisonSeen)
		p.tenants = make(map[string]poisonSeen)
	}
	in := seen(p.inputs, &p.inOrder, sig, now, age, size)
	p.inputs[sig] = poisonSeen{at: now, fails: in.fails + 1}
	t := seen(p.tenants, &p.tOrder, tenant, now, age, size)
	if in.fails == 0 {
		t.fails++ // a new input for this tenant
	}
	p.tenants[tenant] = poisonSeen{at: now, fails: t.fails}
}

// seen returns what m holds for k (zero if nothing, or if last seen longer
// than age before now), making room for k at the back of order, at most
// size long, if it is new.
func seen[K comparable](m map[K]poisonSeen, order *[]K, k K, now, age time.Duration, size int) poisonSeen {
	v, ok := m[k]
	if !ok {
		if len(*order) >= size {
			delete(m, (*order)[0])
			*order = (*order)[1:]
		}
		*order = append(*order, k)
	}
	if now-v.at > age {
		v = poisonSeen{}
	}
	return v
}

// refused reports whether req's input was isolated as a poison within age
// of now: it is answered Failed at admission, taking no device time.
func (p *poisonMemory) refused(req Request, now, age time.Duration) bool {
	if len(p.inOrder) == 0 {
		return false
	}
	seen, ok := p.inputs[signature(req.Model, req.Version, req.Params, req.Input)]
	return ok && now-seen.at <= age
}

// group is the isolation group of a request admitted at now (see
// Item.Group): its tenant's if the tenant sent TenantSuspectAfter distinct
// poison inputs lately, else 0.
func (p *poisonMemory) group(req Request, now, age time.Duration) uint64 {
	if len(p.inOrder) == 0 {
		return 0
	}
	if t, ok := p.tenants[req.Tenant]; ok && t.fails >= TenantSuspectAfter && now-t.at <= age {
		return signature("tenant", req.Tenant, "", "") | 1
	}
	return 0
}
