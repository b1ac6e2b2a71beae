package sim

// Property tests of the architecture's invariants 1-5 and 8-10, with
// pgregory.net/rapid: each TestProperty<Name> draws whole simulated runs
// (traffic from idle to 3x capacity, 1-4 model versions, input lengths,
// per-request timeouts, cancels, 1-8 devices, batch sizes 1-100, fixed or
// affine latency with or without a padding term, network delay; sometimes
// a model registry with routed versions, length buckets, per-model batch
// sizes and SLOs; 1-3 tenants with weights and limits; either key policy;
// and a fault schedule whose sites are switched on per run), runs them
// with sim.Run, and
// checks its invariant with the ledger's violations of that kind and with
// an observer of its own (propRecorder) that checks the same from the
// messages, independently of the ledger.
//
// A failure prints the drawn configuration and the violations, and rapid
// prints how to replay it (-rapid.failfile=..., or -rapid.seed=...). Runs are
// kept small (at most about 8,000 requests, 5 to 100 batch times), so that
// `go test` runs rapid's default 100 checks of all eight properties in a
// few seconds; `make soak` runs many more (-rapid.checks).
//
// Each property was seen to fail on a deliberately broken build: the breaks
// are named in each test's comment ("Seen to fail"); each was applied to a
// copy of the tree, failed its property within rapid's default 100 checks,
// with the ledger's check and, separately, with propRecorder's, and was
// undone.

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/flushcheck"
	"github.com/batchd/batchd/sim/ledger"
)

// genOpts selects what drawConfig draws.
type genOpts struct {
	// faults: draw a fault plan, each fault site switched on or off.
	faults bool
	// cancels: sometimes cancel requests.
	cancels bool
	// loadMin and loadMax bound the offered load as a multiple of the
	// capacity, devices × BatchMax / latency of a full batch.
	loadMin, loadMax float64
	// mixMin is the least number of model versions in the traffic mix.
	mixMin int
	// requestsMax bounds the requests of one run (about).
	requestsMax float64
}

func defaultGen() genOpts {
	return genOpts{faults: true, cancels: true, loadMax: 3, mixMin: 1, requestsMax: 8000}
}

// frac draws a fraction of d.
func frac(t *rapid.T, d time.Duration, lo, hi float64, label string) time.Duration {
	return time.Duration(float64(d) * rapid.Float64Range(lo, hi).Draw(t, label))
}

// drawConfig draws one run.
func drawConfig(t *rapid.T, o genOpts) Config {
	cfg := DefaultConfig()
	cfg.Seed = rapid.Uint64().Draw(t, "seed")
	cfg.Devices = rapid.IntRange(1, 8).Draw(t, "devices")
	bmax := rapid.IntRange(1, 100).Draw(t, "batch_max")

	// Inputs and the latency model: fixed, or affine in the batch size,
	// with or without a cost per padded byte.
	tr := DefaultTrafficConfig()
	tr.InputPool = 256
	tr.InputLenMin = rapid.IntRange(1, 32).Draw(t, "input_len_min")
	tr.InputLenMax = rapid.IntRange(tr.InputLenMin, 256).Draw(t, "input_len_max")
	base := time.Duration(rapid.IntRange(1, 100).Draw(t, "latency_ms")) * time.Millisecond
	lat := actors.FixedLatency(base)
	if rapid.Bool().Draw(t, "affine") {
		// The per-item part of a full batch, as a share of Base.
		lat.PerItem = frac(t, base, 0.01, 2, "per_item_share") / time.Duration(bmax)
	}
	if rapid.Bool().Draw(t, "padded") {
		lat.PerPaddedByte = frac(t, base, 0.01, 1, "padding_share") / time.Duration(bmax*tr.InputLenMax)
	}
	cfg.Latency = lat
	full := lat.Predict(bmax, tr.InputLenMax)

	b := &cfg.Batcher
	b.BatchMax = bmax
	// From no room to linger (SLO = one full batch) to plenty.
	b.SLO = max(frac(t, full, 1, 4, "slo_per_batch"), 1)
	b.Margin = frac(t, full, 0, 0.2, "margin_per_batch")
	b.AttemptMax = rapid.IntRange(1, 4).Draw(t, "attempt_max")
	if rapid.Bool().Draw(t, "linger_capped") {
		b.LingerMax = frac(t, full, 0, 1, "linger_max_per_batch")
	}

	d := &cfg.Device
	d.WatchdogMultiple = rapid.IntRange(2, 4).Draw(t, "watchdog_multiple")
	d.RestartBackoff = max(frac(t, full, 0.1, 1, "restart_backoff_per_batch"), 1)
	d.RestartBackoffMax = 8 * d.RestartBackoff
	d.QuarantineAfter = rapid.IntRange(1, 5).Draw(t, "quarantine_after")
	d.QuarantineFor = time.Duration(rapid.IntRange(1, 20).Draw(t, "quarantine_for_batches")) * full

	// Scheduling between keys and tenants.
	b.KeyPolicy = rapid.SampledFrom([]actors.KeyPolicy{actors.PolicyFair, actors.PolicySlack}).Draw(t, "key_policy")
	b.PriorityAging = max(frac(t, b.SLO, 0.05, 2, "priority_aging_per_slo"), 1)
	b.BucketMerge = rapid.Bool().Draw(t, "bucket_merge")
	if rapid.Bool().Draw(t, "registry") {
		b.Models = drawRegistry(t, bmax, b.SLO, tr.InputLenMin, tr.InputLenMax)
	}
	tr.Tenants = []string{"t0"}
	for i := range rapid.IntRange(0, 2).Draw(t, "more_tenants") {
		tc := actors.TenantConfig{Name: fmt.Sprintf("t%d", i+1), Weight: rapid.IntRange(0, 4).Draw(t, fmt.Sprintf("tenant%d_weight", i+1))}
		if rapid.Bool().Draw(t, fmt.Sprintf("tenant%d_limits", i+1)) {
			tc.InflightMax = rapid.IntRange(1, 4*bmax).Draw(t, fmt.Sprintf("tenant%d_inflight_max", i+1))
			tc.Rate = float64(cfg.Devices*bmax) / full.Seconds() * rapid.Float64Range(0.1, 1).Draw(t, fmt.Sprintf("tenant%d_rate_per_capacity", i+1))
			tc.Burst = rapid.IntRange(1, 2*bmax).Draw(t, fmt.Sprintf("tenant%d_burst", i+1))
		}
		b.Tenants = append(b.Tenants, tc)
		tr.Tenants = append(tr.Tenants, tc.Name)
	}

	// Traffic.
	tr.Arrival = rapid.SampledFrom([]ArrivalProcess{Poisson, Constant}).Draw(t, "arrival")
	tr.Mix = nil
	for i := range rapid.IntRange(o.mixMin, 4).Draw(t, "mix_entries") {
		tr.Mix = append(tr.Mix, ModelMix{
			// With a registry, c is an unknown model, v3 an unknown
			// version (both rejected), and an empty version is routed by
			// weight; they are drawn less often.
			Model:   rapid.SampledFrom([]string{"a", "a", "b", "b", "c"}).Draw(t, fmt.Sprintf("mix%d_model", i)),
			Version: rapid.SampledFrom([]string{"v1", "v1", "v2", "v2", "", "", "v3"}).Draw(t, fmt.Sprintf("mix%d_version", i)),
			Weight:  rapid.Float64Range(0.1, 1).Draw(t, fmt.Sprintf("mix%d_weight", i)),
		})
	}
	if rapid.Bool().Draw(t, "timeouts") {
		// Some shorter than one batch (rejected at once), some generous.
		tr.Timeout = max(frac(t, b.SLO, 0.2, 5, "timeout_per_slo"), 1)
	}
	if o.cancels && rapid.Bool().Draw(t, "cancels") {
		tr.CancelRate = rapid.Float64Range(0, 0.5).Draw(t, "cancel_rate")
		tr.CancelAfter = frac(t, full, 0, 2, "cancel_after_per_batch")
	}
	cfg.Traffic = tr
	if rapid.Bool().Draw(t, "net_delay") {
		cfg.NetDelay = frac(t, full, 0, 0.1, "net_delay_per_batch")
	}

	// Load and duration: a few batch times, and about requestsMax
	// requests at most.
	capacity := float64(cfg.Devices*bmax) / full.Seconds()
	cfg.Rate = capacity * drawLoad(t, o.loadMin, o.loadMax)
	cfg.Duration = time.Duration(rapid.IntRange(5, 100).Draw(t, "duration_batches")) * full
	if cfg.Rate > 0 && cfg.Rate*cfg.Duration.Seconds() > o.requestsMax {
		cfg.Duration = time.Duration(o.requestsMax / cfg.Rate * float64(time.Second))
	}
	cfg.Duration = max(cfg.Duration, full)

	if o.faults && rapid.Bool().Draw(t, "faults") {
		cfg.Faults = drawFaults(t)
	}
	// Half the runs have the batcher ask its devices to announce themselves
	// again at its start, as the live engine's does.
	cfg.Reannounce = rapid.Bool().Draw(t, "reannounce")
	// Half the runs have the batcher learn its overrun, as the live
	// engine's does; here it learns the network's delay, when there is
	// one, and the faults' slow runs.
	b.LearnOverrun = rapid.Bool().Draw(t, "learn_overrun")
	// Half the runs have the devices ask for their next batch as each
	// starts (two batches in a device at once, one of them waiting), with
	// a lead of up to a quarter of a batch for a partial one: a lead is a
	// hand-over's length, far shorter than a batch. (A lead of a whole
	// batch time forms partial batches that much early: below capacity it
	// costs requests, TestAskAheadBelowCapacity, and sending partial
	// batches at once failed TestPropertySLOBelowCapacity.)
	if rapid.Bool().Draw(t, "ask_ahead") {
		d.AskAhead = max(frac(t, full, 0, 0.25, "ask_ahead_per_batch"), 1)
	}
	// A livelock guard far above what these runs need.
	cfg.EventsMax = 50_000_000
	return cfg
}

// drawRegistry draws a model registry: models a and b (c stays unknown,
// so its requests are rejected), each with versions v1 and v2 under
// routing weights, and sometimes a smaller batch size, an SLO of its own,
// input-length buckets and an input length limit.
func drawRegistry(t *rapid.T, bmax int, slo time.Duration, inMin, inMax int) []actors.ModelConfig {
	var ms []actors.ModelConfig
	for _, name := range []string{"a", "b"} {
		label := func(s string) string { return "model_" + name + "_" + s }
		m := actors.ModelConfig{Name: name, Versions: []actors.VersionConfig{
			{Name: "v1", Weight: rapid.IntRange(1, 5).Draw(t, label("v1_weight"))},
			{Name: "v2", Weight: rapid.IntRange(0, 5).Draw(t, label("v2_weight"))},
		}}
		if rapid.Bool().Draw(t, label("own_batch_max")) {
			m.BatchMax = rapid.IntRange(1, bmax).Draw(t, label("batch_max"))
		}
		if rapid.Bool().Draw(t, label("own_slo")) {
			m.SLO = max(frac(t, slo, 0.5, 2, label("slo_per_slo")), 1)
		}
		for i := range rapid.IntRange(0, 3).Draw(t, label("bucket_edges")) {
			lo := inMin
			if i > 0 {
				lo = m.BucketEdges[i-1] + 1
			}
			if lo > inMax {
				break
			}
			m.BucketEdges = append(m.BucketEdges, rapid.IntRange(lo, inMax).Draw(t, label(fmt.Sprintf("bucket_edge%d", i))))
		}
		if rapid.IntRange(0, 9).Draw(t, label("input_len_limit")) == 0 {
			m.InputLenMax = rapid.IntRange(inMin, inMax).Draw(t, label("input_len_max"))
		}
		ms = append(ms, m)
	}
	return ms
}

// loadRegimes are the bands of load drawLoad picks from, uniformly by
// entry: rapid draws floats near the low end of a range a third of the
// time, which would make most runs idle.
var loadRegimes = []struct{ lo, hi float64 }{
	{0, 0},      // idle
	{0.01, 0.3}, // light: devices mostly idle, lingering matters
	{0.3, 1},    // moderate
	{0.3, 1},    //
	{1, 3},      // overload: admission and queue bounds
	{1, 3},      //
}

// drawLoad draws a load (a multiple of capacity) in [lo, hi]. It is never
// below 0.01 unless it is 0: a rate of 1e-270 req/s overflows Traffic's
// gap to 1 ns (see the report to the lead).
func drawLoad(t *rapid.T, lo, hi float64) float64 {
	var bands [][2]float64
	for _, r := range loadRegimes {
		a, b := max(r.lo, lo), min(r.hi, hi)
		if a <= b {
			bands = append(bands, [2]float64{a, b})
		}
	}
	band := rapid.SampledFrom(bands).Draw(t, "load_band")
	if band[0] == band[1] {
		return band[0]
	}
	return rapid.Float64Range(band[0], band[1]).Draw(t, "load")
}

// drawFaults draws a fault plan with each fault site switched on or off.
func drawFaults(t *rapid.T) FaultPlan {
	var p FaultPlan
	on := func(label string) bool { return rapid.Bool().Draw(t, label) }
	if on("crash") {
		p.CrashRate = rapid.Float64Range(0, 0.3).Draw(t, "crash_rate")
	}
	if on("hang") {
		p.HangRate = rapid.Float64Range(0, 0.2).Draw(t, "hang_rate")
	}
	if on("batch_error") {
		p.BatchErrorRate = rapid.Float64Range(0, 0.2).Draw(t, "batch_error_rate")
	}
	if on("slow") {
		p.SlowRate = rapid.Float64Range(0, 0.3).Draw(t, "slow_rate")
		p.SlowFactor = rapid.Float64Range(1, 5).Draw(t, "slow_factor")
	}
	if on("item_error") {
		p.ItemErrorRate = rapid.Float64Range(0, 0.1).Draw(t, "item_error_rate")
	}
	// Inputs are random lowercase letters: "q" poisons 1 in 26 of them,
	// "zz" 1 in 676.
	p.PoisonPrefix = rapid.SampledFrom([]string{"", "", "q", "zz"}).Draw(t, "poison_prefix")
	// HealAt stays zero: Run heals the faults at the end of the safety
	// phase.
	return p
}

// describe is a one-line summary of a run's configuration for failure
// messages (rapid prints every drawn value too).
func describe(cfg Config) string {
	b := cfg.Batcher
	return fmt.Sprintf("seed %d, %.1f req/s for %v, %d devices (%d healthy), batch max %d, latency %+v, SLO %v, margin %v, linger max %v, attempts %d, queue %d/%d, net delay %v, timeout %v, cancel %.2f after %v, mix %v, inputs %d-%d, faults %+v, policy %d, aging %v, merge %v, models %+v, tenants %+v, reannounce %v, learn overrun %v",
		cfg.Seed, cfg.Rate, cfg.Duration, cfg.Devices, cfg.HealthyDevices, b.BatchMax, cfg.Latency, b.SLO, b.Margin, b.LingerMax,
		b.AttemptMax, b.QueueMax, b.QueueTotalMax, cfg.NetDelay, cfg.Traffic.Timeout, cfg.Traffic.CancelRate, cfg.Traffic.CancelAfter,
		cfg.Traffic.Mix, cfg.Traffic.InputLenMin, cfg.Traffic.InputLenMax, cfg.Faults, b.KeyPolicy, b.PriorityAging, b.BucketMerge, b.Models, b.Tenants, cfg.Reannounce, b.LearnOverrun)
}

// propRun is one run with the property tests' observers.
type propRun struct {
	cfg   Config
	rep   Report
	flush *flushcheck.Checker
	rec   *propRecorder
}

func runProp(t *rapid.T, cfg Config) propRun {
	r := cfg.resolved()
	flush, err := flushcheck.New(flushcheck.Config{Batcher: BatcherAddr, Config: r.Batcher, NetDelay: cfg.NetDelay})
	if err != nil {
		t.Fatalf("%v\n%s", err, describe(cfg))
	}
	rec := newPropRecorder(r)
	cfg.Observers = append(cfg.Observers[:len(cfg.Observers):len(cfg.Observers)], flush, rec)
	rep, err := Run(cfg)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, describe(cfg))
	}
	return propRun{cfg: cfg, rep: rep, flush: flush, rec: rec}
}

// requireKinds fails t if the report has violations of any of kinds.
func (p propRun) requireKinds(t *rapid.T, kinds ...ledger.ViolationKind) {
	var bad []string
	for _, k := range kinds {
		if n := p.rep.Violations.ByKind[k]; n > 0 {
			bad = append(bad, fmt.Sprintf("%d %v", n, k))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("ledger: %s violations\n%s\nfirst: %s", strings.Join(bad, ", "), describe(p.cfg), strings.Join(p.rep.Violations.First, "\n  "))
	}
}

// requireNone fails t if the recorder found errors of any of kinds.
func (p propRun) requireNone(t *rapid.T, kinds ...ledger.ViolationKind) {
	var bad []string
	for _, k := range kinds {
		if n := p.rec.errs[k]; n > 0 {
			bad = append(bad, fmt.Sprintf("%d %v", n, k))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("recorder: %s errors\n%s\nfirst: %s", strings.Join(bad, ", "), describe(p.cfg), strings.Join(p.rec.first, "\n  "))
	}
}

// propRecorder is the property tests' own observer. It keeps its own line
// per request and checks invariants 1-4 and 8 from the messages, so that a
// property does not rest on the ledger alone.
type propRecorder struct {
	cfg  Config // resolved
	reqs []propReq
	devs map[actors.Address]*propDev
	last time.Duration

	errs  [ledger.ViolationKinds]int64
	first []string
}

type propReq struct {
	req       actors.Request
	submitted bool
	submitAt  time.Duration
	// runs are the devices of the batches that carried it, in order.
	runs []actors.Address
	// key is that of the last batch that carried it.
	key     actors.Key
	replies int
	reply   actors.Reply
	replyAt time.Duration
}

type propDev struct {
	batch uint64 // outstanding on the device; 0 for none
	since time.Duration
	// Asking ahead (DeviceConfig.AskAhead), as the device does it: it
	// holds one batch it asked for ahead of batch's end (askedFor) and
	// starts it at batch's BatchDone, unless it declines it (BatchDeclined)
	// as batch failed as a whole; after a BatchAborted it drops what comes
	// until a new incarnation, and a batch sent to an older one.
	incarnation uint64
	askedFor    uint64
	ahead       *actors.Batch
	dropping    bool
}

func newPropRecorder(resolved Config) *propRecorder {
	return &propRecorder{cfg: resolved, devs: make(map[actors.Address]*propDev)}
}

func (r *propRecorder) fail(k ledger.ViolationKind, format string, args ...any) {
	r.errs[k]++
	if len(r.first) < 20 {
		r.first = append(r.first, k.String()+": "+fmt.Sprintf(format, args...))
	}
}

func (r *propRecorder) get(id uint64) *propReq {
	if id == 0 || id > 1<<24 {
		return nil
	}
	if int(id) >= len(r.reqs) {
		r.reqs = append(r.reqs, make([]propReq, int(id)+1-len(r.reqs))...)
	}
	return &r.reqs[id]
}

func (r *propRecorder) dev(a actors.Address) *propDev {
	d := r.devs[a]
	if d == nil {
		d = &propDev{}
		r.devs[a] = d
	}
	return d
}

// Deliver implements Observer.
func (r *propRecorder) Deliver(at time.Duration, from, to actors.Address, msg actors.Message) {
	if at < r.last {
		r.fail(ledger.ViolationCausality, "clock went back from %v to %v", r.last, at)
	}
	r.last = at
	switch m := msg.(type) {
	case actors.Submit:
		q := r.get(m.Req.ID)
		if q == nil || q.submitted {
			r.fail(ledger.ViolationOther, "request %d: bad or repeated id", m.Req.ID)
			return
		}
		q.req, q.submitted, q.submitAt = m.Req, true, at
		if m.Req.Arrival > at {
			r.fail(ledger.ViolationCausality, "request %d: arrival %v after its submit's delivery at %v", m.Req.ID, m.Req.Arrival, at)
		}
	case actors.RunBatch:
		r.runBatch(at, to, m)
	case actors.BatchDone:
		if d := r.dev(m.Device); d.batch == m.BatchID {
			next := d.ahead
			d.batch, d.askedFor, d.ahead = 0, 0, nil
			if next != nil {
				r.start(at, to, d, next)
			}
		}
	case actors.BatchAborted:
		if d := r.dev(m.Device); d.batch == m.BatchID {
			d.batch, d.askedFor, d.ahead, d.dropping = 0, 0, nil, true
		}
	case actors.BatchDeclined:
		// The batch held ahead, once the running one failed as a whole:
		// it does not run, and the device asks for no other.
		if d := r.dev(m.Device); d.ahead != nil && d.ahead.ID == m.BatchID {
			d.askedFor, d.ahead = 0, nil
		}
	case actors.DeviceReady:
		d := r.dev(m.Device)
		if m.Running != 0 {
			if d.batch == m.Running && d.incarnation == m.Incarnation {
				d.askedFor = m.Running
			}
			return
		}
		if d.incarnation != m.Incarnation {
			// A (re)started device holds no batch.
			d.batch, d.askedFor, d.ahead, d.dropping = 0, 0, nil, false
		}
		d.incarnation = m.Incarnation
	case actors.Reply:
		if to == LedgerAddr {
			r.replyTo(at, &m)
		}
	}
}

func (r *propRecorder) runBatch(at time.Duration, to actors.Address, rb actors.RunBatch) {
	b := &rb.Batch
	bmax := r.cfg.Batcher.BatchMax
	if n := len(b.Items); n < 1 || n > bmax {
		r.fail(ledger.ViolationBatch, "batch %d: %d items, BatchMax %d", b.ID, n, bmax)
	}
	d := r.dev(to)
	startNow := false
	switch {
	case rb.Incarnation != 0 && rb.Incarnation != d.incarnation || d.dropping:
		// Sent ahead before the device failed: it drops it.
	case d.batch == 0:
		startNow = true
	case d.askedFor == d.batch && d.ahead == nil:
		d.ahead = b
	default:
		r.fail(ledger.ViolationBatch, "device %v got batch %d at %v while batch %d (since %v) was outstanding", to, b.ID, at, d.batch, d.since)
	}
	if b.Dispatch > at {
		r.fail(ledger.ViolationCausality, "batch %d: dispatch %v after its delivery at %v", b.ID, b.Dispatch, at)
	}
	for i := range b.Items {
		it := &b.Items[i]
		// An empty version is the batcher's default, which it may resolve.
		if it.Req.Model != b.Key.Model || it.Req.Params != b.Key.Params || (it.Req.Version != "" && it.Req.Version != b.Key.Version) {
			r.fail(ledger.ViolationBatch, "batch %d (key %s@%s) holds request %d of %s@%s", b.ID, b.Key.Model, b.Key.Version, it.Req.ID, it.Req.Model, it.Req.Version)
		}
		q := r.get(it.Req.ID)
		if q == nil || !q.submitted {
			r.fail(ledger.ViolationOther, "batch %d: request %d never submitted", b.ID, it.Req.ID)
			continue
		}
		if it.Req.Input != q.req.Input || it.Req.Model != q.req.Model ||
			(it.Req.Version != q.req.Version && q.req.Version != "") {
			r.fail(ledger.ViolationOutput, "batch %d: request %d altered in flight", b.ID, it.Req.ID)
		}
		if !(q.req.Arrival <= it.Enqueue && it.Enqueue <= b.Dispatch) {
			r.fail(ledger.ViolationCausality, "request %d: arrival %v, enqueue %v, dispatch %v", it.Req.ID, q.req.Arrival, it.Enqueue, b.Dispatch)
		}
		q.key = b.Key
		if it.Attempt > r.cfg.Batcher.AttemptMax {
			r.fail(ledger.ViolationAttempts, "request %d: attempt %d, AttemptMax %d", it.Req.ID, it.Attempt, r.cfg.Batcher.AttemptMax)
		}
	}
	if startNow {
		r.start(at, to, d, b)
	}
}

// start has device to run b from at.
func (r *propRecorder) start(at time.Duration, to actors.Address, d *propDev, b *actors.Batch) {
	d.batch, d.since = b.ID, at
	for i := range b.Items {
		it := &b.Items[i]
		q := r.get(it.Req.ID)
		if q == nil || !q.submitted {
			continue // runBatch said so
		}
		if q.replies > 0 {
			r.fail(ledger.ViolationDuplicate, "batch %d: request %d runs after its reply", b.ID, it.Req.ID)
		}
		q.runs = append(q.runs, to)
		if len(q.runs) > r.cfg.Batcher.AttemptMax {
			r.fail(ledger.ViolationAttempts, "request %d: run %d (attempt %d), AttemptMax %d", it.Req.ID, len(q.runs), it.Attempt, r.cfg.Batcher.AttemptMax)
		}
	}
}

func (r *propRecorder) replyTo(at time.Duration, m *actors.Reply) {
	q := r.get(m.ID)
	if q == nil || !q.submitted {
		r.fail(ledger.ViolationOther, "reply to request %d, never submitted", m.ID)
		return
	}
	q.replies++
	if q.replies > 1 {
		r.fail(ledger.ViolationDuplicate, "request %d: reply %d (%v at %v) after %v at %v", m.ID, q.replies, m.Outcome, at, q.reply.Outcome, q.replyAt)
		return
	}
	q.reply, q.replyAt = *m, at
	if m.Attempts > r.cfg.Batcher.AttemptMax {
		r.fail(ledger.ViolationAttempts, "request %d: reply after %d attempts, AttemptMax %d", m.ID, m.Attempts, r.cfg.Batcher.AttemptMax)
	}
	if m.Arrival != q.req.Arrival {
		r.fail(ledger.ViolationCausality, "request %d: reply says arrival %v, the request %v", m.ID, m.Arrival, q.req.Arrival)
	}
	// The timeline: every step reached is in order, and the batcher
	// admits a request the instant its Submit is delivered.
	if m.Enqueue != 0 && m.Enqueue != q.submitAt {
		r.fail(ledger.ViolationCausality, "request %d: enqueue %v, its submit was delivered at %v", m.ID, m.Enqueue, q.submitAt)
	}
	prev := q.req.Arrival
	for _, step := range [...]time.Duration{m.Enqueue, m.Dispatch, m.Done, at} {
		if step == 0 {
			continue
		}
		if step < prev {
			r.fail(ledger.ViolationCausality, "request %d (%v): arrival %v, enqueue %v, dispatch %v, done %v, reply %v out of order",
				m.ID, m.Outcome, q.req.Arrival, m.Enqueue, m.Dispatch, m.Done, at)
			break
		}
		prev = step
	}
	if m.Outcome != actors.Completed {
		return
	}
	if m.Enqueue == 0 || m.Dispatch == 0 || m.Done == 0 {
		r.fail(ledger.ViolationCausality, "request %d completed with a missing step: enqueue %v, dispatch %v, done %v", m.ID, m.Enqueue, m.Dispatch, m.Done)
	}
	// Invariant 2: the output of its own input, on the model version of
	// the batch that ran it, which is the request's own (or the default
	// the batcher resolved an empty version to).
	if len(q.runs) == 0 {
		r.fail(ledger.ViolationOutput, "request %d completed without running", m.ID)
		return
	}
	k := q.key
	if k.Model != q.req.Model || (q.req.Version != "" && k.Version != q.req.Version) {
		r.fail(ledger.ViolationOutput, "request %d of %s@%s ran under %s@%s", m.ID, q.req.Model, q.req.Version, k.Model, k.Version)
	}
	if want := actors.EmulatedOutput(q.req.Model, k.Version, q.req.Input); m.Output != want {
		r.fail(ledger.ViolationOutput, "request %d: output %q, want %q", m.ID, m.Output, want)
	}
}

// finish checks that every submitted request got its one reply.
func (r *propRecorder) finish() {
	for id := range r.reqs {
		q := &r.reqs[id]
		if q.submitted && q.replies == 0 {
			r.fail(ledger.ViolationLost, "request %d (arrival %v, %d runs): no reply", id, q.req.Arrival, len(q.runs))
		}
	}
}

// Finish implements Run's optional observer hook.
func (r *propRecorder) Finish(time.Duration) { r.finish() }

// outcomes counts the recorder's first replies by outcome.
func (r *propRecorder) outcomes() (submitted int64, by [actors.Cancelled + 1]int64) {
	for i := range r.reqs {
		q := &r.reqs[i]
		if !q.submitted {
			continue
		}
		submitted++
		if q.replies > 0 && q.reply.Outcome <= actors.Cancelled {
			by[q.reply.Outcome]++
		}
	}
	return submitted, by
}

// TestPropertyExactlyOnce is invariant 1: every submitted request gets
// exactly one terminal reply, under faults, cancels and overload; the
// per-request ledger finds none lost and none duplicated, the run drains,
// and the recorder's own count of replies per request agrees.
//
// Seen to fail: with the batcher's answerHeld not sending its reply (lost),
// and with the device answering the first item of a batch twice
// (duplicated).
func TestPropertyExactlyOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := runProp(t, drawConfig(t, defaultGen()))
		p.requireKinds(t, ledger.ViolationLost, ledger.ViolationDuplicate, ledger.ViolationDrain, ledger.ViolationOther)
		p.requireNone(t, ledger.ViolationLost, ledger.ViolationDuplicate, ledger.ViolationOther)
		q := p.rep.Requests
		if q.Lost != 0 || q.Duplicated != 0 {
			t.Fatalf("lost %d, duplicated %d\n%s", q.Lost, q.Duplicated, describe(p.cfg))
		}
		if sum := q.Completed + q.Rejected + q.Expired + q.Failed + q.Cancelled; sum != q.Offered {
			t.Fatalf("outcomes %+v add up to %d, offered %d\n%s", q, sum, q.Offered, describe(p.cfg))
		}
		sub, by := p.rec.outcomes()
		if sub != q.Offered || by[actors.Completed] != q.Completed || by[actors.Rejected] != q.Rejected ||
			by[actors.Expired] != q.Expired || by[actors.Failed] != q.Failed || by[actors.Cancelled] != q.Cancelled {
			t.Fatalf("recorder saw %d submitted, outcomes %v; report %+v\n%s", sub, by, q, describe(p.cfg))
		}
	})
}

// TestPropertyOwnOutput is invariant 2: a Completed reply carries
// EmulatedOutput of its own input, model and version, with two to four
// model versions mixed in the traffic (an empty version included), under
// faults (item errors, poison inputs split out of their batches).
//
// Seen to fail: with the device handing out the batch's outputs in reverse
// order.
func TestPropertyOwnOutput(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := defaultGen()
		o.mixMin = 2
		p := runProp(t, drawConfig(t, o))
		p.requireKinds(t, ledger.ViolationOutput)
		p.requireNone(t, ledger.ViolationOutput)
	})
}

// TestPropertyBatchShape is invariant 3: every batch has 1 to BatchMax
// items of one compatibility key, and a device is never given a batch while
// it runs one: the ledger's checks, the recorder's, and the emulated
// executors' Overlaps (which Run reports as a batch violation; it ignores
// slow runs, whose end a watchdog may cut short).
//
// Seen to fail: with the batcher taking BatchMax+1 items into a batch, and
// with a batch labelled with the key of the batcher's first queue instead
// of its own. (A device given a batch while it runs one also panics in the
// device actor.)
func TestPropertyBatchShape(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := runProp(t, drawConfig(t, defaultGen()))
		p.requireKinds(t, ledger.ViolationBatch)
		p.requireNone(t, ledger.ViolationBatch)
	})
}

// TestPropertyCausality is invariant 4: for every reply, arrival <= enqueue
// <= dispatch <= completion <= reply delivery over the steps the request
// reached; enqueue is the delivery of its Submit; a batch is not
// dispatched after it is delivered; and the clock never goes back across
// deliveries.
//
// Seen to fail: with the device stamping Done one nanosecond before the
// batch's dispatch.
func TestPropertyCausality(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := runProp(t, drawConfig(t, defaultGen()))
		p.requireKinds(t, ledger.ViolationCausality)
		p.requireNone(t, ledger.ViolationCausality)
	})
}

// TestPropertyNoIdleWhileDue is invariant 5: no request waits past its
// flush bound while a device that could take it is idle, as flushcheck.Checker
// sees it from the batcher's messages alone. The checker's
// own model of the batcher must also stay consistent with every message
// (no inconsistencies), or its verdict would mean nothing.
//
// Seen to fail: with the batcher's wake-up for a linger set 1 ns late.
// flushcheck_test.go also runs the check against a batcher whose timer
// messages are swallowed, and against a check that expects a shorter
// linger than the batcher's; both report violations.
func TestPropertyNoIdleWhileDue(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := runProp(t, drawConfig(t, defaultGen()))
		if n, first := p.flush.Inconsistencies(); n > 0 {
			t.Fatalf("flush check: %d inconsistencies\n%s\nfirst: %s", n, describe(p.cfg), strings.Join(first, "\n  "))
		}
		if n, first := p.flush.Violations(); n > 0 {
			t.Fatalf("flush check: %d violations\n%s\nfirst: %s", n, describe(p.cfg), strings.Join(first, "\n  "))
		}
	})
}

// TestPropertyCrashRetry is invariant 8, in two kinds of run.
//
// Any devices with crashes and hangs (and the other faults sometimes):
// nothing accepted is lost or answered twice, and no request runs more than
// AttemptMax times (ledger and recorder: RunBatch messages carrying it,
// Item.Attempt, Reply.Attempts).
//
// One healthy device left: Devices >= 2, the last one without faults
// (Config.HealthyDevices = 1), the others crashing and hanging at heavy
// rates (and sometimes slow) during the safety phase; the load is at most
// half of what the one healthy device can serve (every model at the full
// BatchMax); there are no cancels,
// batch or item errors, or poison inputs; and every request's own timeout
// is TimeoutMax (60 s), far more than the run and its retries need, so
// every deadline is feasible. The exact condition checked, for every
// request:
//
//   - it gets exactly one reply and runs at most AttemptMax times; and
//   - unless it was Rejected at admission, it is Completed, or it is Failed
//     after exactly AttemptMax runs, every one of them on a faulty device.
//     (Nothing else may fail: a run on the healthy device completes, and a
//     feasible deadline does not expire.)
//
// Seen to fail: with the batcher's retry allowing AttemptMax+1 runs (the
// first kind of run), and with it failing an item after its first lost run
// whatever AttemptMax (the second kind).
func TestPropertyCrashRetry(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		if !rapid.Bool().Draw(t, "one_healthy_left") {
			cfg := drawConfig(t, defaultGen())
			cfg.Faults.CrashRate = rapid.Float64Range(0.01, 0.4).Draw(t, "crash_rate_all")
			cfg.Faults.HangRate = rapid.Float64Range(0.01, 0.3).Draw(t, "hang_rate_all")
			cfg.Faults.BatchErrorRate = min(cfg.Faults.BatchErrorRate, 1-cfg.Faults.CrashRate-cfg.Faults.HangRate)
			p := runProp(t, cfg)
			p.requireKinds(t, ledger.ViolationLost, ledger.ViolationDuplicate, ledger.ViolationAttempts, ledger.ViolationDrain)
			p.requireNone(t, ledger.ViolationLost, ledger.ViolationDuplicate, ledger.ViolationAttempts)
			return
		}
		o := defaultGen()
		o.faults, o.cancels, o.loadMax = false, false, 0.5
		cfg := drawConfig(t, o)
		if cfg.Devices < 2 {
			cfg.Devices = 2
		}
		// The load was drawn against all devices; make it against one, and
		// keep every model at the full batch size the capacity assumes.
		cfg.Rate /= float64(cfg.Devices)
		for i := range cfg.Batcher.Models {
			cfg.Batcher.Models[i].BatchMax = 0
		}
		cfg.HealthyDevices = 1
		cfg.Traffic.Timeout = cfg.Batcher.TimeoutMax
		cfg.Traffic.CancelRate = 0
		crash := rapid.Float64Range(0.3, 0.8).Draw(t, "faulty_crash_rate")
		cfg.Faults = FaultPlan{
			CrashRate: crash,
			HangRate:  rapid.Float64Range(0, 1-crash).Draw(t, "faulty_hang_rate"),
		}
		if rapid.Bool().Draw(t, "faulty_slow") {
			cfg.Faults.SlowRate = rapid.Float64Range(0, 0.5).Draw(t, "faulty_slow_rate")
			cfg.Faults.SlowFactor = rapid.Float64Range(1, 5).Draw(t, "faulty_slow_factor")
		}
		p := runProp(t, cfg)
		p.requireKinds(t, ledger.ViolationLost, ledger.ViolationDuplicate, ledger.ViolationAttempts, ledger.ViolationDrain)
		p.requireNone(t, ledger.ViolationLost, ledger.ViolationDuplicate, ledger.ViolationAttempts)
		healthy := actors.Address{ID: DeviceAddrBase + uint64(cfg.Devices-1)}
		amax := cfg.Batcher.AttemptMax
		for id := range p.rec.reqs {
			q := &p.rec.reqs[id]
			if !q.submitted || q.reply.Outcome == actors.Completed || q.reply.Outcome == actors.Rejected {
				continue
			}
			onFaulty := true
			for _, d := range q.runs {
				onFaulty = onFaulty && d != healthy
			}
			if q.reply.Outcome != actors.Failed || len(q.runs) != amax || !onFaulty {
				t.Fatalf("request %d (arrival %v, deadline %v): %v (%s) at %v after runs on %v; want Completed, or Failed after %d runs on faulty devices\n%s",
					id, q.req.Arrival, q.req.Deadline, q.reply.Outcome, q.reply.Err, q.replyAt, q.runs, amax, describe(p.cfg))
			}
		}
	})
}

// TestPropertyDeterministicTrace is invariant 9: the same Config and seed
// give the same trace hash and the same report (wall time aside), under
// faults too; and the observers the other properties add do not change
// the run.
//
// Seen to fail: with the emulated devices' fault streams seeded from the
// wall clock. (The batcher iterating its key map instead of its key order
// was not caught in 100 checks: with keys picked by slack, map order only
// shows on exact ties.)
func TestPropertyDeterministicTrace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t, defaultGen())
		a, err := Run(cfg)
		if err != nil {
			t.Fatalf("run: %v\n%s", err, describe(cfg))
		}
		b := runProp(t, cfg).rep
		a.WallSeconds, b.WallSeconds = 0, 0
		if a.TraceHash != b.TraceHash {
			t.Fatalf("trace hash %s, then %s\n%s", a.TraceHash, b.TraceHash, describe(cfg))
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("same seed, different reports:\n%+v\n%+v\n%s", a, b, describe(cfg))
		}
	})
}

// TestPropertyQueueBounds is invariant 10: with small QueueMax and
// QueueTotalMax under overload (1 to 3 times capacity), the batcher never
// holds more than its bounds: the ledger probes Stats().Queued and
// Stats().Held against QueueTotalMax before every delivery to the batcher,
// and flushcheck.Checker counts, from the messages, the items held per key (against
// QueueMax) and in all (against QueueTotalMax) at the end of every batcher
// instant. Retries under faults count as held, not as new admissions.
//
// Seen to fail: with the admission test `held >= QueueTotalMax` changed to
// `>` (ledger and flushcheck.Checker), and with `q.held >= QueueMax` changed to `>`
// (the checker's count per key).
func TestPropertyQueueBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := defaultGen()
		o.loadMin, o.loadMax = 1, 3
		cfg := drawConfig(t, o)
		b := &cfg.Batcher
		b.QueueMax = rapid.IntRange(1, 50).Draw(t, "queue_max")
		b.QueueTotalMax = rapid.IntRange(b.QueueMax, 3*b.QueueMax).Draw(t, "queue_total_max")
		p := runProp(t, cfg)
		p.requireKinds(t, ledger.ViolationQueue)
		if n, first := p.flush.Inconsistencies(); n > 0 {
			t.Fatalf("flush check: %d inconsistencies\n%s\nfirst: %s", n, describe(p.cfg), strings.Join(first, "\n  "))
		}
		perKey, total := p.flush.HeldHigh()
		if perKey > b.QueueMax || total > b.QueueTotalMax || p.rep.QueuedHigh > b.QueueTotalMax {
			t.Fatalf("held %d under one key (QueueMax %d), %d in all, %d queued (QueueTotalMax %d)\n%s",
				perKey, b.QueueMax, total, p.rep.QueuedHigh, b.QueueTotalMax, describe(p.cfg))
		}
	})
}
