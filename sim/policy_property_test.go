package sim

// Property tests of the scheduling policies, with rapid, alongside
// property_test.go's invariants: the SLO below capacity (invariant 6),
// fairness between tenants (invariant 7), batches that never mix keys, warm
// models, canary routing weights, tenant quotas, and the bound on a
// low-priority request's wait. Each draws whole runs and checks its
// property from the report and from an observer of its own (policyRecorder)
// that sees every message, independently of the ledger.
//
// Each property was seen to fail on a deliberately broken build, applied to
// a copy of the tree and undone; each test's comment says how ("Seen to
// fail").

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/ledger"
)

// policyRecorder is the policy properties' own observer: one line per
// request (what was asked, when it was admitted and answered), and the
// delivery order of submits and replies, for the in-flight count.
type policyRecorder struct {
	cfg  Config // resolved
	reqs []policyReq
	// seq numbers the deliveries; events lists the Submit and Reply
	// deliveries of the run, in order.
	seq    int64
	events []policyEvent
	// devModels are the warm models of each device's last DeviceReady.
	devModels map[actors.Address][]string
	errs      []string
	errsN     int
}

type policyReq struct {
	req       actors.Request
	submitted bool
	submitAt  time.Duration
	replied   bool
	reply     actors.Reply
	replyAt   time.Duration
	// version is the version of the batches that ran it ("" if none did).
	version string
}

type policyEvent struct {
	id     uint64
	submit bool // else a reply delivered to the ledger
}

func newPolicyRecorder(resolved Config) *policyRecorder {
	return &policyRecorder{cfg: resolved, devModels: make(map[actors.Address][]string)}
}

func (r *policyRecorder) fail(format string, args ...any) {
	r.errsN++
	if len(r.errs) < 10 {
		r.errs = append(r.errs, fmt.Sprintf(format, args...))
	}
}

func (r *policyRecorder) get(id uint64) *policyReq {
	if id == 0 || id > 1<<24 {
		return nil
	}
	if int(id) >= len(r.reqs) {
		r.reqs = append(r.reqs, make([]policyReq, int(id)+1-len(r.reqs))...)
	}
	return &r.reqs[id]
}

// Deliver implements Observer.
func (r *policyRecorder) Deliver(at time.Duration, from, to actors.Address, msg actors.Message) {
	r.seq++
	switch m := msg.(type) {
	case actors.Submit:
		if q := r.get(m.Req.ID); q != nil && !q.submitted {
			q.req, q.submitted, q.submitAt = m.Req, true, at
			r.events = append(r.events, policyEvent{id: m.Req.ID, submit: true})
		}
	case actors.Reply:
		if q := r.get(m.ID); to == LedgerAddr && q != nil && !q.replied {
			q.replied, q.reply, q.replyAt = true, m, at
			r.events = append(r.events, policyEvent{id: m.ID})
		}
	case actors.DeviceReady:
		r.devModels[m.Device] = m.Models
	case actors.RunBatch:
		r.runBatch(to, &m.Batch)
	}
}

// runBatch checks a batch against its key and its device, on its own
// terms: every item of the key's model, version and parameters, in the
// key's length bucket (or, under BucketMerge, a shorter one, with at least
// one item in the key's own), sent to a device that announced the model.
func (r *policyRecorder) runBatch(to actors.Address, b *actors.Batch) {
	bc := r.cfg.Batcher
	if ms := r.devModels[to]; len(ms) > 0 && !slices.Contains(ms, b.Key.Model) {
		r.fail("batch %d of model %q went to device %v, warm for %q", b.ID, b.Key.Model, to, ms)
	}
	own := false
	for i := range b.Items {
		q := &b.Items[i].Req
		if q.Model != b.Key.Model || q.Version != b.Key.Version || q.Params != b.Key.Params {
			r.fail("batch %d (key %+v) holds request %d of %s@%s %q", b.ID, b.Key, q.ID, q.Model, q.Version, q.Params)
		}
		switch bk := bc.Bucket(q.Model, len(q.Input)); {
		case bk == b.Key.Bucket:
			own = true
		case bk > b.Key.Bucket || !bc.BucketMerge:
			r.fail("batch %d (bucket %d, merge %v) holds request %d of %d bytes, bucket %d", b.ID, b.Key.Bucket, bc.BucketMerge, q.ID, len(q.Input), bk)
		}
		if p := r.get(q.ID); p != nil {
			p.version = b.Key.Version
		}
	}
	if !own {
		r.fail("batch %d has no item in its key's bucket %d", b.ID, b.Key.Bucket)
	}
}

// policyRun runs cfg with a policyRecorder and fails t on any violation of
// the invariants the ledger checks (the policies rest on them).
func policyRun(t *rapid.T, cfg Config) (Report, *policyRecorder) {
	rec := newPolicyRecorder(cfg.resolved())
	cfg.Observers = append(cfg.Observers[:len(cfg.Observers):len(cfg.Observers)], rec)
	rep, err := Run(cfg)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, describeSources(cfg))
	}
	if !rep.OK() {
		t.Fatalf("%d violations\n%s\nfirst: %s", rep.Violations.Count, describeSources(cfg), strings.Join(rep.Violations.First, "\n  "))
	}
	return rep, rec
}

// describeSources adds the sources to describe's summary.
func describeSources(cfg Config) string {
	var b strings.Builder
	// Resolved, so that Rate is the sources' sum.
	b.WriteString(describe(cfg.resolved()))
	for k, s := range cfg.Sources {
		fmt.Fprintf(&b, "\n  source %d: %.1f req/s %v-%v tenants %v mix %v inputs %d-%d prio %d params %q timeout %v",
			k, s.Rate, s.Start, s.Stop, s.Tenants, s.Mix, s.InputLenMin, s.InputLenMax, s.Priority, s.Params, s.Timeout)
	}
	if len(cfg.DeviceModels) > 0 {
		fmt.Fprintf(&b, "\n  device models %q", cfg.DeviceModels)
	}
	return b.String()
}

// drawLatency draws a fixed or affine latency model, with or without a
// padding term, for batches of up to bmax inputs of up to inMax bytes.
func drawLatency(t *rapid.T, bmax, inMax int) actors.LatencyModel {
	base := time.Duration(rapid.IntRange(10, 100).Draw(t, "latency_ms")) * time.Millisecond
	lat := actors.FixedLatency(base)
	if rapid.Bool().Draw(t, "affine") {
		lat.PerItem = frac(t, base, 0.01, 1, "per_item_share") / time.Duration(bmax)
	}
	if rapid.Bool().Draw(t, "padded") {
		lat.PerPaddedByte = frac(t, base, 0.01, 0.5, "padding_share") / time.Duration(bmax*inMax)
	}
	return lat
}

// keyDemand is the device time per second (in devices) that traffic
// needs when each compatibility key gathers its batch over at most W =
// SLO - full batch - Margin: a key with rate λ sends batches of s =
// clamp(λW, 1, BatchMax), λ/s of them a second, each costing Predict(s,
// the bucket's longest input). It is the fleet's load for traffic spread
// over keys (a key at a low rate costs a whole small batch per request,
// however few devices the nominal capacity says it needs). Lengths are
// taken as uniform over each source's range.
func keyDemand(cfg Config, rateScale float64) float64 {
	r := cfg.resolved()
	b := r.Batcher
	full := r.Latency.Predict(b.BatchMax, maxInputLen(r))
	w := (b.SLO - full - b.Margin).Seconds()
	type kd struct {
		rate   float64
		maxLen int
	}
	keys := map[actors.Key]*kd{}
	for _, s := range r.sources() {
		total := 0.0
		for _, m := range s.Mix {
			total += m.Weight
		}
		for _, m := range s.Mix {
			rate := s.Rate * rateScale * m.Weight / total
			versions := []actors.VersionConfig{{Name: m.Version, Weight: 1}}
			if mc := modelConfig(b, m.Model); mc != nil && m.Version == "" {
				versions = mc.Versions
			}
			vt := 0
			for _, v := range versions {
				vt += v.Weight
			}
			for _, v := range versions {
				if v.Weight == 0 {
					continue
				}
				if _, ok := b.Route(m.Model, 1, v.Name); !ok {
					continue // rejected at admission: no device time
				}
				n := s.InputLenMax - s.InputLenMin + 1
				for l := s.InputLenMin; l <= s.InputLenMax; l++ {
					k := actors.Key{Model: m.Model, Version: v.Name, Params: s.Params, Bucket: b.Bucket(m.Model, l)}
					d := keys[k]
					if d == nil {
						d = &kd{}
						keys[k] = d
					}
					d.rate += rate * float64(v.Weight) / float64(vt) / float64(n)
					d.maxLen = max(d.maxLen, l)
				}
			}
		}
	}
	need := 0.0
	for _, d := range keys {
		if d.rate == 0 {
			continue
		}
		s := math.Min(float64(b.BatchMax), math.Max(1, math.Floor(d.rate*w)))
		// A device idles for a round trip between batches: its BatchDone
		// reaches the batcher, and the next RunBatch reaches it.
		need += d.rate / s * (r.Latency.Predict(int(s), d.maxLen) + 2*r.NetDelay).Seconds()
	}
	return need
}

func modelConfig(b actors.BatcherConfig, name string) *actors.ModelConfig {
	for i := range b.Models {
		if b.Models[i].Name == name {
			return &b.Models[i]
		}
	}
	return nil
}

func maxInputLen(resolved Config) int {
	n := 0
	for _, s := range resolved.sources() {
		n = max(n, s.InputLenMax)
	}
	return n
}

// TestPropertySLOBelowCapacity is invariant 6: below capacity and without
// faults, p95 < SLO for every tenant and every model.
//
// The exact condition: no faults, cancels, rate limits, quotas or
// per-request timeouts; every model on the batcher's SLO and BatchMax; an
// SLO of 2 to 4 full batches (Predict(BatchMax, longest input)) plus the
// margin and twice the network delay; and an offered load of at most 70%
// of the fleet's batch capacity for this traffic, counted per
// compatibility key (keyDemand: a key gathers its batch over at most SLO -
// full batch - margin, and a small batch costs what the latency model
// says, so traffic spread over many keys at low rates is charged its many
// small batches, not the nominal Devices × BatchMax / latency). Requests
// for unknown models or versions are rejected at once and left out; every
// other request counts, a rejected or expired one as a miss.
//
// What is checked, per tenant and per model: at least 95% of the requests
// complete by their deadline (the p95 of latency, counting a miss as
// infinite, is within the SLO), and the report's p95 of the completed ones
// is below the SLO.
//
// Seen to fail: with predictWait's result tripled (requests rejected
// "overloaded" below capacity), and with dispatch taking one item per
// batch (the fleet's capacity collapses). Not caught, rightly: doubling
// the derived linger, or leaving the compute time out of the slack, as
// below capacity a key flushes on its linger long before its slack runs
// out. With admissionCostsBatches set, it fails on the current actors
// (see there). Rarely (about once in 1,500 runs), before PolicyFair capped
// what a batch that is not full charges the tenants riding in it (see
// actors' Batcher.capRiders): a tenant whose requests rode along in busy
// keys ran ahead of the others, and its requests on a key of its own lost
// every turn until they expired (18 of 67, weights 3 and 4; and 8 of 76,
// equal weights, a model with 5% of the traffic).
func TestPropertySLOBelowCapacity(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := defaultGen()
		o.faults, o.cancels, o.loadMax = false, false, 0
		cfg := drawConfig(t, o)
		b := &cfg.Batcher
		cfg.Traffic.Timeout, cfg.Traffic.CancelRate = 0, 0
		for i := range b.Tenants {
			b.Tenants[i].Rate, b.Tenants[i].Burst, b.Tenants[i].InflightMax = 0, 0, 0
		}
		for i := range b.Models {
			b.Models[i].BatchMax, b.Models[i].SLO = 0, 0
		}
		// Batches of at least 20 absorb Poisson bursts; see the comment.
		b.BatchMax = max(b.BatchMax, 20)
		if !admissionCostsBatches {
			cfg.Latency = actors.FixedLatency(cfg.Latency.Base)
		}
		full := cfg.Latency.Predict(b.BatchMax, cfg.Traffic.InputLenMax)
		// The margin covers the two deliveries the cost model does not see
		// (the batch to its device, the reply to its client).
		b.Margin = max(b.Margin, 2*cfg.NetDelay)
		b.SLO = frac(t, full, 3, 5, "slo_per_full_batch") + b.Margin
		b.PriorityAging = max(b.PriorityAging, 1)

		// The load: a fraction of what keeps keyDemand at the fleet.
		load := rapid.Float64Range(0.01, 0.7).Draw(t, "load_per_key_capacity")
		cfg.Rate = 1
		lo, hi := 0.0, float64(cfg.Devices*b.BatchMax)/full.Seconds()
		for range 50 {
			mid := (lo + hi) / 2
			if keyDemand(cfg, mid) <= load*float64(cfg.Devices) {
				lo = mid
			} else {
				hi = mid
			}
		}
		cfg.Rate = lo
		if cfg.Rate*cfg.Duration.Seconds() > 8000 {
			cfg.Duration = time.Duration(8000 / cfg.Rate * float64(time.Second))
		}
		cfg.Duration = max(cfg.Duration, 50*full)

		rep, rec := policyRun(t, cfg)
		slo := b.SLO
		type count struct{ n, met int }
		byTenant, byModel := map[string]*count{}, map[string]*count{}
		for i := range rec.reqs {
			q := &rec.reqs[i]
			if !q.submitted {
				continue
			}
			if q.reply.Outcome == actors.Rejected && (q.reply.Reason == actors.ReasonUnknownModel || q.reply.Reason == actors.ReasonInvalid) {
				continue
			}
			for _, c := range []*count{counter(byTenant, q.req.Tenant), counter(byModel, q.req.Model)} {
				c.n++
				if q.reply.Outcome == actors.Completed && q.replyAt-q.req.Arrival <= slo {
					c.met++
				}
			}
		}
		for _, g := range []struct {
			what string
			m    map[string]*count
			rep  map[string]NameStats
		}{{"tenant", byTenant, rep.Tenants}, {"model", byModel, rep.Models}} {
			for name, c := range g.m {
				if c.n < sloSampleMin {
					continue
				}
				if float64(c.met) < 0.95*float64(c.n) {
					t.Fatalf("%s %q: %d of %d requests within the SLO %v (p95 over all must be within it); report %+v\n%s",
						g.what, name, c.met, c.n, slo, g.rep[name], describe(cfg))
				}
				if p95 := g.rep[name].LatencyMs.P95; p95 >= ms(slo) {
					t.Fatalf("%s %q: p95 %v ms, SLO %v\n%s", g.what, name, p95, slo, describe(cfg))
				}
			}
		}
	})
}

// admissionCostsBatches says whether the batcher's admission prices the
// batches ahead of a request at their own predicted cost. It does now (it
// once charged every batch ahead as a full batch of empty inputs, which
// rejected requests "overloaded" at 70% of capacity under a per-item
// cost); with it false, TestPropertySLOBelowCapacity draws fixed latency
// models only.
const admissionCostsBatches = true

// sloSampleMin is the fewest requests of a tenant or model whose p95 the
// SLO property checks: the p95 of a dozen requests is their maximum, and
// one unlucky request is not a broken invariant.
const sloSampleMin = 50

func counter[T any](m map[string]*T, name string) *T {
	c := m[name]
	if c == nil {
		c = new(T)
		m[name] = c
	}
	return c
}

// fairnessRun draws a run of 2 to 4 backlogged tenants (weights 1, or 1
// to 4 when weighted), one source each, every tenant offering 1.5 to 3
// times its weighted share of the fleet's capacity (Devices × BatchMax /
// full batch), on the batch sizes, latency models and SLOs of 3 to 5 full
// batches that it draws. Either each tenant has a model (a key) of its own
// (shared false), or all share one.
//
// Backlogged means what limits a tenant is the scheduler, not admission.
// Each on its own key: deadlines far past what queueing takes (and
// different for each tenant) and queues of a few batches (QueueMax counts a
// key's items on devices too, so one batch per device more), so every
// tenant always has a full batch queued.
// Sharing a key, the key's queue bound cannot tell tenants apart, so
// there the deadlines are the SLO and admission's predicted wait is the
// limit, which does weigh the tenants (see admissionTenantAware).
func fairnessRun(t *rapid.T, weighted, shared bool) (Config, []float64, []float64) {
	cfg := DefaultConfig()
	cfg.Seed = rapid.Uint64().Draw(t, "seed")
	cfg.Devices = rapid.IntRange(1, 6).Draw(t, "devices")
	b := &cfg.Batcher
	// Small batches: fairness is the division of batches, and small ones
	// keep the runs (hundreds of batches) short.
	b.BatchMax = rapid.IntRange(5, 20).Draw(t, "batch_max")
	cfg.Latency = drawLatency(t, b.BatchMax, 64)
	full := cfg.Latency.Predict(b.BatchMax, 64)
	// Room to queue two full batches or more: the fair discipline shares
	// out what is queued, and with no room to queue, admission (first
	// come) is all that decides. Sharing a key, three: at an SLO of three
	// batch times a light tenant's admitted requests are overtaken by the
	// heavier tenants' later ones often enough to expire, and it stays
	// 10% short of its share however long the run (weights 3, 3 and 1,
	// one device, the light tenant offering 1.5x its share: 38.7 req/s
	// against 43.0 over 30 times the usual duration).
	lo, hi := 3.0, 5.0
	if shared {
		lo, hi = 4, 6
	}
	b.SLO = frac(t, full, lo, hi, "slo_per_full_batch") + b.Margin
	// Across keys only PolicyFair weighs tenants; inside one key both
	// policies take requests by the tenants' weighted service.
	b.KeyPolicy = actors.PolicyFair
	if shared {
		b.KeyPolicy = rapid.SampledFrom([]actors.KeyPolicy{actors.PolicyFair, actors.PolicySlack}).Draw(t, "key_policy")
	}
	n := rapid.IntRange(2, 4).Draw(t, "tenants")
	capacity := float64(cfg.Devices*b.BatchMax) / full.Seconds()
	weights := make([]float64, n)
	total, least := 0.0, math.Inf(1)
	for i := range weights {
		weights[i] = 1
		if weighted {
			weights[i] = float64(rapid.IntRange(1, 4).Draw(t, fmt.Sprintf("weight%d", i)))
		}
		total += weights[i]
		least = min(least, weights[i])
	}
	if !shared {
		b.QueueMax = (cfg.Devices + rapid.IntRange(2, 4).Draw(t, "queue_batches")) * b.BatchMax
		b.QueueTotalMax = n * b.QueueMax
	}
	offered := make([]float64, n)
	for i := range n {
		name := fmt.Sprintf("t%d", i)
		b.Tenants = append(b.Tenants, actors.TenantConfig{Name: name, Weight: int(weights[i])})
		s := DefaultTrafficConfig()
		s.InputPool = 256
		s.Tenants = []string{name}
		s.Mix = []ModelMix{{Model: "m", Version: "v1", Weight: 1}}
		if !shared {
			s.Mix[0].Model = fmt.Sprintf("m%d", i)
			// Deadlines that differ by tenant, all far past the wait:
			// earliest-deadline-first alone would serve the tenant with
			// the nearest ones, so only the fair discipline passes.
			s.Timeout = time.Duration(rapid.IntRange(200, 1000).Draw(t, fmt.Sprintf("timeout%d_batches", i))) * full
		}
		offered[i] = capacity * weights[i] / total * rapid.Float64Range(1.5, 3).Draw(t, fmt.Sprintf("overload%d", i))
		s.Rate = offered[i]
		cfg.Sources = append(cfg.Sources, s)
	}
	// Long enough for the shares to settle. Across keys every batch goes
	// to one tenant, so a share is measured to a batch: 20 batches or
	// more for the lightest tenant keep that under 5%. With several
	// devices a tenant can be a batch ahead on each of them at once, so
	// that many batches more: 10 per device. (Counted for one device only,
	// TestPropertySplitFairness failed about one run in a few thousand: 5
	// devices of 5-item batches, weights 1 and 4, 450 ms, the weight-1
	// tenant served 11% over its share; 2-4% over across 3 to 4 times the
	// run. Part of that is the policy's: the weight-4 tenant's queue runs
	// dry when it holds every device, and it comes back levelled to the
	// system virtual time (Batcher.levelled), losing what it was owed.
	// Levelling only a tenant with nothing on a device either passes that
	// seed, but lets a tenant that keeps one request in flight bank credit
	// without bound and then starve the others with a burst: the policy
	// keeps it. -rapid.seed=13494375441178531943 still shrinks to a run
	// 10.2% over; 6,000 drawn runs passed.) Sharing a key,
	// admission takes requests one by one as they come (Poisson): 1,600
	// or more for the lightest tenant keep the noise near 2.5% (one
	// standard deviation), so that a tenant 10% short is four of them
	// off, the policy's doing and not chance. (With 400, a light tenant
	// 10% short of its share failed a few percent of the test's runs and
	// passed the rest; see TestFairnessLightTenantSharedKey.)
	batches := 20 * total / least * max(1, float64(cfg.Devices)/2)
	if shared {
		batches = max(batches, 1600*total/least/float64(b.BatchMax))
	}
	batches *= rapid.Float64Range(1, 1.5).Draw(t, "duration_factor")
	cfg.Duration = time.Duration(max(batches/float64(cfg.Devices), 30) * float64(full))
	cfg.EventsMax = 50_000_000
	return cfg, weights, offered
}

// admissionTenantAware says whether tenants sharing one key are drawn.
// Admission predicts a request's wait from what the fair discipline serves
// before it (its tenant's own queue, and of each other tenant at most its
// weighted share meanwhile), which fixed the gross case (two equal tenants
// on one key offering 1,500 and 3,000 req/s were served 828 and 1,168; now
// 997 and 999). Under an SLO of a few batch times a tenant offering only a
// little above its share then still got 11% less (equal weights, one
// device, BatchMax 5, 10 ms batches, SLO 35 ms, offers of 1.5x, 3x, 3x the
// share: 147.5 req/s against 166): admission keeps its backlog to a few
// requests, it idles between Poisson arrivals, and a tenant back from idle
// was levelled to the service of the tenant served last, behind everyone.
// Levelled to the start of the batch in service instead (the system
// virtual time of start-time fair queuing), it gets 164-165. With weights,
// the other tenants' requests that arrive while it waits count too, from
// its place in the weighted order (see actors' keyQueue.aheadOf): counted
// only by what they held, a weight-1 tenant beside heavier ones was
// admitted past what it could make and served 10% below its share
// (TestFairnessLightTenantSharedKey).
const admissionTenantAware = true

// agingSamePriority says whether priority aging leaves requests of equal
// priority to the fair share. It does now: levels are compared only between
// different priorities (it once lifted any request that had waited
// PriorityAging, which flattened the weights: 268.7 and 406.7 req/s for
// shares of 225 and 450). With it false, TestPropertyFairness draws equal
// weights only.
const agingSamePriority = true

// TestPropertyFairness is invariant 7's first half. Backlogged tenants
// (see fairnessRun), each on a key of its own (PolicyFair) or all sharing
// one (either KeyPolicy):
//
//   - equal weights: Jain's index of their throughputs (completions per
//     second of the safety phase, from the report) is at least 0.95;
//   - weights of 1 to 4: each tenant's throughput is within 10% of its
//     weighted max-min share of the throughput all of them got (the
//     water-filling of that total by weight, capped by what each offered;
//     every tenant here offers more than its share, so the share is total
//     × weight / Σ weights).
//
// Seen to fail: with PolicyFair's comparison of the tenants' service
// removed from Batcher.before (the key with the least slack then wins: the
// tenant with the nearest deadlines; Jain 0.94); with the tenants' device
// time charged without dividing by their weights; with aged levels
// compared between equal priorities in Batcher.before again; and with a
// tenant back from idle levelled to the service of the tenant served last
// (see admissionTenantAware: failed after 560 runs, 147.5 req/s against a
// share of 166); and, rarely, with it levelled to the system virtual time
// with no credit (see actors' Batcher.levelled: weights 1/2/3/3 on one key
// and one device, SLO 71 ms for 16 ms batches, the weight-1 tenant served
// 29.6 req/s against a share of 33.2); and, rarely, with admission counting
// only what the other tenants sharing the key hold now (see
// TestFairnessLightTenantSharedKey, which fails on it every time; here
// -rapid.seed=3867189124230555506 did: weights 3 and 1, the weight-1
// tenant served 395.8 req/s against a share of 440.9).
func TestPropertyFairness(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		weighted := agingSamePriority && rapid.Bool().Draw(t, "weighted")
		shared := admissionTenantAware && rapid.Bool().Draw(t, "shared_key")
		cfg, weights, offered := fairnessRun(t, weighted, shared)
		rep, _ := policyRun(t, cfg)
		xs := make([]float64, len(weights))
		total := 0.0
		for i := range xs {
			xs[i] = rep.Tenants[fmt.Sprintf("t%d", i)].ThroughputRPS
			total += xs[i]
		}
		if !weighted {
			if j := ledger.Jain(xs); j < 0.95 {
				t.Fatalf("Jain's index %.4f < 0.95: throughputs %.1f (offered %.1f)\n%s", j, xs, offered, describeSources(cfg))
			}
			return
		}
		share := maxMinShares(total, weights, offered)
		for i := range xs {
			if math.Abs(xs[i]-share[i]) > 0.1*share[i] {
				t.Fatalf("tenant t%d (weight %g): %.1f req/s, weighted max-min share %.1f (±10%%); all: %.1f, shares %.1f, offered %.1f\n%s",
					i, weights[i], xs[i], share[i], xs, share, offered, describeSources(cfg))
			}
		}
	})
}

// TestFairnessLightTenantSharedKey is TestPropertyFairness's rare failure
// made deterministic: tenants of weights 3 and 1 share one key on 4
// devices (BatchMax 12, 10 ms + 0.57 ms an item, SLO 74 ms: about 4.4 full
// batches), each offering about 1.7 and 3 times its share, for 2.75 s, on
// three seeds. Asserted, for the weight-1 tenant: its throughput within 5%
// of its weighted share of what both got (more than 1,800 completions, so
// a standard deviation is under 2.5%), and at most 5% of the requests it
// was admitted expired (admission said they would make their deadline).
//
// Seen to fail with admission counting only what the other tenants hold
// now (keyQueue.aheadOf as it was before it counted their arrivals
// meanwhile and t's place in the weighted order): 601.8, 603.3 and 606.5
// req/s against shares of 671.5, 672.3 and 672.9 (0.90), and 22-23% of
// its admitted requests expired; with the other tenants' arrivals
// meanwhile left out, 0.95-0.96 and 12-14% expired; with t's place in the
// weighted order left out (every tenant taken as level), 6.2% expired on
// seed 0.
func TestFairnessLightTenantSharedKey(t *testing.T) {
	for _, seed := range []uint64{0, 1, 2} {
		cfg := DefaultConfig()
		cfg.Seed = seed
		cfg.Devices = 4
		b := &cfg.Batcher
		b.BatchMax = 12
		b.KeyPolicy = actors.PolicyFair
		cfg.Latency = actors.LatencyModel{Base: 10 * time.Millisecond, PerItem: 570 * time.Microsecond, PerPaddedByte: 436}
		b.SLO = 74 * time.Millisecond
		weights := []float64{3, 1}
		cfg.Duration = 2750 * time.Millisecond
		rep := runSharedKey(t, cfg, weights, []float64{3528, 2096})
		heavy, light := rep.Tenants["t0"], rep.Tenants["t1"]
		share := (heavy.ThroughputRPS + light.ThroughputRPS) * weights[1] / (weights[0] + weights[1])
		admitted := light.Offered - light.Rejected
		expired := float64(light.Expired) / float64(admitted)
		t.Logf("seed %d: weight 1: %.1f req/s, share %.1f (%.3f); %d of %d admitted expired (%.1f%%); weight 3: %.1f req/s, %d expired",
			seed, light.ThroughputRPS, share, light.ThroughputRPS/share, light.Expired, admitted, 100*expired, heavy.ThroughputRPS, heavy.Expired)
		if math.Abs(light.ThroughputRPS-share) > 0.05*share {
			t.Errorf("seed %d: the weight-1 tenant got %.1f req/s, its weighted share is %.1f (±5%%)", seed, light.ThroughputRPS, share)
		}
		if expired > 0.05 {
			t.Errorf("seed %d: %d of the weight-1 tenant's %d admitted requests expired (%.1f%%, at most 5%%)", seed, light.Expired, admitted, 100*expired)
		}
	}
}

// TestFairnessHeavyTenantLateItems is TestPropertyFairness's rare failure
// -rapid.seed=6297350691544086392 made deterministic: tenants of weights 1,
// 1 and 4 share one key on 2 devices (BatchMax 11, 14 ms + 0.28 ms an
// item, SLO 74 ms: 4 full batches), offering about 1.7, 1.7 and 3 times
// their shares of the devices' capacity, on three seeds. The weight-4 tenant's queue is long and
// its oldest requests are the ones a batch trims as late. Asserted: every
// tenant's throughput within 3% of its weighted share of what all got (more
// than 1,500 completions each).
//
// Seen to fail with the trimmed room left empty (Batcher.dispatch): the
// light tenants 5-11% over their shares, the heavy one 3-5% under, and
// 7-12% fewer requests served in all (its items were charged 1.84 ms each
// against the others' 1.60, counted with a patched build).
func TestFairnessHeavyTenantLateItems(t *testing.T) {
	weights := []float64{1, 1, 4}
	for _, seed := range []uint64{0, 1, 2} {
		cfg := DefaultConfig()
		cfg.Seed = seed
		cfg.Devices = 2
		b := &cfg.Batcher
		b.BatchMax = 11
		b.KeyPolicy = actors.PolicySlack
		cfg.Latency = actors.LatencyModel{Base: 14 * time.Millisecond, PerItem: 282 * time.Microsecond, PerPaddedByte: 214}
		b.SLO = 74 * time.Millisecond
		cfg.Duration = 7500 * time.Millisecond
		rep := runSharedKey(t, cfg, weights, []float64{366.5, 352.6, 2550.6})
		xs, total := make([]float64, len(weights)), 0.0
		for i := range weights {
			xs[i] = rep.Tenants[fmt.Sprintf("t%d", i)].ThroughputRPS
			total += xs[i]
		}
		for i, w := range weights {
			share := total * w / 6
			t.Logf("seed %d: t%d (weight %g) %.1f req/s, share %.1f (%.3f)", seed, i, w, xs[i], share, xs[i]/share)
			if math.Abs(xs[i]-share) > 0.03*share {
				t.Errorf("seed %d: t%d (weight %g) got %.1f req/s, its weighted share is %.1f (±3%%)", seed, i, w, xs[i], share)
			}
		}
	}
}

// runSharedKey runs cfg with tenants t0, t1, ... of weights, each sending
// rates[i] to the default model (one key), and checks the run's invariants.
func runSharedKey(t *testing.T, cfg Config, weights, rates []float64) Report {
	t.Helper()
	for i, rate := range rates {
		name := fmt.Sprintf("t%d", i)
		cfg.Batcher.Tenants = append(cfg.Batcher.Tenants, actors.TenantConfig{Name: name, Weight: int(weights[i])})
		s := DefaultTrafficConfig()
		s.InputPool = 256
		s.Tenants = []string{name}
		s.Rate = rate
		cfg.Sources = append(cfg.Sources, s)
	}
	rep := mustRun(t, cfg)
	if err := rep.Check(); err != nil {
		t.Fatalf("seed %d: %v: %q", cfg.Seed, err, rep.Violations.First)
	}
	return rep
}

// maxMinShares is the weighted max-min fair division of total between
// demands: water-filling, each tenant getting at most what it asks for and
// the rest shared by weight among the others.
func maxMinShares(total float64, weights, demand []float64) []float64 {
	share := make([]float64, len(weights))
	open := make([]bool, len(weights))
	for i := range open {
		open[i] = true
	}
	left := total
	for range len(weights) {
		w := 0.0
		for i, o := range open {
			if o {
				w += weights[i]
			}
		}
		if w == 0 {
			break
		}
		capped := false
		for i, o := range open {
			if o && demand[i] <= left*weights[i]/w {
				share[i], open[i], capped = demand[i], false, true
				left -= demand[i]
			}
		}
		if !capped {
			for i, o := range open {
				if o {
					share[i] = left * weights[i] / w
				}
			}
			break
		}
	}
	return share
}

// withSources splits a drawn run's traffic into 1 to 3 sources that differ
// in their parameters, input lengths and priorities (so keys differ in
// Params and buckets as well as in model and version), keeping the total
// rate.
func withSources(t *rapid.T, cfg Config) Config {
	n := rapid.IntRange(1, 3).Draw(t, "sources")
	base := cfg.Traffic
	for k := range n {
		s := base
		s.Rate = cfg.Rate / float64(n)
		s.Params = rapid.SampledFrom([]string{"", "", "temp=0", "temp=1"}).Draw(t, fmt.Sprintf("source%d_params", k))
		s.Priority = int8(rapid.IntRange(-1, 1).Draw(t, fmt.Sprintf("source%d_priority", k)))
		s.InputLenMin = rapid.IntRange(base.InputLenMin, base.InputLenMax).Draw(t, fmt.Sprintf("source%d_input_len_min", k))
		s.InputLenMax = rapid.IntRange(s.InputLenMin, base.InputLenMax).Draw(t, fmt.Sprintf("source%d_input_len_max", k))
		cfg.Sources = append(cfg.Sources, s)
	}
	return cfg
}

// TestPropertyNoMixing is the compatibility key: a batch never mixes
// models, versions, parameters or length buckets; under BucketMerge it
// also takes only shorter buckets of its own model version and parameters,
// and holds at least one item of its own bucket. Runs are drawn as for the
// invariants (faults, overload, cancels), always with a model registry
// (routed versions, length buckets), from one to three sources with
// different Params, lengths and priorities, BucketMerge on or off. The
// ledger checks it (ledger.ViolationBatch) and so does policyRecorder, from the
// registry's own bucket rule (actors.BatcherConfig.Bucket) and each item's
// input.
//
// Seen to fail: with BucketMerge taking the next longer bucket instead of
// the shorter ones, and with the key built without Params (ledger and
// recorder both).
func TestPropertyNoMixing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t, defaultGen())
		if len(cfg.Batcher.Models) == 0 {
			in := cfg.Traffic
			cfg.Batcher.Models = drawRegistry(t, cfg.Batcher.BatchMax, cfg.Batcher.SLO, in.InputLenMin, in.InputLenMax)
		}
		cfg = withSources(t, cfg)
		rep, rec := policyRun(t, cfg)
		if n := rep.Violations.ByKind[ledger.ViolationBatch]; n > 0 {
			t.Fatalf("ledger: %d batch violations\n%s", n, describeSources(cfg))
		}
		if rec.errsN > 0 {
			t.Fatalf("recorder: %d errors: %s\n%s", rec.errsN, strings.Join(rec.errs, "\n  "), describeSources(cfg))
		}
	})
}

// TestPropertyWarmModels is the placement rule: a device is only
// ever sent a batch of a model it announced as warm (DeviceReady.Models).
// Each device holds a drawn subset of the models a, b and c (an empty set
// holds any model), so some models may be warm nowhere (their requests
// wait and expire) and some devices hold everything; runs otherwise as
// for the invariants, faults and restarts included (a restarted device
// announces its models again). The ledger checks it (ledger.ViolationWarm), and
// so does policyRecorder.
//
// Seen to fail: with the batcher's devState.holds returning true for
// every model (ledger and recorder both).
func TestPropertyWarmModels(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t, defaultGen())
		cfg.DeviceModels = make([][]string, cfg.Devices)
		for i := range cfg.DeviceModels {
			for _, m := range []string{"a", "b", "c"} {
				if rapid.Bool().Draw(t, fmt.Sprintf("device%d_holds_%s", i, m)) {
					cfg.DeviceModels[i] = append(cfg.DeviceModels[i], m)
				}
			}
		}
		rep, rec := policyRun(t, cfg)
		if n := rep.Violations.ByKind[ledger.ViolationWarm]; n > 0 {
			t.Fatalf("ledger: %d warm-model violations\n%s", n, describeSources(cfg))
		}
		if rec.errsN > 0 {
			t.Fatalf("recorder: %d errors: %s\n%s", rec.errsN, strings.Join(rec.errs, "\n  "), describeSources(cfg))
		}
	})
}

// TestPropertyCanaryWeights: a model whose versions have routing weights
// (v1 and v2 a canary from 99/1 to 50/50, and v3 either a third routed
// version or a weight-0 one served only when pinned) sends each request
// that names no version to version v with probability p = weight/total,
// deterministically by request ID. Over the N requests routed (their
// Reply.Version, whatever their outcome), the count on each version is
// within 5 standard deviations of a binomial, |n - Np| <= 5·sqrt(Np(1-p))
// + 1 (5, not 4: `make soak` makes 15,000 such comparisons, and at 4 one
// would fail by chance about once a soak); the batches that ran them agree
// with the replies; and requests that pin a version (another source)
// always get it, the weight-0 version too. Traffic comes from two to four
// interleaved sources, so the IDs the routing hashes are those of a real
// multi-source run.
//
// Seen to fail: with the routing hash taken modulo the first version's
// weight instead of the total (everything on v1), and with a pinned
// version ignored (pinned requests routed by weight).
func TestPropertyCanaryWeights(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.Seed = rapid.Uint64().Draw(t, "seed")
		cfg.Devices = 2
		cfg.Latency = actors.FixedLatency(10 * time.Millisecond)
		cfg.Batcher.SLO = 50 * time.Millisecond
		w2 := rapid.IntRange(1, 50).Draw(t, "w2_percent")
		// v3 is either a third routed version (weight w2, v1 giving it up)
		// or one served only to requests that pin it (weight 0).
		v3 := rapid.SampledFrom([]int{0, w2}).Draw(t, "v3_weight")
		cfg.Batcher.Models = []actors.ModelConfig{{Name: "a", Versions: []actors.VersionConfig{
			{Name: "v1", Weight: max(100-w2-v3, 1)}, {Name: "v2", Weight: w2}, {Name: "v3", Weight: v3}}}}
		n := rapid.IntRange(1, 3).Draw(t, "routed_sources")
		total := rapid.Float64Range(500, 3000).Draw(t, "rate")
		for range n {
			s := DefaultTrafficConfig()
			s.InputPool = 64
			s.Mix = []ModelMix{{Model: "a", Weight: 1}}
			s.Rate = total / float64(n)
			cfg.Sources = append(cfg.Sources, s)
		}
		pin := DefaultTrafficConfig()
		pin.InputPool = 64
		pin.Mix = []ModelMix{{Model: "a", Version: "v3", Weight: 1}, {Model: "a", Version: "v1", Weight: 1}}
		pin.Rate = rapid.Float64Range(10, 200).Draw(t, "pinned_rate")
		cfg.Sources = append(cfg.Sources, pin)
		cfg.Duration = time.Duration(rapid.Float64Range(1, 3).Draw(t, "seconds") * float64(time.Second))
		_, rec := policyRun(t, cfg)

		vs := cfg.Batcher.Models[0].Versions
		sum := 0
		for _, v := range vs {
			sum += v.Weight
		}
		routed := map[string]int{}
		n2 := 0
		for i := range rec.reqs {
			q := &rec.reqs[i]
			if !q.submitted || !q.replied {
				continue
			}
			if q.req.Version != "" {
				if q.reply.Version != q.req.Version || (q.version != "" && q.version != q.req.Version) {
					t.Fatalf("request %d pinned %q: reply version %q, batch version %q\n%s", i, q.req.Version, q.reply.Version, q.version, describeSources(cfg))
				}
				continue
			}
			if q.version != "" && q.version != q.reply.Version {
				t.Fatalf("request %d: ran on %q, reply says %q", i, q.version, q.reply.Version)
			}
			routed[q.reply.Version]++
			n2++
		}
		for _, v := range vs {
			p := float64(v.Weight) / float64(sum)
			got := float64(routed[v.Name])
			want := float64(n2) * p
			if tol := 5*math.Sqrt(float64(n2)*p*(1-p)) + 1; math.Abs(got-want) > tol {
				t.Fatalf("version %s (weight %d of %d): %v of %d routed requests, want %.1f ± %.1f; all %v\n%s",
					v.Name, v.Weight, sum, got, n2, want, tol, routed, describeSources(cfg))
			}
		}
		if routed[""] > 0 {
			t.Fatalf("%d routed requests answered with no version\n%s", routed[""], describeSources(cfg))
		}
	})
}

// TestPropertyQuota is the tenant limits. One to three tenants, each
// with its own source offering 1.5 to 4 times its rate limit (a token
// bucket of Rate per second and Burst), some also with an in-flight cap
// (InflightMax), and one tenant without limits; the fleet has room for
// all that the limits let through, deadlines are long (nothing expires),
// and there are no faults, cancels or network delay. For every limited
// tenant, from the messages:
//
//   - rate: over every window [s, t] between two of its admissions (a
//     Submit the batcher did not reject, at its delivery), it was admitted
//     at most Burst + Rate·(t-s) times; over [0, t], at most Burst +
//     Rate·t (the bucket starts full);
//   - in flight: at each of its admissions, its admitted requests not yet
//     answered, this one included, are at most InflightMax (with no
//     network delay and nothing answered by the batcher itself, a reply
//     is delivered next to the BatchDone that frees its place, so this
//     count is the batcher's own);
//   - every rejection is rate_limited or quota, with a positive
//     RetryAfter, and a rate_limited one's RetryAfter is at most the time
//     one token takes (1/Rate) plus a millisecond;
//   - a tenant offering twice its rate over a run of four bursts or more
//     is limited (rate_limited or quota) at least once, so the property is
//     exercised, and the tenant without limits never is.
//
// Seen to fail: with the token bucket refilled at twice its Rate, and with
// the in-flight check `held >= InflightMax` changed to `>`.
func TestPropertyQuota(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.Seed = rapid.Uint64().Draw(t, "seed")
		cfg.Devices = rapid.IntRange(2, 8).Draw(t, "devices")
		b := &cfg.Batcher
		b.BatchMax = rapid.IntRange(20, 100).Draw(t, "batch_max")
		cfg.Latency = drawLatency(t, b.BatchMax, 64)
		full := cfg.Latency.Predict(b.BatchMax, 64)
		capacity := float64(cfg.Devices*b.BatchMax) / full.Seconds()
		b.SLO = 4 * full
		b.Tenants = nil
		n := rapid.IntRange(1, 3).Draw(t, "limited_tenants")
		offered := 0.0
		for i := range n {
			name := fmt.Sprintf("t%d", i)
			tc := actors.TenantConfig{Name: name, Weight: 1,
				Rate:  capacity * rapid.Float64Range(0.02, 0.2).Draw(t, fmt.Sprintf("rate%d_per_capacity", i)),
				Burst: rapid.IntRange(1, 2*b.BatchMax).Draw(t, fmt.Sprintf("burst%d", i))}
			if rapid.Bool().Draw(t, fmt.Sprintf("inflight_cap%d", i)) {
				tc.InflightMax = rapid.IntRange(1, 2*b.BatchMax).Draw(t, fmt.Sprintf("inflight_max%d", i))
			}
			b.Tenants = append(b.Tenants, tc)
			s := DefaultTrafficConfig()
			s.InputPool = 64
			s.Tenants = []string{name}
			s.Rate = tc.Rate * rapid.Float64Range(1.5, 4).Draw(t, fmt.Sprintf("overload%d", i))
			s.Timeout = 100 * full
			s.Arrival = rapid.SampledFrom([]ArrivalProcess{Poisson, Constant}).Draw(t, fmt.Sprintf("arrival%d", i))
			offered += s.Rate
			cfg.Sources = append(cfg.Sources, s)
		}
		free := DefaultTrafficConfig()
		free.InputPool = 64
		free.Tenants = []string{"free"}
		free.Rate = capacity * rapid.Float64Range(0.01, 0.2).Draw(t, "free_rate_per_capacity")
		free.Timeout = 100 * full
		offered += free.Rate
		cfg.Sources = append(cfg.Sources, free)
		cfg.Duration = time.Duration(rapid.IntRange(20, 200).Draw(t, "duration_batches")) * full
		if offered*cfg.Duration.Seconds() > 6000 {
			cfg.Duration = max(time.Duration(6000/offered*float64(time.Second)), 10*full)
		}
		_, rec := policyRun(t, cfg)

		for _, tc := range b.Tenants {
			checkQuota(t, cfg, rec, tc)
		}
		for i := range rec.reqs {
			q := &rec.reqs[i]
			if q.submitted && q.req.Tenant == "free" && (q.reply.Reason == actors.ReasonRateLimited || q.reply.Reason == actors.ReasonQuota) {
				t.Fatalf("request %d of the unlimited tenant: %v\n%s", i, q.reply.Reason, describeSources(cfg))
			}
		}
	})
}

// checkQuota checks one limited tenant's admissions; see
// TestPropertyQuota.
func checkQuota(t *rapid.T, cfg Config, rec *policyRecorder, tc actors.TenantConfig) {
	const eps = 1e-6
	var admits []time.Duration
	held, limited, offered := 0, 0, 0
	for _, e := range rec.events {
		q := &rec.reqs[e.id]
		if q.req.Tenant != tc.Name {
			continue
		}
		admitted := q.replied && q.reply.Outcome != actors.Rejected
		switch {
		case e.submit:
			offered++
			if !admitted {
				continue
			}
			admits = append(admits, q.submitAt)
			held++
			if tc.InflightMax > 0 && held > tc.InflightMax {
				t.Fatalf("tenant %s: %d requests in flight at %v (admitting %d), InflightMax %d\n%s",
					tc.Name, held, q.submitAt, e.id, tc.InflightMax, describeSources(cfg))
			}
		case admitted:
			held--
		}
	}
	// Over [0, t] and over every window between two admissions: with f(j)
	// = j - Rate·a_j (j counting from 1), admissions in [a_i, a_j] are
	// f(j) - f(i) + 1 + Rate·(a_j - a_i).
	fmin := math.Inf(1)
	for j, a := range admits {
		f := float64(j+1) - tc.Rate*a.Seconds()
		if f > float64(tc.Burst)+eps {
			t.Fatalf("tenant %s: %d admissions by %v, Burst %d + Rate %.2f/s × t = %.2f\n%s",
				tc.Name, j+1, a, tc.Burst, tc.Rate, float64(tc.Burst)+tc.Rate*a.Seconds(), describeSources(cfg))
		}
		fmin = min(fmin, f-1)
		if f-fmin > float64(tc.Burst)+eps {
			t.Fatalf("tenant %s: a window ending at %v holds %.0f admissions more than Rate allows; Burst %d\n%s",
				tc.Name, a, f-fmin, tc.Burst, describeSources(cfg))
		}
	}
	for i := range rec.reqs {
		q := &rec.reqs[i]
		if !q.submitted || q.req.Tenant != tc.Name || q.reply.Outcome != actors.Rejected {
			continue
		}
		switch r := q.reply; r.Reason {
		case actors.ReasonRateLimited:
			limited++
			if r.RetryAfter <= 0 || r.RetryAfter > time.Duration(float64(time.Second)/tc.Rate)+time.Millisecond {
				t.Fatalf("tenant %s: request %d rate limited with RetryAfter %v; one token takes %v\n%s",
					tc.Name, i, r.RetryAfter, time.Duration(float64(time.Second)/tc.Rate), describeSources(cfg))
			}
		case actors.ReasonQuota:
			limited++
			if r.RetryAfter <= 0 {
				t.Fatalf("tenant %s: request %d over quota with RetryAfter %v\n%s", tc.Name, i, r.RetryAfter, describeSources(cfg))
			}
		default:
			t.Fatalf("tenant %s: request %d rejected %v (%s); a tenant over its limits is rejected rate_limited or quota\n%s",
				tc.Name, i, r.Reason, r.Err, describeSources(cfg))
		}
	}
	var s TrafficConfig
	for _, src := range cfg.Sources {
		if src.Tenants[0] == tc.Name {
			s = src
		}
	}
	if d := cfg.Duration.Seconds(); s.Rate >= 2*tc.Rate && tc.Rate*d >= 4*float64(tc.Burst) && limited == 0 {
		t.Fatalf("tenant %s: offered %d at %.1f/s for %.2fs against Rate %.1f, Burst %d, and never limited\n%s",
			tc.Name, offered, s.Rate, d, tc.Rate, tc.Burst, describeSources(cfg))
	}
}

// TestPropertyLowPriorityBound is the guarantee that a lower
// priority cannot wait for ever. A steady high-priority load (a source of
// PriorityHigh requests at 0.3 to 1.5 times the fleet's capacity: below
// it, or saturating it) and a trickle of PriorityLow requests share one
// model (one key), from one tenant or two; the low requests' deadlines are
// far off, so only the priority rule can hold them back. Every low request
// that is admitted completes within
//
//	max(2·PriorityAging, SLO) + Linger + 2·B + Margin + 2·NetDelay
//
// of its arrival, B being a full batch, Predict(BatchMax, longest input).
// Why: after 2·PriorityAging its sub-queue has aged two levels, to the high
// level (keyqueue.go, subQueue.level), where it ties with the high
// requests; ties go to the tenant with less weighted service and then to
// the older head, so the high requests that came before it may still go
// first, but each of those leaves (served or expired) by its deadline, at
// most an SLO after it came. From then on it goes first: its key is due
// within a linger (at once if full), a device comes free within one batch
// time B, and its own batch takes another B. Below capacity the high
// queue is short and the wait is about 2·PriorityAging; saturated, about
// the SLO. No faults.
//
// Across keys the bound does not hold under PolicySlack, where a low
// request with a far deadline ties at the high level and then loses every
// comparison of slack until its deadline nears (which is that policy's
// meaning, so it is not checked here).
//
// Seen to fail: with subQueue.level capped at PriorityNormal (a low
// request then never catches up with a saturating high load), and with
// aging counted in units of 4·PriorityAging.
func TestPropertyLowPriorityBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.Seed = rapid.Uint64().Draw(t, "seed")
		cfg.Devices = rapid.IntRange(1, 6).Draw(t, "devices")
		b := &cfg.Batcher
		b.BatchMax = rapid.IntRange(5, 100).Draw(t, "batch_max")
		cfg.Latency = drawLatency(t, b.BatchMax, 64)
		full := cfg.Latency.Predict(b.BatchMax, 64)
		b.SLO = frac(t, full, 2, 4, "slo_per_full_batch") + b.Margin
		b.PriorityAging = max(frac(t, b.SLO, 0.05, 1, "aging_per_slo"), time.Microsecond)
		b.KeyPolicy = rapid.SampledFrom([]actors.KeyPolicy{actors.PolicyFair, actors.PolicySlack}).Draw(t, "key_policy")
		if rapid.Bool().Draw(t, "net_delay") {
			cfg.NetDelay = frac(t, full, 0, 0.05, "net_delay_per_batch")
		}
		capacity := float64(cfg.Devices*b.BatchMax) / full.Seconds()
		hi := DefaultTrafficConfig()
		hi.InputPool = 64
		hi.Priority = actors.PriorityHigh
		hi.Tenants = []string{"hi"}
		hi.Rate = capacity * rapid.Float64Range(0.3, 1.5).Draw(t, "high_load")
		lo := hi
		lo.Priority = actors.PriorityLow
		if rapid.Bool().Draw(t, "own_tenant") {
			lo.Tenants = []string{"lo"}
		}
		// A trickle: at most 5% of capacity, or the low requests queue
		// behind each other rather than behind the high load (a floor of
		// 20 req/s on a fleet of 25 once made them 80% of it, and the
		// bound, which is about one request, failed by a few ms).
		lo.Rate = min(max(capacity*0.01, 20), capacity*0.05)
		lo.Timeout = 1000 * b.SLO
		cfg.Sources = []TrafficConfig{hi, lo}
		cfg.Duration = time.Duration(rapid.IntRange(20, 100).Draw(t, "duration_batches")) * full
		if hi.Rate*cfg.Duration.Seconds() > 5000 {
			cfg.Duration = max(time.Duration(5000/hi.Rate*float64(time.Second)), 10*full)
		}
		_, rec := policyRun(t, cfg)

		r := cfg.resolved()
		linger := r.Batcher.Linger(cfg.Devices, 64)
		bound := max(2*b.PriorityAging, b.SLO) + linger + 2*full + b.Margin + 2*cfg.NetDelay
		for i := range rec.reqs {
			q := &rec.reqs[i]
			if !q.submitted || q.req.Priority != actors.PriorityLow || q.reply.Outcome == actors.Rejected {
				continue
			}
			if q.reply.Outcome != actors.Completed || q.replyAt-q.req.Arrival > bound {
				t.Fatalf("low-priority request %d (arrival %v): %v after %v; bound max(2×%v aging, %v SLO) + %v linger + 2×%v batch + %v margin + 2×%v net = %v\n%s",
					i, q.req.Arrival, q.reply.Outcome, q.replyAt-q.req.Arrival, b.PriorityAging, b.SLO, linger, full, b.Margin, cfg.NetDelay, bound, describeSources(cfg))
			}
		}
	})
}
