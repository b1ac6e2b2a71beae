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

// tenantSuspectAfter is how many distinct poison inputs make their tenant
// suspect, its requests batched apart from other tenants': a pattern, as
// of a client probing with new poisons, each of which would otherwise
// fail a batch of everyone's once. Not sooner: batching a tenant apart
// costs every tenant batches (two streams of batches where there was one),
// which at a few devices misses more SLOs than a few poison inputs, each
// refused once it is known.
const tenantSuspectAfter = 3

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
	in, known := p.inputs[sig]
	if !known {
		if len(p.inOrder) >= size {
			delete(p.inputs, p.inOrder[0])
			p.inOrder = p.inOrder[1:]
		}
		p.inOrder = append(p.inOrder, sig)
	}
	if now-in.at > age {
		in.fails = 0
	}
	p.inputs[sig] = poisonSeen{at: now, fails: in.fails + 1}
	t, ok := p.tenants[tenant]
	if !ok {
		if len(p.tOrder) >= size {
			delete(p.tenants, p.tOrder[0])
			p.tOrder = p.tOrder[1:]
		}
		p.tOrder = append(p.tOrder, tenant)
	}
	if now-t.at > age {
		t.fails = 0
	}
	if !known || in.fails == 0 {
		t.fails++ // a new input for this tenant
	}
	p.tenants[tenant] = poisonSeen{at: now, fails: t.fails}
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
// Item.Group): its tenant's if the tenant sent tenantSuspectAfter distinct
// poison inputs lately, else 0.
func (p *poisonMemory) group(req Request, now, age time.Duration) uint64 {
	if len(p.inOrder) == 0 {
		return 0
	}
	if t, ok := p.tenants[req.Tenant]; ok && t.fails >= tenantSuspectAfter && now-t.at <= age {
		return signature("tenant", req.Tenant, "", "") | 1
	}
	return 0
}
