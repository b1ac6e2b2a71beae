package sim

// The measured experiments of the scheduling policies (experiment.go): the seeds' hard case
// (a tenant's burst of long inputs beside two steady tenants), bucket
// merging on fragmented lengths, and the autoscaling signal on fragmented
// keys. Each test is deterministic (fixed seeds), prints its figures with
// -v, asserts what the issue targets, and names the `batchd sim
// --experiment` command that reproduces each row.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/ledger"
)

// burstRow is one configuration of the burst experiment.
type burstRow struct {
	name   string
	policy actors.KeyPolicy
	quota  bool
	rep    Report
}

// windowTenant returns tenant's figures in window i (0: before the burst,
// 1: during, 2: after).
func (r *burstRow) windowTenant(i int, tenant string) NameStats {
	return r.rep.Windows[i].Tenants[tenant]
}

// TestBurstHardCase is the seeds' hard case (a tenant's burst of long inputs): tenants
// steady-a and steady-b send 400 req/s each of 16-64 byte inputs for 60 s;
// tenant burst sends 2,000 req/s of 2-4 KB inputs from 20 s to 40 s, into a
// length bucket no one else uses; 8 devices, a padding latency model (see
// BurstConfig). It runs under PolicyFair and PolicySlack, with the burst
// tenant under a quota (1,000 req/s, burst 200, 300 in flight) and
// without, and prints the steady tenants' p95 before (0-20 s), during
// (20-40 s) and after (40-60 s) the burst, and the burst tenant's outcome.
//
// The target, that the steady tenants' p95 moves by less than 10% and
// stays inside the SLO, is asserted for the recommended configuration:
// PolicyFair (the default) with the burst tenant under a quota. Without a
// quota the steady p95 rises by about a fifth (PolicyFair) to a third
// (PolicySlack): the long batches hold devices, and a short batch that
// comes due waits for one to free (the figures and the reasons are in the
// report to the lead and RESULTS.md).
//
// Unless -short, the same four run with the burst at 8,000 req/s
// (BurstOverloadConfig), past the fleet's capacity for long inputs, and
// are printed too; nothing is asserted of them but the invariants.
//
// Reproduce a row: batchd sim --experiment burst-fair-quota (and
// burst-fair-none, burst-slack-quota, burst-slack-none,
// burst-overload-...).
func TestBurstHardCase(t *testing.T) {
	rows := []burstRow{
		{name: "burst-fair-quota", policy: actors.PolicyFair, quota: true},
		{name: "burst-fair-none", policy: actors.PolicyFair},
		{name: "burst-slack-quota", policy: actors.PolicySlack, quota: true},
		{name: "burst-slack-none", policy: actors.PolicySlack},
	}
	if !testing.Short() {
		n := len(rows)
		for _, r := range rows[:n] {
			r.name = strings.Replace(r.name, "burst-", "burst-overload-", 1)
			rows = append(rows, r)
		}
	}
	for i := range rows {
		r := &rows[i]
		cfg, ok := Experiment(r.name)
		if !ok {
			t.Fatalf("no experiment %q", r.name)
		}
		r.rep = mustRun(t, cfg)
		if err := r.rep.Check(); err != nil {
			t.Fatalf("%s: %v: %q", r.name, err, r.rep.Violations.First)
		}
		if len(r.rep.Windows) != 3 {
			t.Fatalf("%s: %d windows, want 3", r.name, len(r.rep.Windows))
		}
	}
	t.Log("\n" + burstTable(rows))

	slo := ms(DefaultConfig().Batcher.SLO)
	rec := &rows[0] // burst-fair-quota, the recommended configuration
	for _, tenant := range []string{"steady-a", "steady-b"} {
		before := rec.windowTenant(0, tenant).LatencyMs.P95
		for i, phase := range []string{"during", "after"} {
			s := rec.windowTenant(i+1, tenant)
			p95 := s.LatencyMs.P95
			if move := (p95 - before) / before; move >= 0.10 || move <= -0.10 || p95 >= slo {
				t.Errorf("%s, %s: p95 %.1f ms %s the burst, %.1f ms before (%+.1f%%); want within 10%% and under the %v ms SLO",
					rec.name, tenant, p95, phase, before, 100*move, slo)
			}
			if s.Completed != s.Offered {
				t.Errorf("%s, %s %s the burst: %d of %d completed", rec.name, tenant, phase, s.Completed, s.Offered)
			}
		}
	}
	// The quota is what protects them: the burst tenant is turned away
	// for its rate, not for the fleet's load, and what it gets in is
	// served within the SLO.
	b := rec.windowTenant(1, "burst")
	if b.RejectedBy["rate_limited"] == 0 || b.RejectedBy["overloaded"] != 0 || b.LatencyMs.P95 >= slo {
		t.Errorf("%s: burst tenant %+v: want rejections for its rate only and a p95 under the SLO", rec.name, b)
	}
}

// burstTable prints the burst experiment's figures.
func burstTable(rows []burstRow) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-27s %-9s %28s %28s %28s   %s\n", "experiment", "tenant", "p95 ms before/during/after", "change during/after %", "completed during", "burst tenant during")
	for i := range rows {
		r := &rows[i]
		burst := r.windowTenant(1, "burst")
		for _, tenant := range []string{"steady-a", "steady-b"} {
			b, d, a := r.windowTenant(0, tenant), r.windowTenant(1, tenant), r.windowTenant(2, tenant)
			p0 := b.LatencyMs.P95
			extra := ""
			if tenant == "steady-a" {
				extra = fmt.Sprintf("offered %d, completed %d, rejected %s, expired %d, p95 %.1f ms, SLO %.4f",
					burst.Offered, burst.Completed, ledger.CountList(burst.RejectedBy), burst.Expired, burst.LatencyMs.P95, burst.SLOAttainment)
			}
			fmt.Fprintf(&sb, "%-27s %-9s %28s %28s %28s   %s\n", r.name, tenant,
				fmt.Sprintf("%.1f / %.1f / %.1f", p0, d.LatencyMs.P95, a.LatencyMs.P95),
				fmt.Sprintf("%+.1f / %+.1f", 100*(d.LatencyMs.P95-p0)/p0, 100*(a.LatencyMs.P95-p0)/p0),
				fmt.Sprintf("%d of %d", d.Completed, d.Offered), extra)
		}
	}
	return sb.String()
}

// TestBucketMergeMeasured is the bucket merge, measured: traffic spread
// over six length buckets at low rates each (MergeConfig: 600 req/s of 1 to
// 1,024 bytes, 4 devices, 40 ms + 0.2 ms per item + 500 ns per padded
// byte), with BucketMerge off and on. It prints p95, device busy time and
// batch figures, and asserts what merging is for: with it, fewer and
// fuller batches, less device time and a lower p95, in exchange for
// padding (the short inputs that ride in a longer batch pay its length).
//
// Reproduce: batchd sim --experiment merge-off (merge-on).
func TestBucketMergeMeasured(t *testing.T) {
	var reps [2]Report
	var lines []string
	for i, name := range []string{"merge-off", "merge-on"} {
		cfg, _ := Experiment(name)
		reps[i] = mustRun(t, cfg)
		r := &reps[i]
		if err := r.Check(); err != nil {
			t.Fatalf("%s: %v: %q", name, err, r.Violations.First)
		}
		busy := r.DeviceUtilization * float64(cfg.Devices) * r.SimulatedSeconds
		lines = append(lines, fmt.Sprintf("%-9s p50 %.1f ms  p95 %.1f ms  p99 %.1f ms  device busy %.1f s (utilisation %.3f)  batches %d, mean size %.2f  completed %d of %d, rejected %d",
			name, r.LatencyMs.P50, r.LatencyMs.P95, r.LatencyMs.P99, busy, r.DeviceUtilization, r.Batches, r.BatchSizeMean,
			r.Requests.Completed, r.Requests.Offered, r.Requests.Rejected))
	}
	t.Log("\n" + strings.Join(lines, "\n"))
	off, on := &reps[0], &reps[1]
	if !(on.LatencyMs.P95 < off.LatencyMs.P95 && on.DeviceUtilization < off.DeviceUtilization &&
		on.Batches < off.Batches && on.BatchSizeMean > off.BatchSizeMean) {
		t.Errorf("merge on did not give fewer, fuller batches, less device time and a lower p95:\n%s", strings.Join(lines, "\n"))
	}
}

// TestAutoscaleFragmented is the autoscaling signal under fragmentation, measured: the same 2,000
// req/s on one model or spread over 40 (FragmentConfig, 8 devices, fixed
// 100 ms batches). It reads the report's autoscale samples (Signals every
// second) over the steady part of the run (from 2 s to the end of the
// safety phase) and asserts that the recommendation sees the
// fragmentation while utilisation does not: DevicesNeeded is at most the
// fleet on one model and more than the fleet, and ten times as much, on
// 40; the devices' mean busy fraction is at least 0.9 in both (eager
// dispatch keeps a device busy whenever anything is queued), so it cannot
// tell the two apart.
//
// The issue asks for a busy fraction "not higher" in the fragmented case;
// it is higher here (1.00 against 0.96), and must be under any cost model
// where a batch has a fixed part: 40 keys gather smaller batches, each
// paying the fixed cost, so the same requests need more device time. What
// the test shows instead is that utilisation saturates in both and says
// nothing, while DevicesNeeded says 3 against more than a hundred.
//
// Reproduce: batchd sim --experiment fragment-one-key (fragment-40).
func TestAutoscaleFragmented(t *testing.T) {
	type fig struct {
		need, busy, depth float64
		rep               Report
	}
	var figs [2]fig
	var lines []string
	for i, name := range []string{"fragment-one-key", "fragment-40"} {
		cfg, _ := Experiment(name)
		rep := mustRun(t, cfg)
		if err := rep.Check(); err != nil {
			t.Fatalf("%s: %v: %q", name, err, rep.Violations.First)
		}
		f := &figs[i]
		f.rep = rep
		n := 0
		for _, a := range rep.Autoscale {
			if a.T < 2 || a.T > cfg.Duration.Seconds() {
				continue
			}
			f.need += float64(a.DevicesNeeded)
			f.busy += a.BusyFractionMean
			f.depth += float64(a.QueueDepth)
			n++
		}
		if n == 0 {
			t.Fatalf("%s: no autoscale samples", name)
		}
		f.need, f.busy, f.depth = f.need/float64(n), f.busy/float64(n), f.depth/float64(n)
		lines = append(lines, fmt.Sprintf("%-17s devices needed %.1f (fleet %d)  busy fraction %.3f  queue depth %.1f  batch size %.1f  p95 %.1f ms  completed %d, rejected %d of %d",
			name, f.need, cfg.Devices, f.busy, f.depth, rep.BatchSizeMean, rep.LatencyMs.P95, rep.Requests.Completed, rep.Requests.Rejected, rep.Requests.Offered))
	}
	t.Log("\n" + strings.Join(lines, "\n"))
	one, frag := figs[0], figs[1]
	devices := float64(FragmentConfig(false).Devices)
	if !(one.need <= devices && frag.need > devices && frag.need >= 10*one.need) {
		t.Errorf("devices needed: one key %.1f, fragmented %.1f, fleet %v: want the fragmented case over the fleet and ten times the other", one.need, frag.need, devices)
	}
	if one.busy < 0.9 || frag.busy < 0.9 {
		t.Errorf("busy fraction: one key %.3f, fragmented %.3f: want both at least 0.9 (utilisation alone cannot tell them apart)", one.busy, frag.busy)
	}
}
