package actors

import (
	"slices"
	"time"
)

// Tenant is what the batcher keeps per tenant: its share of device
// time, what it holds, and its rate limit.
type Tenant struct {
	name   string
	weight float64
	cfg    TenantConfig
	// served is the device time charged to the tenant, divided by its
	// weight: fair scheduling serves the backlogged tenant with the least.
	served float64
	// queued and held (queued or on a device) count its requests.
	queued, held int
	// keys counts the keys it holds items in (see TenantKeysMax).
	keys int
	// check is Batcher.Check's own count, from the keys.
	check tenantCheck
	// The token bucket, when cfg.Rate > 0.
	tokens   float64
	refilled time.Duration
	// queuedElsewhere is when another accumulator of a split last said it
	// queues requests of the tenant (Share.Queued), plus one; 0: never.
	queuedElsewhere time.Duration
}

func newTenant(name string, cfg TenantConfig) *Tenant {
	w := float64(cfg.Weight)
	if w <= 0 {
		w = 1
	}
	return &Tenant{name: name, weight: w, cfg: cfg, tokens: float64(cfg.Burst)}
}

// Take spends a token of the tenant's rate limit. When none is left it
// returns false and how long until one is.
func (t *Tenant) Take(now time.Duration) (bool, time.Duration) {
	if t.cfg.Rate <= 0 {
		return true, 0
	}
	t.tokens = min(float64(t.cfg.Burst), t.tokens+t.cfg.Rate*(now-t.refilled).Seconds())
	t.refilled = now
	if t.tokens >= 1 {
		t.tokens--
		return true, 0
	}
	wait := time.Duration((1 - t.tokens) / t.cfg.Rate * float64(time.Second))
	return false, max(wait, time.Millisecond)
}

// Config is the tenant's configuration: its own, or the default.
func (t *Tenant) Config() TenantConfig { return t.cfg }

// Held counts the tenant's requests in flight (queued or running).
func (t *Tenant) Held() int { return t.held }

// Hold counts one more request of the tenant in flight.
func (t *Tenant) Hold() { t.held++ }

// Unhold counts one fewer request of the tenant in flight.
func (t *Tenant) Unhold() { t.held-- }

// Served is the tenant's weighted service: what Charge charged it,
// divided by its weight, from where Level last put it.
func (t *Tenant) Served() float64 { return t.served }

// Charge adds a service of cost (in the scheduler's own unit) to the
// tenant, divided by its weight.
func (t *Tenant) Charge(cost float64) { t.served += cost / t.weight }

// Level raises the tenant's service to vtime (the system virtual time),
// so that a tenant back from idle neither banks credit it did not use nor
// waits behind the others' history.
func (t *Tenant) Level(vtime float64) { t.served = max(t.served, vtime) }

type tenantCheck struct{ held, keys, queued int }

// idle reports whether the tenant holds nothing and its rate limit has
// refilled: its state can go, and coming back it starts as it would.
func (t *Tenant) idle(now time.Duration) bool {
	if t.held > 0 {
		return false
	}
	return t.cfg.Rate <= 0 || t.tokens+t.cfg.Rate*(now-t.refilled).Seconds() >= float64(t.cfg.Burst)
}

// tenant returns the state of the named tenant, creating it on first sight
// within TenantsMax (releasing an idle tenant at the bound); nil if every
// tenant tracked holds requests.
func (b *Batcher) tenant(name string, now time.Duration) *Tenant {
	return lookupTenant(b.tenants, &b.tenantOrder, name, now, b.cfg.TenantsMax, b.cfg.DefaultTenant, b.cfg.Tenants, b.vtime)
}

// lookupTenant is the tenant table of a Batcher or a TenantTable: the
// named tenant's state in byName (order: the same, in order of arrival),
// created on first sight with its configuration from cfgs (def when it is
// not listed) while fewer than most are tracked, else in the place of an
// idle one; nil if every tenant tracked holds requests.
func lookupTenant(byName map[string]*Tenant, order *[]*Tenant, name string, now time.Duration, most int, def TenantConfig, cfgs []TenantConfig, vtime float64) *Tenant {
	if t := byName[name]; t != nil {
		return t
	}
	if len(*order) >= most {
		i := slices.IndexFunc(*order, func(t *Tenant) bool { return t.idle(now) })
		if i < 0 {
			return nil
		}
		delete(byName, (*order)[i].name)
		*order = slices.Delete(*order, i, i+1)
	}
	cfg := def
	for _, c := range cfgs {
		if c.Name == name {
			cfg = c
		}
	}
	t := newTenant(name, cfg)
	// A newcomer starts level with the tenants being served, so it neither
	// waits behind their history nor banks credit it did not use.
	t.served = vtime
	byName[name] = t
	*order = append(*order, t)
	return t
}

// TenantTable is the tenant table of a scheduler outside this package
// (gen.Scheduler): the tenants it tracks, at most TenantsMax, each with
// its configuration from the listed ones or the default.
type TenantTable struct {
	byName map[string]*Tenant
	order  []*Tenant
	most   int
	def    TenantConfig
	cfgs   []TenantConfig
}

// NewTenantTable returns an empty table that tracks at most most tenants,
// configured from cfgs, or def for a tenant not listed.
func NewTenantTable(most int, def TenantConfig, cfgs []TenantConfig) *TenantTable {
	return &TenantTable{byName: map[string]*Tenant{}, most: most, def: def, cfgs: cfgs}
}

// Lookup returns the named tenant's state, created on first sight at
// service vtime (the system virtual time) within the bound, releasing an
// idle tenant at it; nil if every tenant tracked holds requests.
func (tt *TenantTable) Lookup(name string, now time.Duration, vtime float64) *Tenant {
	return lookupTenant(tt.byName, &tt.order, name, now, tt.most, tt.def, tt.cfgs, vtime)
}

// levelled is the service a tenant back from idle resumes at: level with
// the tenants being served (the system virtual time), less the credit of
// one item of a full batch at its weight. Levelled with no credit at all,
// a light tenant whose backlog admission keeps to an item or two (a tight
// SLO) went idle between its Poisson arrivals and lost its turn each time:
// weight 1 of 9 on one device, an SLO of about four batch times, offering
// 1.5 times its share, it was served 29.6 req/s against a share of 33.2
// (TestPropertyFairness); with the credit, 31.3 against 33.4. One item
// bounds what a tenant gains by going idle.
//
// In a split the tenant is idle only if no other accumulator queues its
// requests either (Share.Queued, fresh as peersAhead has it): one batcher
// levels a tenant that waits in another key of its not at all, and an
// accumulator that levelled it whenever its own queue ran dry would push
// a tenant spread over several models behind the others.
func (b *Batcher) levelled(t *Tenant, batchMax int) float64 {
	if t.queuedElsewhere > 0 && t.queuedElsewhere-1 >= b.lastCall-b.peerFresh() {
		return t.served
	}
	credit := float64(b.compute()) / float64(max(batchMax, 1)) / t.weight
	return max(t.served, b.vtime-credit)
}
