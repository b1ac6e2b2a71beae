package ledger

import (
	"time"

	"github.com/batchd/batchd/actors"
)

// TimelineStep is the outcome of the requests that arrived in [FromS,
// FromS+step) seconds: how latency and load moved during a run (a spike
// and its recovery, a diurnal day), where the report's percentiles are
// over the whole run.
type TimelineStep struct {
	FromS     float64 `json:"from_s"`
	Offered   int64   `json:"offered"`
	Completed int64   `json:"completed"`
	Rejected  int64   `json:"rejected"`
	// Expired and failed requests together: accepted, not served.
	Unserved int64 `json:"unserved"`
	// SLOAttainment is over the step's accepted, not cancelled requests.
	SLOAttainment float64     `json:"slo_attainment"`
	LatencyMs     Percentiles `json:"latency_ms"`
}

// TimelineStepsLimit bounds Report.Timeline: a day at one step a second.
const TimelineStepsLimit = 86_400

// timeline groups the requests that arrived in [0, safety) into steps of
// every, in two passes over the ledger: one to count each step's
// completions, one to place their latencies in one flat slice, step after
// step, so the percentiles of all steps cost one allocation.
func (l *Ledger) timeline(every, safety time.Duration) []TimelineStep {
	n := int((safety + every - 1) / every)
	if n < 1 || n > TimelineStepsLimit {
		return nil
	}
	steps := make([]TimelineStep, n)
	sloMet := make([]int64, n)
	cancelled := make([]int64, n)
	stepOf := func(r *record) int {
		if !r.submitted || r.arrival < 0 || r.arrival >= safety {
			return -1
		}
		return int(r.arrival / every)
	}
	for id := 1; id < len(l.recs); id++ {
		r := &l.recs[id]
		i := stepOf(r)
		if i < 0 {
			continue
		}
		s := &steps[i]
		s.Offered++
		if r.replies == 0 {
			continue
		}
		switch r.outcome {
		case actors.Completed:
			s.Completed++
			if r.reply <= r.deadline {
				sloMet[i]++
			}
		case actors.Rejected:
			s.Rejected++
		case actors.Expired, actors.Failed:
			s.Unserved++
		case actors.Cancelled:
			cancelled[i]++
		}
	}
	start := make([]int, n+1)
	for i := range steps {
		start[i+1] = start[i] + int(steps[i].Completed)
	}
	lat := make([]time.Duration, start[n])
	next := append([]int(nil), start[:n]...)
	for id := 1; id < len(l.recs); id++ {
		r := &l.recs[id]
		if r.replies == 0 || r.outcome != actors.Completed {
			continue
		}
		if i := stepOf(r); i >= 0 {
			lat[next[i]] = r.reply - r.arrival
			next[i]++
		}
	}
	for i := range steps {
		s := &steps[i]
		s.FromS = round((time.Duration(i) * every).Seconds(), 6)
		s.LatencyMs = exactPercentiles(lat[start[i]:start[i+1]])
		if wanted := s.Offered - s.Rejected - cancelled[i]; wanted > 0 {
			s.SLOAttainment = round(float64(sloMet[i])/float64(wanted), 6)
		}
	}
	return steps
}

// versionGroups maps each interned key to the index of its
// "model@version" in the returned names (in order of first submission).
func (l *Ledger) versionGroups() (names []string, ofKey []int) {
	ofKey = make([]int, len(l.keys))
	for i, k := range l.keys {
		name := k.Model + "@" + k.Version
		j := -1
		for n, x := range names {
			if x == name {
				j = n
				break
			}
		}
		if j < 0 {
			j = len(names)
			names = append(names, name)
		}
		ofKey[i] = j
	}
	return names, ofKey
}

// retried counts the requests that ran in more than one batch.
func (l *Ledger) retried() int64 {
	var n int64
	for id := 1; id < len(l.recs); id++ {
		if l.recs[id].runs > 1 {
			n++
		}
	}
	return n
}

// splitSums add up the queue wait and the compute of a group's completed
// requests, for the per-group split of latency (NameStats.QueueMeanMs and
// ComputeMeanMs): two additions a request, where a histogram per group
// would cost hundreds of KB each.
type splitSums struct {
	n              int64
	queue, compute time.Duration
}

// addSplit adds one completed request's queue wait and compute to its
// key's and its tenant's sums.
func (l *Ledger) addSplit(r *record, queue, compute time.Duration) {
	if k := int(r.key); k >= len(l.keySplit) {
		l.keySplit = append(l.keySplit, make([]splitSums, k+1-len(l.keySplit))...)
	}
	if t := int(r.tenant); t >= len(l.tenantSplit) {
		l.tenantSplit = append(l.tenantSplit, make([]splitSums, t+1-len(l.tenantSplit))...)
	}
	for _, s := range [2]*splitSums{&l.keySplit[r.key], &l.tenantSplit[r.tenant]} {
		s.n++
		s.queue += queue
		s.compute += compute
	}
}

// means returns the mean queue wait and compute in milliseconds, at
// microsecond resolution.
func (s splitSums) means() (queueMs, computeMs float64) {
	if s.n == 0 {
		return 0, 0
	}
	return round(ms(s.queue/time.Duration(s.n)), 3), round(ms(s.compute/time.Duration(s.n)), 3)
}

// splitOf sums the split of the keys (by index) that group maps to g.
func (l *Ledger) splitOf(ofKey []int, g int) splitSums {
	var out splitSums
	for k, s := range l.keySplit {
		if k < len(ofKey) && ofKey[k] == g {
			out.n += s.n
			out.queue += s.queue
			out.compute += s.compute
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
