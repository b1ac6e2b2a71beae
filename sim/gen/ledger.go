package gen

import (
	"fmt"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/gen"
)

// ledger keeps one record per request and checks every stream from the
// messages that reach the client.
type ledger struct {
	r          *run
	recs       map[uint64]*record
	order      []uint64
	violations []string
	kinds      map[string]int
	// lastAt is the time of the last message to a client.
	lastAt time.Duration
}

type record struct {
	req gen.Request
	// want is the emulated generator's whole output for the prompt.
	want string
	// got counts the tokens received; at their arrival times.
	got []time.Duration
	end *gen.End
	// admissions counts the slots that started the sequence afresh, and
	// crashes the device failures that hit it while a device held it: the
	// preemptions the devices saw are admissions - 1 - crashes.
	admissions, crashes int
	// fed counts the tokens steps fed for it (prefill, recompute and
	// decode): the service its tenant is charged.
	fed int
}

func newLedger(r *run) *ledger {
	return &ledger{r: r, recs: map[uint64]*record{}, kinds: map[string]int{}}
}

// Kinds of violation, one per property.
const (
	KindKV      = "kv"      // KV blocks over a device's capacity, or books that disagree
	KindBudget  = "budget"  // a step over its token budget, or two steps at once on a device
	KindStream  = "stream"  // a token out of order, twice, wrong, or after the end; a missing or second end
	KindFreed   = "freed"   // a finished or cancelled sequence holding KV after its step
	KindPreempt = "preempt" // a sequence preempted more than the bound
	KindOther   = "other"
)

func (l *ledger) violate(kind string, at time.Duration, format string, args ...any) {
	l.kinds[kind]++
	if len(l.violations) < violationsMax {
		l.violations = append(l.violations, kind+" at "+at.String()+": "+fmt.Sprintf(format, args...))
	}
}

func (l *ledger) offer(req gen.Request) {
	l.recs[req.ID] = &record{req: req, want: gen.EmulatedOutput(req.Model, l.r.cfg.Gen.Version, req.Prompt, l.r.cfg.OutLen, req.MaxTokens)}
	l.order = append(l.order, req.ID)
}

func (l *ledger) admitted(id uint64) {
	if rec := l.recs[id]; rec != nil {
		rec.admissions++
	}
}

func (l *ledger) crashed(id uint64) {
	if rec := l.recs[id]; rec != nil {
		rec.crashes++
	}
}

// Deliver checks every Token and gen.End that reaches the client.
func (l *ledger) Deliver(at time.Duration, _, to actors.Address, msg actors.Message) {
	if to != clientAddr {
		return
	}
	l.lastAt = at
	switch m := msg.(type) {
	case gen.Token:
		rec := l.recs[m.ID]
		switch {
		case rec == nil:
			l.violate(KindStream, at, "token for unknown request %d", m.ID)
		case rec.end != nil:
			l.violate(KindStream, at, "request %d: token %d after its end", m.ID, m.Index)
		case m.Index != len(rec.got):
			l.violate(KindStream, at, "request %d: token index %d, want %d (each index once, in order)", m.ID, m.Index, len(rec.got))
		case m.Index >= len(rec.want) || m.Byte != rec.want[m.Index]:
			l.violate(KindStream, at, "request %d: token %d is %q, the generator's is %q", m.ID, m.Index, m.Byte, safeAt(rec.want, m.Index))
		default:
			rec.got = append(rec.got, at)
		}
	case gen.End:
		rec := l.recs[m.ID]
		if rec == nil {
			l.violate(KindStream, at, "end for unknown request %d", m.ID)
			return
		}
		if rec.end != nil {
			l.violate(KindStream, at, "request %d: a second end (%v after %v)", m.ID, m.Outcome, rec.end.Outcome)
			return
		}
		rec.end = &m
		bound := l.r.cfg.Gen.PreemptMax
		switch {
		case m.Tokens != len(rec.got):
			l.violate(KindStream, at, "request %d: end says %d tokens, the client got %d", m.ID, m.Tokens, len(rec.got))
		case m.Outcome == actors.Completed && len(rec.got) != len(rec.want):
			l.violate(KindStream, at, "request %d: completed with %d tokens, the generator's output has %d", m.ID, len(rec.got), len(rec.want))
		case m.Preemptions > bound:
			l.violate(KindPreempt, at, "request %d: preempted %d times, bound %d", m.ID, m.Preemptions, bound)
		case rec.admissions-1-rec.crashes > bound:
			l.violate(KindPreempt, at, "request %d: the devices restarted it %d times and crashed under it %d times: %d preemptions, bound %d",
				m.ID, rec.admissions, rec.crashes, rec.admissions-1-rec.crashes, bound)
		case m.Attempts > l.r.cfg.Gen.AttemptMax:
			l.violate(KindOther, at, "request %d: %d attempts, AttemptMax %d", m.ID, m.Attempts, l.r.cfg.Gen.AttemptMax)
		case l.r.g.Blocks(m.ID) != 0:
			l.violate(KindFreed, at, "request %d ended %v and still holds %d KV blocks", m.ID, m.Outcome, l.r.g.Blocks(m.ID))
		case len(rec.got) > 0 && (rec.got[0] < rec.req.Arrival || m.FirstToken != rec.got[0]):
			l.violate(KindOther, at, "request %d: first token at %v, end says %v, arrival %v", m.ID, rec.got[0], m.FirstToken, rec.req.Arrival)
		}
	}
}

func safeAt(s string, i int) string {
	if i >= 0 && i < len(s) {
		return string(s[i])
	}
	return "(none: past the end)"
}

// finish checks that every request ended.
func (l *ledger) finish() {
	for _, id := range l.order {
		if l.recs[id].end == nil {
			l.violate(KindStream, l.r.w.Now(), "request %d never ended (%d tokens)", id, len(l.recs[id].got))
		}
	}
	if n := l.r.g.InFlight(); n != 0 {
		l.violate(KindOther, l.r.w.Now(), "the scheduler still holds %d requests after the drain", n)
	}
}

// Report is a generation run's outcome.
type Report struct {
	Requests int
	// Outcomes counts the ends by outcome name.
	Outcomes map[string]int
	// Tenants has one entry per tenant, in Config order.
	Tenants []TenantReport
	// Tokens is the tokens delivered; TokensPerSec their rate over the
	// makespan (first arrival to last message).
	Tokens       int64
	TokensPerSec float64
	// WindowTokensPerSec is the tokens delivered while arrivals went on
	// (Config.Duration), over that time: the steady rate, without the
	// drain's tail.
	WindowTokensPerSec float64
	Makespan           time.Duration
	// KVPeak is the peak share of the group's KV blocks held, KVMean the
	// time-weighted mean over the makespan, and KVOverTime the peak share
	// in each tenth of the makespan.
	KVPeak, KVMean float64
	KVOverTime     []float64
	// KVSeries is the share of the group's KV blocks held over the run,
	// at most kvSeriesMax points (the peak of each stretch), for charts.
	KVSeries []KVPoint
	// TTFTSample is every completed request's TTFT (all tenants), sorted,
	// for a CDF.
	TTFTSample []time.Duration
	// Preemptions, Crashes (crashes and hangs injected), Steps and the
	// tokens fed by steps (prefill and decode).
	Preemptions, Crashes, Steps int64
	StepTokens                  int64
	// TTFT, TPOT and ITL pool every tenant's latencies (TenantReport's).
	TTFT, TPOT, ITL Percentiles
	// SLOMet is the share of completed requests whose first token came by
	// their TTFT deadline.
	SLOMet float64
	// TTFTMet counts the requests that completed with their first token
	// by the TTFT SLO.
	TTFTMet    int
	Violations []string
	// ViolationsBy counts the violations by kind (KindKV...).
	ViolationsBy map[string]int
}

// TenantReport is one tenant's latencies, in milliseconds: TTFT (arrival
// to first token), TPOT (per request, (last - first) / (tokens - 1)) and
// ITL (every gap between two tokens of a stream).
type TenantReport struct {
	Name               string
	Offered, Completed int
	// Tokens counts the tokens delivered, Fed the tokens steps fed for
	// the tenant (prompts, recomputes and decodes: its service).
	Tokens, Fed          int
	TTFT, TPOT, ITL      Percentiles
	Expired, Failed, Rej int
}

func (r *run) report() *Report {
	l := r.l
	l.finish()
	rep := &Report{Requests: len(l.order), Outcomes: map[string]int{}, Violations: l.violations, ViolationsBy: l.kinds}
	st := r.g.Stats()
	rep.Preemptions, rep.Steps, rep.StepTokens = st.Preemptions, st.Steps, r.h.stepTokens
	rep.Crashes = int64(r.h.crashes + r.h.hangs)
	idx := map[string]int{}
	type lat struct{ ttft, tpot, itl []time.Duration }
	lats := make([]lat, len(r.cfg.Tenants))
	for i, t := range r.cfg.Tenants {
		idx[t.Name] = i
		rep.Tenants = append(rep.Tenants, TenantReport{Name: t.Name})
	}
	first := time.Duration(-1)
	met, completed, window := 0, 0, 0
	for _, id := range l.order {
		rec := l.recs[id]
		if first < 0 {
			first = rec.req.Arrival
		}
		ti := idx[rec.req.Tenant]
		tr := &rep.Tenants[ti]
		tr.Offered++
		tr.Tokens += len(rec.got)
		tr.Fed += rec.fed
		rep.Tokens += int64(len(rec.got))
		if rec.end == nil {
			continue
		}
		rep.Outcomes[rec.end.Outcome.String()]++
		switch rec.end.Outcome {
		case actors.Completed:
			tr.Completed++
			completed++
		case actors.Expired:
			tr.Expired++
		case actors.Failed:
			tr.Failed++
		case actors.Rejected:
			tr.Rej++
		}
		if len(rec.got) == 0 {
			continue
		}
		ttft := rec.got[0] - rec.req.Arrival
		if rec.end.Outcome == actors.Completed {
			if ttft <= r.cfg.Gen.TTFT {
				met++
			}
			lats[ti].ttft = append(lats[ti].ttft, ttft)
			if n := len(rec.got); n > 1 {
				lats[ti].tpot = append(lats[ti].tpot, (rec.got[n-1]-rec.got[0])/time.Duration(n-1))
			}
		}
		for _, at := range rec.got {
			if at < r.cfg.Duration {
				window++
			}
		}
		for i := 1; i < len(rec.got); i++ {
			lats[ti].itl = append(lats[ti].itl, rec.got[i]-rec.got[i-1])
		}
	}
	var all lat
	for i := range rep.Tenants {
		rep.Tenants[i].TTFT, rep.Tenants[i].TPOT, rep.Tenants[i].ITL = pct(lats[i].ttft), pct(lats[i].tpot), pct(lats[i].itl)
		all.ttft, all.tpot, all.itl = append(all.ttft, lats[i].ttft...), append(all.tpot, lats[i].tpot...), append(all.itl, lats[i].itl...)
	}
	rep.TTFT, rep.TPOT, rep.ITL = pct(all.ttft), pct(all.tpot), pct(all.itl)
	rep.TTFTSample = slices.Sorted(slices.Values(all.ttft))
	rep.TTFTMet = met
	rep.WindowTokensPerSec = float64(window) / r.cfg.Duration.Seconds()
	if completed > 0 {
		rep.SLOMet = float64(met) / float64(completed)
	}
	if first >= 0 && l.lastAt > first {
		rep.Makespan = l.lastAt - first
		rep.TokensPerSec = float64(rep.Tokens) / rep.Makespan.Seconds()
	}
	rep.KVPeak, rep.KVMean, rep.KVOverTime = r.kvUse(first, l.lastAt)
	rep.KVSeries = r.kvSeries(l.lastAt)
	return rep
}

// KVPoint is the share of the KV blocks held at a time of the run.
type KVPoint struct {
	At   time.Duration
	Used float64
}

// kvSeriesMax bounds Report.KVSeries.
const kvSeriesMax = 600

// kvSeries turns the host's KV samples into at most kvSeriesMax points
// over [0, to]: the peak of each stretch, at its start.
func (r *run) kvSeries(to time.Duration) []KVPoint {
	h := r.h
	if to <= 0 || len(h.kvAt) == 0 {
		return nil
	}
	total := float64(r.cfg.Gen.BlocksPerDevice * r.cfg.Gen.Devices)
	out := make([]KVPoint, kvSeriesMax)
	for i := range out {
		out[i].At = to * time.Duration(i) / kvSeriesMax
	}
	for i, at := range h.kvAt {
		end := to
		if i+1 < len(h.kvAt) {
			end = h.kvAt[i+1]
		}
		// Every stretch the sample's value holds over gets it.
		for k := min(int(float64(at)/float64(to)*kvSeriesMax), kvSeriesMax-1); k < kvSeriesMax && out[k].At <= end; k++ {
			out[k].Used = max(out[k].Used, float64(h.kvUsed[i])/total)
			if k+1 < kvSeriesMax && out[k+1].At > end {
				break
			}
		}
	}
	return out
}

// kvUse turns the host's KV samples into the peak share, the
// time-weighted mean over [from, to] and the peak in each tenth of it.
func (r *run) kvUse(from, to time.Duration) (peak, mean float64, tenths []float64) {
	total := float64(r.cfg.Gen.BlocksPerDevice * r.cfg.Gen.Devices)
	h := r.h
	peak = float64(h.kvPeak) / total
	if to <= from || len(h.kvAt) == 0 {
		return peak, 0, nil
	}
	tenths = make([]float64, 10)
	span := to - from
	var area float64
	for i, at := range h.kvAt {
		end := to
		if i+1 < len(h.kvAt) {
			end = h.kvAt[i+1]
		}
		lo, hi := max(at, from), min(end, to)
		if hi > lo {
			area += float64(h.kvUsed[i]) * float64(hi-lo)
		}
		if at >= from && at <= to {
			k := min(int(float64(at-from)/float64(span)*10), 9)
			tenths[k] = max(tenths[k], float64(h.kvUsed[i])/total)
		}
	}
	return peak, area / float64(span) / total, tenths
}

// String prints the report as a table.
func (rep *Report) String() string {
	var b []byte
	b = fmt.Appendf(b, "requests %d, outcomes %v\n", rep.Requests, sortedCounts(rep.Outcomes))
	b = fmt.Appendf(b, "tokens %d in %.1fs: %.0f tokens/s; TTFT SLO met by %.1f%% of completed\n", rep.Tokens, rep.Makespan.Seconds(), rep.TokensPerSec, 100*rep.SLOMet)
	b = fmt.Appendf(b, "KV use: peak %.1f%%, mean %.1f%%, by tenth of the run %s\n", 100*rep.KVPeak, 100*rep.KVMean, pcts(rep.KVOverTime))
	b = fmt.Appendf(b, "steps %d (%d tokens fed), preemptions %d, device crashes and hangs %d\n", rep.Steps, rep.StepTokens, rep.Preemptions, rep.Crashes)
	b = fmt.Appendf(b, "%-6s %7s %7s %8s  %-26s %-26s %-26s\n", "tenant", "offered", "done", "tokens", "TTFT ms p50/p95/p99", "TPOT ms p50/p95/p99", "ITL ms p50/p95/p99")
	for _, t := range rep.Tenants {
		b = fmt.Appendf(b, "%-6s %7d %7d %8d  %-26s %-26s %-26s\n", t.Name, t.Offered, t.Completed, t.Tokens, t.TTFT, t.TPOT, t.ITL)
	}
	if len(rep.Tenants) > 1 {
		b = fmt.Appendf(b, "%-6s %7d %7d %8d  %-26s %-26s %-26s\n", "all", rep.Requests, rep.Outcomes["completed"], rep.Tokens, rep.TTFT, rep.TPOT, rep.ITL)
	}
	for _, v := range rep.Violations {
		b = fmt.Appendf(b, "VIOLATION %s\n", v)
	}
	return string(b)
}

func (p Percentiles) String() string { return fmt.Sprintf("%.1f/%.1f/%.1f", p.P50, p.P95, p.P99) }

func pcts(v []float64) string {
	var b []byte
	for i, x := range v {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%.0f%%", 100*x)
	}
	return string(b)
}

func sortedCounts(m map[string]int) string {
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	var b []byte
	for i, k := range keys {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%s=%d", k, m[k])
	}
	return string(b)
}
