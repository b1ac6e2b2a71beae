package gen

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// genFake is a hand-driven StepContext: the test sets the clock, reads
// what the scheduler sent, fires its timers (advance) and runs the steps
// it started.
type genFake struct {
	now    time.Duration
	sent   []actors.Message
	timers []genTimer // in the order set
	lastID actors.TimerID
	steps  []StepJob
	rng    *rand.Rand
}

type genTimer struct {
	id  actors.TimerID
	at  time.Duration
	msg actors.Message
}

func newGenFake() *genFake { return &genFake{rng: rand.New(rand.NewPCG(1, 2))} }

func (c *genFake) Self() actors.Address                      { return actors.Address{ID: 1} }
func (c *genFake) Now() time.Duration                        { return c.now }
func (c *genFake) Send(_ actors.Address, msg actors.Message) { c.sent = append(c.sent, msg) }
func (c *genFake) Rand() *rand.Rand                          { return c.rng }
func (c *genFake) Exec(actors.Job)                           { panic("the generation scheduler runs steps, not jobs") }
func (c *genFake) ExecStep(j StepJob)                        { c.steps = append(c.steps, j) }
func (c *genFake) After(d time.Duration, msg actors.Message) actors.TimerID {
	c.lastID++
	c.timers = append(c.timers, genTimer{c.lastID, c.now + d, msg})
	return c.lastID
}
func (c *genFake) Cancel(id actors.TimerID) {
	c.timers = slices.DeleteFunc(c.timers, func(t genTimer) bool { return t.id == id })
}

// advance moves the clock to t, delivering the timers due by then to a,
// earliest first (the first set among those due at once).
func (c *genFake) advance(a actors.Actor, t time.Duration) {
	for {
		i := -1
		for j, tm := range c.timers {
			if tm.at <= t && (i < 0 || tm.at < c.timers[i].at) {
				i = j
			}
		}
		if i < 0 {
			c.now = t
			return
		}
		tm := c.timers[i]
		c.timers = slices.Delete(c.timers, i, i+1)
		c.now = tm.at
		a.Receive(c, tm.msg)
	}
}

// genHarness runs a scheduler's steps on emulated generators, one per
// device, advancing the clock by each step's cost.
type genHarness struct {
	t   *testing.T
	g   *Scheduler
	c   *genFake
	emu []*Emulated
	cfg Config
	out Lognormal
	// preempted lists the requests (IDs 1 to 8) that lost their blocks
	// without ending, in order.
	preempted []uint64
}

var genClient = actors.Address{ID: 9}

func newGenHarness(t *testing.T, cfg Config, out Lognormal) *genHarness {
	t.Helper()
	g, err := NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &genHarness{t: t, g: g, c: newGenFake(), cfg: cfg, out: out}
	for range cfg.Devices {
		h.emu = append(h.emu, NewEmulated(out, cfg.BlockTokens))
	}
	return h
}

func (h *genHarness) send(msg actors.Message) {
	held := map[uint64]int{}
	for id := uint64(1); id <= 8; id++ {
		held[id] = h.g.Blocks(id)
	}
	h.g.Receive(h.c, msg)
	for id := uint64(1); id <= 8; id++ {
		if held[id] > 0 && h.g.Blocks(id) == 0 && !ended(h, id) {
			h.preempted = append(h.preempted, id)
		}
	}
	if err := h.g.Check(); err != nil {
		h.t.Fatal(err)
	}
}

// step runs the oldest step in flight: fault makes its device crash.
func (h *genHarness) step(fault bool) StepJob {
	h.t.Helper()
	if len(h.c.steps) == 0 {
		h.t.Fatal("no step in flight")
	}
	j := h.c.steps[0]
	h.c.steps = h.c.steps[1:]
	h.c.advance(genActor{h}, h.c.now+h.cfg.Cost.StepCost(j))
	if fault {
		h.emu[j.Device].Reset()
		h.send(StepDone{ID: j.ID, Fault: true})
		return j
	}
	res := h.emu[j.Device].Step(j)
	if res.Err != "" {
		h.t.Fatal(res.Err)
	}
	h.send(res)
	return j
}

// genActor lets fakeCtx.advance deliver timers to the scheduler.
type genActor struct{ h *genHarness }

func (a genActor) Receive(_ actors.Context, msg actors.Message) { a.h.send(msg) }

// drain runs steps (advancing past restart timers) until none is left.
func (h *genHarness) drain() {
	for range 10_000 {
		if len(h.c.steps) == 0 {
			if h.g.InFlight() == 0 {
				return
			}
			h.untilStep()
			continue
		}
		h.step(false)
	}
	h.t.Fatal("did not drain")
}

// stream collects the tokens and the end sent to the client for id.
func (h *genHarness) stream(id uint64) (string, *End) {
	var b strings.Builder
	var end *End
	for _, msg := range h.c.sent {
		switch m := msg.(type) {
		case Token:
			if m.ID == id {
				if m.Index != b.Len() {
					h.t.Fatalf("request %d: token index %d after %d tokens", id, m.Index, b.Len())
				}
				b.WriteByte(m.Byte)
			}
		case End:
			if m.ID == id {
				if end != nil {
					h.t.Fatalf("request %d: two ends", id)
				}
				end = &m
			}
		}
	}
	return b.String(), end
}

func smallGenConfig() Config {
	cfg := DefaultConfig("m", "v1", 1)
	cfg.BlockTokens, cfg.BlocksPerDevice = 4, 64
	cfg.StepTokensMax, cfg.SeqsMax = 8, 4
	cfg.AdmitHeadroomBlocks = 0
	cfg.Cost = Cost{Base: time.Millisecond, PerToken: 10 * time.Microsecond}
	return cfg
}

func genReq(id uint64, prompt string, maxTokens int) Request {
	return Request{ID: id, Tenant: "t", Model: "m", Prompt: prompt, MaxTokens: maxTokens, ReplyTo: genClient}
}

var genOut = Lognormal{Median: 12, Sigma: 0, Max: 100}

// A 20-token prompt under an 8-token budget is fed in chunks of 8, 8 and
// 4, the last sampling the first token; the stream is the generator's
// output, and the sequence holds no block once it ends.
func TestGenChunkedPrefill(t *testing.T) {
	h := newGenHarness(t, smallGenConfig(), genOut)
	prompt := "abcdefghijklmnopqrst"
	h.send(Submit{Req: genReq(1, prompt, 50)})
	var chunks []int
	for range 3 {
		j := h.step(false)
		chunks = append(chunks, len(j.Slots[0].Input))
	}
	if want := []int{8, 8, 4}; !equalInts(chunks, want) {
		t.Fatalf("prefill chunks %v, want %v", chunks, want)
	}
	h.drain()
	got, end := h.stream(1)
	if want := EmulatedOutput("m", "v1", prompt, genOut, 50); got != want || end == nil || end.Outcome != actors.Completed {
		t.Fatalf("stream %q end %+v, want %q completed", got, end, want)
	}
	if h.g.BlocksUsed(0) != 0 || h.g.Blocks(1) != 0 {
		t.Fatalf("blocks held after the end: %d", h.g.BlocksUsed(0))
	}
}

// Decodes go first: a sequence decoding keeps getting its token each step
// while a long prompt that arrives later is prefilled a chunk at a time
// beside it.
func TestGenDecodeNotStalledByPrefill(t *testing.T) {
	h := newGenHarness(t, smallGenConfig(), Lognormal{Median: 100, Max: 100})
	h.send(Submit{Req: genReq(1, "ab", 100)})
	h.step(false) // prefill, first token
	h.send(Submit{Req: genReq(2, strings.Repeat("x", 60), 100)})
	h.step(false) // the decode in flight when request 2 came
	for range 5 {
		j := h.step(false)
		if len(j.Slots) != 2 || j.Slots[0].Seq != 1 || len(j.Slots[0].Input) != 1 || len(j.Slots[1].Input) != 7 {
			t.Fatalf("step %+v: want request 1's decode and a 7-token chunk of request 2", j.Slots)
		}
	}
}

// With no block free for a decode, the victim is the lowest priority,
// then the newest admitted; it is recomputed later and its stream goes on
// without a repeat or a gap.
func TestGenPreemptionOrder(t *testing.T) {
	cfg := smallGenConfig()
	cfg.BlockTokens, cfg.BlocksPerDevice, cfg.StepTokensMax = 1, 13, 16
	h := newGenHarness(t, cfg, Lognormal{Median: 8, Max: 8})
	low := genReq(1, "aaaa", 8)
	low.Priority = actors.PriorityLow
	h.send(Submit{Req: low})
	h.send(Submit{Req: genReq(2, "bbbb", 8)})
	h.send(Submit{Req: genReq(3, "cccc", 8)})
	h.drain()
	order := h.preempted
	if len(order) < 2 || order[0] != 1 || order[1] != 3 {
		t.Fatalf("preempted %v, want the low-priority request 1 first, then the newest, 3", order)
	}
	for id := uint64(1); id <= 3; id++ {
		got, end := h.stream(id)
		p := strings.Repeat(string(rune('a'+id-1)), 4)
		if want := EmulatedOutput("m", "v1", p, Lognormal{Median: 8, Max: 8}, 8); got != want || end.Outcome != actors.Completed {
			t.Fatalf("request %d: stream %q end %+v, want %q", id, got, end, want)
		}
	}
}

func ended(h *genHarness, id uint64) bool {
	_, end := h.stream(id)
	return end != nil
}

// A device crash mid-stream: the sequence is recomputed from its prompt
// and the tokens it sent, and the stream goes on where it stopped.
func TestGenCrashResumesStream(t *testing.T) {
	h := newGenHarness(t, smallGenConfig(), genOut)
	h.send(Submit{Req: genReq(1, "hello", 50)})
	for range 4 {
		h.step(false)
	}
	sent, _ := h.stream(1)
	h.step(true) // crash
	j := h.drainFirst()
	if j.Slots[0].Start != 0 || j.Slots[0].Input != "hello"+sent[:min(len(sent), 3)] {
		t.Fatalf("recompute slot %+v, want the prompt then the %d tokens sent (%q)", j.Slots[0], len(sent), sent)
	}
	h.drain()
	got, end := h.stream(1)
	if want := EmulatedOutput("m", "v1", "hello", genOut, 50); got != want || end.Outcome != actors.Completed || end.Attempts != 2 {
		t.Fatalf("stream %q end %+v, want %q completed on attempt 2", got, end, want)
	}
}

// untilStep advances the clock a millisecond at a time until a step is
// in flight (a device restarted), for at most 10 s.
func (h *genHarness) untilStep() {
	for range 10_000 {
		if len(h.c.steps) > 0 {
			return
		}
		h.c.advance(genActor{h}, h.c.now+time.Millisecond)
	}
}

// drainFirst advances to the device's restart and runs the first step.
func (h *genHarness) drainFirst() StepJob {
	h.untilStep()
	return h.step(false)
}

// After AttemptMax crashes under it, a stream ends Failed (attempts).
func TestGenAttemptsRunOut(t *testing.T) {
	cfg := smallGenConfig()
	cfg.AttemptMax = 2
	h := newGenHarness(t, cfg, genOut)
	h.send(Submit{Req: genReq(1, "hello", 50)})
	h.step(true)
	h.untilStep()
	h.step(true)
	_, end := h.stream(1)
	if end == nil || end.Outcome != actors.Failed || end.Reason != actors.ReasonAttempts || h.g.InFlight() != 0 {
		t.Fatalf("end %+v, want failed (attempts)", end)
	}
}

// A queued request whose first token can no longer come by its TTFT
// deadline fails early, before the deadline.
func TestGenTTFTFailsEarly(t *testing.T) {
	cfg := smallGenConfig()
	cfg.SeqsMax = 1
	h := newGenHarness(t, cfg, Lognormal{Median: 100, Max: 100})
	h.send(Submit{Req: genReq(1, "ab", 100)}) // holds the only slot
	r := genReq(2, strings.Repeat("y", 40), 10)
	r.TTFTDeadline = 20 * time.Millisecond
	h.send(Submit{Req: r})
	for range 30 {
		h.step(false)
		if ended(h, 2) {
			break
		}
	}
	_, end := h.stream(2)
	if end == nil || end.Outcome != actors.Expired || end.Reason != actors.ReasonDeadline || end.Done >= r.TTFTDeadline {
		t.Fatalf("end %+v, want expired (deadline) before %v", end, r.TTFTDeadline)
	}
}

// A cancel frees the sequence's blocks at once, even with its step in
// flight, and its device is told to drop it with the next step.
func TestGenCancelFrees(t *testing.T) {
	h := newGenHarness(t, smallGenConfig(), Lognormal{Median: 100, Max: 100})
	h.send(Submit{Req: genReq(1, "abcdef", 100)})
	h.send(Submit{Req: genReq(2, "gh", 100)})
	h.step(false)
	h.send(Cancel{ID: 1}) // its decode step is in flight
	if h.g.Blocks(1) != 0 {
		t.Fatalf("cancelled request holds %d blocks", h.g.Blocks(1))
	}
	h.step(false)
	j := h.step(false)
	if !equalU64(j.Free, []uint64{1}) && len(h.c.steps) > 0 {
		t.Fatalf("next step frees %v, want [1]", j.Free)
	}
	if _, end := h.stream(1); end == nil || end.Outcome != actors.Cancelled {
		t.Fatalf("end %+v, want cancelled", end)
	}
}

// The emulated generator: recomputing from the prompt and a prefix of
// the output gives the rest of the output.
func TestEmulatedGenRecompute(t *testing.T) {
	out := Lognormal{Median: 30, Sigma: 1, Max: 200}
	want := EmulatedOutput("m", "v", "prompt", out, 200)
	if len(want) < 3 {
		t.Fatalf("output %q too short for the test", want)
	}
	e := NewEmulated(out, 4)
	k := len(want) / 2
	res := e.Step(StepJob{Model: "m", Version: "v", Slots: []StepSlot{{Seq: 1, Input: "prompt" + want[:k], PromptLen: 6, Sample: true}}})
	if res.Out[0].Token != want[k] {
		t.Fatalf("recomputed token %q, want %q", res.Out[0].Token, want[k])
	}
	if other := EmulatedOutput("m", "v2", "prompt", out, 200); other == want {
		t.Fatalf("two versions give one output %q", want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Static batching (the comparison mode): a request that comes while a
// batch runs waits for the batch's last sequence to end.
func TestGenStaticWaitsForBatch(t *testing.T) {
	cfg := smallGenConfig()
	cfg.Static = true
	out := Lognormal{Median: 6, Max: 6}
	h := newGenHarness(t, cfg, out)
	h.send(Submit{Req: genReq(1, "ab", 6)})
	h.step(false)
	h.send(Submit{Req: genReq(2, "cd", 6)})
	for len(h.c.steps) > 0 && !ended(h, 1) {
		if j := h.step(false); len(j.Slots) != 1 || j.Slots[0].Seq != 1 {
			t.Fatalf("step %+v while request 1 runs: want request 1 alone", j.Slots)
		}
	}
	h.drain()
	if got, end := h.stream(2); end == nil || end.Outcome != actors.Completed || got != EmulatedOutput("m", "v1", "cd", out, 6) {
		t.Fatalf("request 2: %q %+v", got, end)
	}
}

// Every slot of a sequence carries its request's temperature and seed,
// across its prefill chunks and decodes, beside a sequence with its own;
// a temperature a backend would fail a step on is refused at submission.
func TestGenSlotsCarrySampling(t *testing.T) {
	h := newGenHarness(t, smallGenConfig(), genOut)
	a, b := genReq(1, "abcdefghijkl", 10), genReq(2, "xy", 10)
	a.Temperature, a.Seed = 0.7, -42
	h.send(Submit{Req: a})
	h.send(Submit{Req: b})
	slots := 0
	for range 10_000 {
		if len(h.c.steps) == 0 {
			break
		}
		j := h.step(false)
		for _, sl := range j.Slots {
			want := map[uint64][2]any{1: {0.7, int64(-42)}, 2: {0.0, int64(0)}}[sl.Seq]
			if sl.Temperature != want[0] || sl.Seed != want[1] {
				t.Fatalf("step %d: sequence %d slot temperature %v seed %d, want %v", j.ID, sl.Seq, sl.Temperature, sl.Seed, want)
			}
			slots++
		}
	}
	if slots < 20 {
		t.Fatalf("%d slots checked, want both sequences' whole lives", slots)
	}
	for i, temp := range []float64{-1, math.NaN(), math.Inf(1)} {
		r := genReq(uint64(3+i), "ab", 4)
		r.Temperature = temp
		h.send(Submit{Req: r})
		if _, end := h.stream(r.ID); end == nil || end.Reason != actors.ReasonInvalid {
			t.Fatalf("temperature %v: end %+v, want rejected invalid", temp, end)
		}
	}
}

// The prefill budget goes to the earliest TTFT deadline within a level:
// a short prompt due soon, admitted while a long one due late is being
// prefilled, gets the next step's whole budget and its first token by
// its deadline; the long one resumes after it.
func TestGenPrefillEarliestDeadlineFirst(t *testing.T) {
	h := newGenHarness(t, smallGenConfig(), genOut)
	long := genReq(1, strings.Repeat("l", 40), 10)
	long.TTFTDeadline = time.Second
	h.send(Submit{Req: long})
	soon := genReq(2, strings.Repeat("s", 8), 10)
	soon.TTFTDeadline = 5 * time.Millisecond
	h.send(Submit{Req: soon})
	first := h.step(false) // the long prompt's first chunk, alone
	if len(first.Slots) != 1 || first.Slots[0].Seq != 1 {
		t.Fatalf("first step %+v: want the long prompt's chunk alone", first.Slots)
	}
	j := h.step(false)
	if len(j.Slots) == 0 || j.Slots[0].Seq != 2 || len(j.Slots[0].Input) != 8 || !j.Slots[0].Sample {
		t.Fatalf("second step %+v: want request 2's whole prompt first, sampling its first token", j.Slots)
	}
	h.drain()
	_, end := h.stream(2)
	if end == nil || end.Outcome != actors.Completed || end.FirstToken > soon.TTFTDeadline {
		t.Fatalf("request 2 end %+v, want completed with its first token by %v", end, soon.TTFTDeadline)
	}
	if _, end := h.stream(1); end == nil || end.Outcome != actors.Completed {
		t.Fatalf("request 1 end %+v, want completed", end)
	}
}

// A queued request whose first token would come past its TTFT deadline
// on the device (its prompt needs two steps beside the sequences
// decoding there, though one step alone would make it) is not admitted
// and fails early; one queued behind it that can make its own deadline is
// admitted in its place.
func TestGenAdmitSkipsPredictedLate(t *testing.T) {
	out := Lognormal{Median: 100, Max: 100}
	h := newGenHarness(t, smallGenConfig(), out)
	for id := uint64(1); id <= 3; id++ {
		h.send(Submit{Req: genReq(id, "ab", 100)})
	}
	h.step(false) // the three prompts, and their first tokens
	// The decode step in flight costs 1.03 ms; then 8 tokens beside 3
	// decodes need two steps (about 2.1 ms), where one alone (1.08 ms)
	// would be in time.
	t0 := h.c.now
	late := genReq(4, strings.Repeat("x", 8), 10)
	late.TTFTDeadline = t0 + 2600*time.Microsecond
	h.send(Submit{Req: late})
	h.send(Submit{Req: genReq(5, "yy", 10)})
	j := h.step(false)
	if len(j.Slots) != 3 {
		t.Fatalf("step in flight %+v: want the three decodes", j.Slots)
	}
	next := h.c.steps[0]
	for _, sl := range next.Slots {
		if sl.Seq == 4 {
			t.Fatalf("next step %+v admits request 4, whose first token would be late", next.Slots)
		}
	}
	if !slices.ContainsFunc(next.Slots, func(sl StepSlot) bool { return sl.Seq == 5 }) {
		t.Fatalf("next step %+v: want request 5 admitted in request 4's place", next.Slots)
	}
	h.drain()
	if got, end := h.stream(4); got != "" || end == nil || end.Outcome != actors.Expired || end.Done > late.TTFTDeadline {
		t.Fatalf("request 4: stream %q end %+v, want expired with no token before %v", got, end, late.TTFTDeadline)
	}
	if _, end := h.stream(5); end == nil || end.Outcome != actors.Completed {
		t.Fatalf("request 5 end %+v, want completed", end)
	}
}

// ReplyMargin is held back from the TTFT deadline: a request whose first
// token the idle device would sample 1.02 ms after it arrives, with 1.5 ms
// to its deadline, is served without a margin, and refused early (no
// token, ended before its deadline) with 1 ms held back for the token's
// way to the client.
func TestGenReplyMargin(t *testing.T) {
	for _, tc := range []struct {
		margin time.Duration
		want   actors.Outcome
	}{{0, actors.Completed}, {time.Millisecond, actors.Expired}} {
		cfg := smallGenConfig()
		cfg.ReplyMargin = tc.margin
		h := newGenHarness(t, cfg, genOut)
		r := genReq(1, "ab", 10)
		r.TTFTDeadline = 1500 * time.Microsecond
		h.send(Submit{Req: r})
		h.drain()
		got, end := h.stream(1)
		if end == nil || end.Outcome != tc.want {
			t.Fatalf("margin %v: end %+v, want %v", tc.margin, end, tc.want)
		}
		if tc.want == actors.Expired && (got != "" || end.Done > r.TTFTDeadline) {
			t.Fatalf("margin %v: stream %q, ended at %v: want no token, ended by %v", tc.margin, got, end.Done, r.TTFTDeadline)
		}
	}
}

func TestGenReplyMarginValidated(t *testing.T) {
	for _, m := range []time.Duration{-time.Millisecond, time.Second} {
		cfg := smallGenConfig()
		cfg.ReplyMargin = m
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "ReplyMargin") {
			t.Fatalf("ReplyMargin %v (TTFT %v): %v, want an error naming it", m, cfg.TTFT, err)
		}
	}
}
