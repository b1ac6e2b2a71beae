package gen

import (
	"cmp"
	"slices"
	"time"
)

// Pressure is a generation group's autoscaling signal: how full its
// KV caches are, and how close its queued requests' first tokens come to
// their TTFT deadlines.
type Pressure struct {
	// KVUsed is the share of the group's KV blocks held, 0 to 1.
	KVUsed float64
	// Queued is the new requests queued (their first token still to
	// come): the slack is over them.
	Queued int
	// SlackMin and SlackP10 are the least and the 10th percentile, over
	// the queued new requests, of the TTFT deadline minus the predicted
	// first-token time (negative: predicted late). Zero when none is
	// queued.
	SlackMin, SlackP10 time.Duration
}

// Pressure returns the group's signal at now. A queued new request's
// first token is predicted after the prefill of every queued new request
// due before it (by TTFT deadline) and of what the devices still have to
// prefill, at the group's prefill rate (each up device with a sequence
// slot free gives its budget less its running sequences' decodes, a step
// at the cost model's time for a full budget and its KV), then its own
// prefill (prefillTime); with no device able to admit, at its deadline,
// then its prefill (negative slack). O(n log n) in
// the queue: a live host calls it at a bounded rate, not per message.
func (g *Scheduler) Pressure(now time.Duration) Pressure {
	var p Pressure
	held, total := 0, g.cfg.BlocksPerDevice*len(g.devs)
	rate, pending := 0.0, 0 // prefill tokens a second; tokens to prefill on the devices
	for d := range g.devs {
		dv := &g.devs[d]
		held += g.cfg.BlocksPerDevice - dv.free
		if !dv.up {
			continue
		}
		kv := 0
		for _, s := range dv.running {
			kv += s.context()
			if r := s.remaining(); r > 1 {
				pending += r
			}
		}
		if room := g.cfg.StepTokensMax - len(dv.running); room > 0 && len(dv.running) < g.cfg.SeqsMax {
			rate += float64(room) / g.cfg.Cost.Of(g.cfg.StepTokensMax, len(dv.running), kv).Seconds()
		}
	}
	if total > 0 {
		p.KVUsed = float64(held) / float64(total)
	}
	var queued []*genSeq
	for _, s := range g.waiting {
		if len(s.sent) == 0 {
			queued = append(queued, s)
		}
	}
	p.Queued = len(queued)
	if len(queued) == 0 {
		return p
	}
	slices.SortFunc(queued, func(a, b *genSeq) int { return cmp.Compare(a.req.TTFTDeadline, b.req.TTFTDeadline) })
	slack := make([]time.Duration, len(queued))
	ahead := pending
	for i, s := range queued {
		// With no device able to admit (every one down or full), the
		// first token is predicted no sooner than its deadline.
		wait := max(s.req.TTFTDeadline-now, 0)
		if rate > 0 {
			wait = time.Duration(float64(ahead) / rate * float64(time.Second))
		}
		slack[i] = s.req.TTFTDeadline - (now + wait + g.prefillTime(s.context()))
		ahead += s.context()
	}
	slices.Sort(slack)
	p.SlackMin, p.SlackP10 = slack[0], slack[(len(slack)-1)/10]
	return p
}

// ScaleConfig is the generation autoscaling recommendation's policy.
type ScaleConfig struct {
	// DevicesMin and DevicesMax bound the recommendation.
	DevicesMin, DevicesMax int
	// KVUp: a KV use at or above it is pressure (preemptions come next).
	KVUp float64
	// SlackUp: a p10 slack below it, with new requests queued, is
	// pressure (0: a tenth of the queue predicted late).
	SlackUp time.Duration
	// KVDown: a KV use at or below it with nothing queued is low, if the
	// devices left would hold the KV below KVUp.
	KVDown float64
}

// DefaultScaleConfig: pressure at 90% KV or a tenth of the queue
// predicted late, low at 30% KV with nothing queued, 1 to 16 devices.
func DefaultScaleConfig() ScaleConfig {
	return ScaleConfig{DevicesMin: 1, DevicesMax: 16, KVUp: 0.9, KVDown: 0.3}
}

// Recommend is the devices a group of devices under p should have:
// one more under pressure, one fewer when low, else as many, within the
// bounds. It is a reading, not a decision with memory: a consumer (a
// HorizontalPodAutoscaler's stabilization window) adds the hysteresis.
func Recommend(p Pressure, devices int, c ScaleConfig) int {
	n := devices
	switch {
	case p.KVUsed >= c.KVUp || p.Queued > 0 && p.SlackP10 < c.SlackUp:
		n++
	case p.Queued == 0 && p.KVUsed <= c.KVDown && devices > 1 && p.KVUsed*float64(devices)/float64(devices-1) < c.KVUp:
		n--
	}
	return min(max(n, c.DevicesMin), c.DevicesMax)
}
