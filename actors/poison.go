package actors

import "time"

// poisonMemory remembers the inputs that failed a run alone with a
// whole-batch error (poison), and the tenants that sent them, for
// BatcherConfig.PoisonMemoryAge; at most PoisonMemoryMax of each, the
// oldest forgotten first. It decides nothing by map order: it is only
// looked up.
type poisonMemory struct {
	inputs  map[uint64]time.Duration // signature -> last failure
	inOrder []uint64                 // signatures, oldest first
	tenants map[string]time.Duration // tenant -> its last poison
	tOrder  []string
}

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

// remember records a poison input of tenant, failed at now.
func (p *poisonMemory) remember(sig uint64, tenant string, now time.Duration, size int) {
	if p.inputs == nil {
		p.inputs = make(map[uint64]time.Duration)
		p.tenants = make(map[string]time.Duration)
	}
	if _, ok := p.inputs[sig]; !ok {
		if len(p.inOrder) >= size {
			delete(p.inputs, p.inOrder[0])
			p.inOrder = p.inOrder[1:]
		}
		p.inOrder = append(p.inOrder, sig)
	}
	p.inputs[sig] = now
	if _, ok := p.tenants[tenant]; !ok {
		if len(p.tOrder) >= size {
			delete(p.tenants, p.tOrder[0])
			p.tOrder = p.tOrder[1:]
		}
		p.tOrder = append(p.tOrder, tenant)
	}
	p.tenants[tenant] = now
}

// group is the isolation group of a request admitted at now (see
// Item.Group): its own if its input is a remembered poison, its tenant's
// if the tenant sent one lately, else 0.
func (p *poisonMemory) group(req Request, now, age time.Duration) uint64 {
	if len(p.inOrder) == 0 {
		return 0
	}
	if at, ok := p.inputs[signature(req.Model, req.Version, req.Params, req.Input)]; ok && now-at <= age {
		return mix64(req.ID) | 1 // alone: no other request has this group
	}
	if at, ok := p.tenants[req.Tenant]; ok && now-at <= age {
		return signature("tenant", req.Tenant, "", "") | 1
	}
	return 0
}
