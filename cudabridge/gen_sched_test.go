package cudabridge

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/gen"
	"github.com/batchd/batchd/sim"
)

// The generation scheduler driving Gen in the simulator, as sim/gen's host
// drives the emulated generator: continuous batching, chunked prefill,
// preemption by recompute (few KV blocks) and device crashes, with every
// stream checked against the reference generation.

var (
	genSchedAddr  = actors.Address{ID: 1}
	genClientAddr = actors.Address{ID: 2}
)

// genHost makes the scheduler an actor of the World and runs its steps on
// one Gen per device, each StepDone after the step's cost; every
// crashEvery-th step crashes its device instead.
type genHost struct {
	t          *testing.T
	g          *gen.Scheduler
	gens       []*Gen
	cost       gen.Cost
	crashEvery int
	steps      int
	crashes    int
	client     *genClient
}

type genStepCtx struct {
	actors.Context
	h *genHost
}

func (c genStepCtx) ExecStep(job gen.StepJob) { c.h.exec(c.Context, job) }

type genDoneMsg struct{ res gen.StepDone }

func (h *genHost) Receive(ctx actors.Context, msg actors.Message) {
	if m, ok := msg.(genDoneMsg); ok {
		msg = m.res
	}
	h.g.Receive(genStepCtx{ctx, h}, msg)
	if err := h.g.Check(); err != nil {
		h.t.Error(err)
	}
}

func (h *genHost) exec(ctx actors.Context, job gen.StepJob) {
	h.steps++
	cost := h.cost.StepCost(job)
	be := h.gens[job.Device]
	if h.crashEvery > 0 && h.steps%h.crashEvery == 0 {
		be.Reset()
		h.crashes++
		ctx.After(cost/2, genDoneMsg{gen.StepDone{ID: job.ID, Fault: true}})
		return
	}
	res := be.Step(job)
	if res.Err != "" {
		h.t.Errorf("device %d step %d: %s", job.Device, job.ID, res.Err)
	}
	// A sequence that ended before this step is freed by it.
	for id := range be.seqs {
		if h.client.ends[id] != nil {
			h.t.Errorf("device %d still holds request %d after step %d; it ended %v", job.Device, id, job.ID, h.client.ends[id].Outcome)
		}
	}
	ctx.After(cost, genDoneMsg{res})
}

// genClient collects every request's stream, checking that indices come
// once and in order and that one gen.End follows the last token.
type genClient struct {
	t       *testing.T
	streams map[uint64]*strings.Builder
	ends    map[uint64]*gen.End
}

func (c *genClient) Receive(_ actors.Context, msg actors.Message) {
	switch m := msg.(type) {
	case gen.Token:
		b := c.streams[m.ID]
		if b == nil {
			b = &strings.Builder{}
			c.streams[m.ID] = b
		}
		if m.Index != b.Len() || c.ends[m.ID] != nil {
			c.t.Errorf("request %d: token %d after %d tokens (ended %v)", m.ID, m.Index, b.Len(), c.ends[m.ID] != nil)
		}
		b.WriteByte(m.Byte)
	case gen.End:
		if c.ends[m.ID] != nil {
			c.t.Errorf("request %d: a second GenEnd", m.ID)
		}
		c.ends[m.ID] = &m
	}
}

func TestGenSchedulerStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  GenOptions
	}{
		{"greedy", GenOptions{}},
		{"sampled with stop", GenOptions{Sampling: &Sampling{Temperature: 0.9, Seed: 5}, Stop: 'e'}},
	} {
		t.Run(tc.name, func(t *testing.T) { testGenScheduler(t, tc.opt) })
	}
}

func testGenScheduler(t *testing.T, opt GenOptions) {
	cfg := gen.DefaultConfig(ModelName, ModelVersion, 2)
	cfg.BlocksPerDevice = 32 // 512 tokens a device, no headroom: preemptions
	cfg.AdmitHeadroomBlocks = 0
	cfg.SeqsMax = 8
	cfg.StepTokensMax = 64
	cfg.TTFT, cfg.Timeout = time.Hour, time.Hour
	cfg.AttemptMax = 100
	g, err := gen.NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := sim.NewWorld(sim.DefaultWorldConfig(1))
	client := &genClient{t: t, streams: map[uint64]*strings.Builder{}, ends: map[uint64]*gen.End{}}
	h := &genHost{t: t, g: g, cost: cfg.Cost, crashEvery: 97, client: client}
	for range cfg.Devices {
		h.gens = append(h.gens, newTestGen(t, opt))
	}
	w.Spawn(genSchedAddr, h)
	w.Spawn(genClientAddr, client)

	rng := rand.New(rand.NewPCG(1, 2))
	reqs := map[uint64]gen.Request{}
	cancelled := map[uint64]bool{}
	for id := uint64(1); id <= 40; id++ {
		p := make([]byte, 5+rng.IntN(200))
		for i := range p {
			p[i] = 'a' + byte(rng.IntN(26))
		}
		at := time.Duration(id) * time.Millisecond
		req := gen.Request{ID: id, Tenant: "t", Model: ModelName, Prompt: string(p), MaxTokens: 40 + rng.IntN(120), Arrival: at, ReplyTo: genClientAddr}
		reqs[id] = req
		w.Inject(at, genSchedAddr, gen.Submit{Req: req})
		if id%10 == 0 {
			cancelled[id] = true
			w.Inject(at+200*time.Millisecond, genSchedAddr, gen.Cancel{ID: id})
		}
	}
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}

	ref := NewWeights(WeightSeed)
	for id, req := range reqs {
		end := client.ends[id]
		var got string
		if b := client.streams[id]; b != nil {
			got = b.String()
		}
		want := ref.Generate(req.Prompt, req.MaxTokens, opt.fixed(), opt.Stop)
		switch {
		case end == nil:
			t.Errorf("request %d: no GenEnd", id)
		case end.Tokens != len(got):
			t.Errorf("request %d: GenEnd says %d tokens, %d came", id, end.Tokens, len(got))
		case end.Outcome == actors.Completed && got != want:
			t.Errorf("request %d: stream %q, want %q", id, got, want)
		case end.Outcome == actors.Cancelled && (!cancelled[id] || !strings.HasPrefix(want, got)):
			t.Errorf("request %d cancelled: stream %q is not a prefix of %q", id, got, want)
		case end.Outcome != actors.Completed && end.Outcome != actors.Cancelled:
			t.Errorf("request %d: %v %v %s", id, end.Outcome, end.Reason, end.Err)
		}
	}
	st := g.Stats()
	t.Logf("%d steps, %d tokens, %d preemptions, %d crashes", st.Steps, st.Tokens, st.Preemptions, h.crashes)
	if st.Preemptions == 0 || h.crashes == 0 {
		t.Errorf("the run tested no preemption (%d) or no crash (%d)", st.Preemptions, h.crashes)
	}
}
