package gen

import (
	"strings"
	"testing"
	"time"
)

// Pressure: the KV share held, and each queued request's slack behind
// the prefill queued before it: with 20 prompts of 8 tokens queued behind
// a 40-token prefill on one device (7 prefill tokens a 1.08 ms step), the
// last is predicted after all of them, and a deadline of 15 ms makes the
// tail of the queue late. Deliberate break: a request's wait without the
// queue before it (`ahead += s.context()` removed) gives the last the
// first's slack.
func TestGenPressureSlack(t *testing.T) {
	for _, c := range []struct {
		deadline time.Duration
		late     bool
	}{{time.Second, false}, {15 * time.Millisecond, true}} {
		h := newGenHarness(t, smallGenConfig(), genOut)
		h.send(Submit{Req: genReq(1, strings.Repeat("p", 40), 10)}) // admitted: 10 blocks of 64
		for id := uint64(2); id < 22; id++ {
			r := genReq(id, strings.Repeat("q", 8), 10)
			r.TTFTDeadline = c.deadline
			h.send(Submit{Req: r})
		}
		p := h.g.Pressure(h.c.now)
		if p.KVUsed != 10.0/64 || p.Queued != 20 {
			t.Fatalf("pressure %+v: want KV 10/64 and 20 queued", p)
		}
		rate := 7 / h.cfg.Cost.Of(8, 1, 40).Seconds()
		last := c.deadline - time.Duration(float64(40+8*19)/rate*1e9) - h.cfg.Cost.Of(8, 1, 8)
		if d := p.SlackMin - last; d < -time.Microsecond || d > time.Microsecond || p.SlackP10 <= p.SlackMin {
			t.Fatalf("deadline %v: slack min %v p10 %v, want min %v (the last, behind the whole queue) and p10 above it", c.deadline, p.SlackMin, p.SlackP10, last)
		}
		rec := Recommend(p, 1, DefaultScaleConfig())
		if want := map[bool]int{false: 1, true: 2}[c.late]; rec != want {
			t.Fatalf("deadline %v: pressure %+v recommends %d devices, want %d", c.deadline, p, rec, want)
		}
	}
}

// Recommend: one more device under KV or slack pressure, one fewer
// when low and the rest would hold the KV, within the bounds. Deliberate
// break: scale-down without the low-KV bound (`p.KVUsed <= c.KVDown`
// removed) recommends 2 devices for KV 0.4 on 3.
func TestGenRecommend(t *testing.T) {
	c := DefaultScaleConfig()
	c.DevicesMax = 4
	for _, r := range []struct {
		p             Pressure
		devices, want int
	}{
		{Pressure{KVUsed: 0.95}, 2, 3},
		{Pressure{KVUsed: 0.5, Queued: 10, SlackP10: -time.Millisecond}, 2, 3},
		{Pressure{KVUsed: 0.5, Queued: 10, SlackP10: 200 * time.Millisecond}, 2, 2},
		{Pressure{KVUsed: 0.95}, 4, 4},
		{Pressure{KVUsed: 0.1}, 2, 1},
		{Pressure{KVUsed: 0.1}, 1, 1},
		{Pressure{KVUsed: 0.3, Queued: 1, SlackP10: time.Second}, 2, 2},
		{Pressure{KVUsed: 0.5}, 2, 2},
		{Pressure{KVUsed: 0.3}, 3, 2},
		{Pressure{KVUsed: 0.4}, 3, 3},
		{Pressure{KVUsed: 0.28}, 2, 1},
	} {
		if got := Recommend(r.p, r.devices, c); got != r.want {
			t.Errorf("%+v on %d devices: %d, want %d", r.p, r.devices, got, r.want)
		}
	}
}

// TestStepCostCountsSamples: a step's cost counts the bytes fed, the
// tokens sampled (decodes, and prefill chunks that end a prompt; not a
// chunk in its middle) and the KV after the step, each at its own price.
func TestStepCostCountsSamples(t *testing.T) {
	c := Cost{Base: time.Millisecond, PerToken: 10 * time.Nanosecond, PerSample: 5 * time.Microsecond, PerKVToken: time.Nanosecond}
	job := StepJob{Slots: []StepSlot{
		{Seq: 1, Start: 0, Input: string(make([]byte, 100))},                // a prefill chunk mid-prompt
		{Seq: 2, Start: 100, Input: string(make([]byte, 20)), Sample: true}, // the chunk that ends a prompt
		{Seq: 3, Start: 300, Input: "x", Sample: true},                      // a decode
	}}
	fed, sampled, kv := 121, 2, 100+120+301
	want := time.Millisecond + time.Duration(fed)*10*time.Nanosecond + time.Duration(sampled)*5*time.Microsecond + time.Duration(kv)*time.Nanosecond
	if got := c.StepCost(job); got != want {
		t.Errorf("StepCost %v, want %v (fed %d, sampled %d, KV %d)", got, want, fed, sampled, kv)
	}
	if got := c.Of(fed, sampled, kv); got != want {
		t.Errorf("Of %v, want %v", got, want)
	}
}
