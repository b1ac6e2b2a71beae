package cudabridge

import (
	"fmt"
	"math"

	"github.com/batchd/batchd/actors/gen"
)

// Generation with bytenet: the model run one byte at a time, as a
// generation backend (gen.Step) that the generation scheduler drives.
//
// The generation function. A sequence's context is its prompt (PromptLen
// bytes, at least one) followed by the bytes generated so far. Its state
// after the context x[0..n) is:
//
//   - inside the prompt (n < PromptLen): the float32 sum of the embedding
//     rows of x[0..n), added in increasing position (pool);
//   - at the prompt's end (n == PromptLen): s = h2 of the pooled mean,
//     exactly Infer's: p = pool / PromptLen, h1 = relu(W1 p + B1),
//     s = relu(W2 h1 + B2);
//   - past it (n > PromptLen): s = relu(WH s + WX Embed[x[n-1]] + BH), the
//     continuation's recurrence, fed the byte the context holds at n-1.
//
// The byte at position n (n >= PromptLen) is picked from the logits
// o[v] = WO[v]·s + BO[v] of the printable bytes v (PrintLo to PrintHi):
// greedily (the highest, the lowest byte on a tie) when the sampling's
// Temperature is 0, else drawn from softmax(o / Temperature) with the
// uniform u = the n-th draw of the splitmix64 stream seeded with the
// sampling's Seed (sample). So a token is a function of the context before
// it, the seed and its position: a sequence recomputed from its prompt and
// the bytes already sent (a crash, a preemption) goes on exactly where it
// stopped, and the greedy first ContLen bytes of a prompt are Infer's
// continuation Cont, since Infer's continuation is this recurrence fed its
// own picks. Every float32 operation is Infer's, in Infer's order, so a
// chunked prefill gives the very state of a whole one (the pool is one
// running sum whichever way the prompt is cut).
//
// The state, the model's KV cache, is Embed+Hidden floats per sequence
// whatever its length: a step's cost is a + b·tokens fed (a prefill byte
// is Embed adds, the prompt's end two dense layers, a fed back byte one
// recurrence, a pick Hidden·95 multiply-adds), with no term in the
// context held (no attention).

// Sampling is how a sequence picks its next byte.
type Sampling struct {
	// Temperature 0 is greedy; above 0 the logits are divided by it and
	// a byte drawn from their softmax.
	Temperature float64
	// Seed seeds the draws: the byte at context position n uses the n-th
	// draw of the splitmix64 stream seeded with Seed.
	Seed uint64
}

// Validate reports a temperature that is negative or not a number.
func (s Sampling) Validate() error {
	if !(s.Temperature >= 0) || math.IsInf(s.Temperature, 1) {
		return fmt.Errorf("cudabridge: temperature %v: want a finite number >= 0", s.Temperature)
	}
	return nil
}

// SlotSampling is the sampling a step slot carries: its request's
// temperature and seed (the seed's bits as the unsigned seed).
func SlotSampling(sl gen.StepSlot) Sampling {
	return Sampling{Temperature: sl.Temperature, Seed: uint64(sl.Seed)}
}

// GenSeqsMaxDefault is the most sequences a Gen holds when GenOptions
// leaves SeqsMax zero: 4,096 states of about 600 bytes.
const GenSeqsMaxDefault = 4096

// GenOptions configure a Gen.
type GenOptions struct {
	// Sampling, when set, is every sequence's, whatever its slots carry
	// (tests and benchmarks that fix one). Nil: Step samples each slot by
	// its own Temperature and Seed (the request's, which the scheduler
	// sets), so one step mixes greedy and sampled sequences. StepSampled
	// takes one per slot.
	Sampling *Sampling
	// Stop, when printable, is the byte that ends a sequence: the step that
	// generates it reports End. 0 (not printable) never ends one: the
	// scheduler's MaxTokens does.
	Stop byte
	// SeqsMax bounds the sequences held (0: GenSeqsMaxDefault): a slot
	// that would start one more fails its step.
	SeqsMax int
}

func (o GenOptions) validate() error {
	if o.Sampling == nil {
		return nil
	}
	return o.Sampling.Validate()
}

// fixed is the options' Sampling, greedy when nil.
func (o GenOptions) fixed() Sampling {
	if o.Sampling == nil {
		return Sampling{}
	}
	return *o.Sampling
}

// slotSampling is what Step samples job's slots by: nil (the options'
// Sampling for all) when it is set, else each slot's own.
func (o GenOptions) slotSampling(job gen.StepJob) []Sampling {
	if o.Sampling != nil {
		return nil
	}
	sp := make([]Sampling, len(job.Slots))
	for i, sl := range job.Slots {
		sp[i] = SlotSampling(sl)
	}
	return sp
}

// Gen is bytenet's generation backend for one device, on the CPU: an
// gen.Step keeping each sequence's state between steps. Like a device
// it runs one step at a time (it is not safe for concurrent use).
type Gen struct {
	w    *Weights
	opt  GenOptions
	seqs map[uint64]*genState
	// steps counts the steps run: a sequence's step is the last that fed
	// it, so that two slots of one step for it are an error.
	steps uint64
	// Scratch, so that a step allocates nothing per token.
	p, h1, next [Hidden]float32
	o           [printable]float32
	wt          [printable]float64
}

// printable is the number of bytes a pick chooses among.
const printable = PrintHi - PrintLo + 1

// genState is one sequence's state: the context fed, and the pool or the
// recurrent state (see the generation function above).
type genState struct {
	pos, promptLen int
	pool           [Embed]float32
	s              [Hidden]float32
	step           uint64
}

// NewGen returns a generator with no sequences, with the weights made from
// WeightSeed.
func NewGen(opt GenOptions) (*Gen, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	if opt.SeqsMax < 0 {
		return nil, fmt.Errorf("cudabridge: SeqsMax %d: want >= 0", opt.SeqsMax)
	}
	if opt.SeqsMax == 0 {
		opt.SeqsMax = GenSeqsMaxDefault
	}
	return &Gen{w: NewWeights(WeightSeed), opt: opt, seqs: map[uint64]*genState{}}, nil
}

// Held is the number of sequences whose state the generator keeps.
func (g *Gen) Held() int { return len(g.seqs) }

// Reset drops every sequence, as a device that crashed loses its memory.
func (g *Gen) Reset() { clear(g.seqs) }

// Free drops seq's state (nothing if none is held).
func (g *Gen) Free(seq uint64) { delete(g.seqs, seq) }

// Pos is the context length held for seq, and whether it is held.
func (g *Gen) Pos(seq uint64) (int, bool) {
	s := g.seqs[seq]
	if s == nil {
		return 0, false
	}
	return s.pos, true
}

// Prefill feeds input to seq's context at position start: start 0 begins
// the sequence afresh (dropping what was held) with a prompt of promptLen
// bytes; otherwise start must be the context length held. A chunk may span
// the prompt's end and go on into generated bytes (a recompute).
func (g *Gen) Prefill(seq uint64, start int, input string, promptLen int) error {
	s := g.seqs[seq]
	if start == 0 {
		if promptLen < 1 {
			return fmt.Errorf("cudabridge: sequence %d: prompt of %d bytes, want at least 1", seq, promptLen)
		}
		if s == nil {
			if len(g.seqs) >= g.opt.SeqsMax {
				return fmt.Errorf("cudabridge: sequence %d: %d sequences held, the most", seq, len(g.seqs))
			}
			s = &genState{}
			g.seqs[seq] = s
		}
		*s = genState{promptLen: promptLen, step: s.step}
	}
	if s == nil || s.pos != start || s.promptLen != promptLen {
		held := "nothing"
		if s != nil {
			held = fmt.Sprintf("%d bytes of a %d-byte prompt's context", s.pos, s.promptLen)
		}
		return fmt.Errorf("cudabridge: sequence %d resumes at %d with a %d-byte prompt, holds %s", seq, start, promptLen, held)
	}
	for i := 0; i < len(input); i++ {
		g.feed(s, input[i])
	}
	return nil
}

// Next picks the byte that follows seq's context, which must reach past
// its prompt.
func (g *Gen) Next(seq uint64, sp Sampling) (byte, error) {
	s := g.seqs[seq]
	if s == nil || s.pos < s.promptLen {
		return 0, fmt.Errorf("cudabridge: sequence %d: no next byte inside its prompt", seq)
	}
	return g.pick(s, sp), nil
}

// Step runs job with each slot sampled by its own Temperature and Seed,
// or every slot by the options' Sampling when set (gen.Step).
func (g *Gen) Step(job gen.StepJob) gen.StepDone {
	return g.StepSampled(job, g.opt.slotSampling(job))
}

// StepSampled runs job, slot i sampled by sampling[i] (when sampling is
// nil, every slot by the options' Sampling, greedy if it is nil). It follows gen.Emulated's contract:
// the sequences of Free are dropped first; a slot with Start 0 begins its
// sequence afresh, any other must resume where its sequence stopped; a
// slot that asks for a byte gets it, with End when it is the Stop byte. A
// slot that breaks the contract, or a model other than bytenet's, fails
// the whole step, and the generator then holds nothing (the scheduler
// takes a failed step for a device fault, whose state is lost).
func (g *Gen) StepSampled(job gen.StepJob, sampling []Sampling) gen.StepDone {
	fail := func(err error) gen.StepDone {
		g.Reset()
		return gen.StepDone{ID: job.ID, Err: err.Error()}
	}
	if job.Model != ModelName || (job.Version != "" && job.Version != ModelVersion) {
		return fail(fmt.Errorf("cudabridge: model %q version %q: generating only %s %s: %w", job.Model, job.Version, ModelName, ModelVersion, ErrUnknownModel))
	}
	if sampling != nil && len(sampling) != len(job.Slots) {
		return fail(fmt.Errorf("cudabridge: %d samplings for %d slots", len(sampling), len(job.Slots)))
	}
	for _, id := range job.Free {
		g.Free(id)
	}
	out := make([]gen.StepOut, len(job.Slots))
	g.steps++
	for i, sl := range job.Slots {
		if s := g.seqs[sl.Seq]; s != nil && s.step == g.steps {
			return fail(fmt.Errorf("cudabridge: sequence %d in two slots of one step", sl.Seq))
		}
		if err := g.Prefill(sl.Seq, sl.Start, sl.Input, sl.PromptLen); err != nil {
			return fail(err)
		}
		g.seqs[sl.Seq].step = g.steps
		if !sl.Sample {
			continue
		}
		sp := g.opt.fixed()
		if sampling != nil {
			if err := sampling[i].Validate(); err != nil {
				return fail(err)
			}
			sp = sampling[i]
		}
		c, err := g.Next(sl.Seq, sp)
		if err != nil {
			return fail(err)
		}
		out[i] = stepOut(c, g.opt.Stop)
	}
	return gen.StepDone{ID: job.ID, Out: out}
}

// feed extends s's context by the byte b.
func (g *Gen) feed(s *genState, b byte) {
	w := g.w
	e := w.Embed[int(b)*Embed:][:Embed]
	if s.pos < s.promptLen {
		for d := range s.pool {
			s.pool[d] += e[d]
		}
		s.pos++
		if s.pos == s.promptLen {
			for d := range g.p {
				g.p[d] = s.pool[d] / float32(s.promptLen)
			}
			kernelDense(g.p[:], w.W1, w.B1, g.h1[:], 1, Embed, Hidden, true)
			kernelDense(g.h1[:], w.W2, w.B2, s.s[:], 1, Hidden, Hidden, true)
		}
		return
	}
	for j := range g.next {
		wh := w.WH[j*Hidden:][:Hidden]
		a := w.BH[j]
		for k := range Hidden {
			a += float32(wh[k] * s.s[k])
		}
		wx := w.WX[j*Embed:][:Embed]
		for k := range Embed {
			a += float32(wx[k] * e[k])
		}
		g.next[j] = relu(a)
	}
	s.s = g.next
	s.pos++
}

// pick is the byte at s's position: the printable logits, then the greedy
// or the sampled choice among them.
func (g *Gen) pick(s *genState, sp Sampling) byte {
	w := g.w
	for v := range g.o {
		row := w.WO[(PrintLo+v)*Hidden:][:Hidden]
		a := w.BO[PrintLo+v]
		for k := range Hidden {
			a += float32(row[k] * s.s[k])
		}
		g.o[v] = a
	}
	return choose(g.o[:], g.wt[:], sp, s.pos)
}

// drawAt is the n-th draw (from 0) of the splitmix64 stream seeded with
// seed, as a float64 uniform in [0, 1): the stream's state after n draws
// is seed + n·gamma, so any draw is reached at once.
func drawAt(seed uint64, n int) float64 {
	r := splitmix64(seed + uint64(n)*0x9e3779b97f4a7c15)
	return float64(r.next()>>11) / (1 << 53)
}

// sample returns the index that u picks from softmax(o / temp): the
// weights exp((o[v] - max o) / temp) in float64, and the first index whose
// running sum passes u times their total (the last index of positive
// weight if rounding leaves none). wt is scratch of len(o).
func sample(o []float32, wt []float64, temp, u float64) int {
	m := o[argmax(o, 0)]
	var total float64
	last := 0
	for v, x := range o {
		wt[v] = math.Exp((float64(x) - float64(m)) / temp)
		total += wt[v]
		if wt[v] > 0 {
			last = v
		}
	}
	target := u * total
	var sum float64
	for v := range o {
		sum += wt[v]
		if sum > target {
			return v
		}
	}
	return last
}

// Generate is the reference generation, written plainly from the weights
// (one allocation per formula, like Infer): the n bytes a prompt of at
// least one byte continues with under sp, ending early after the stop byte
// when stop is printable.
func (w *Weights) Generate(prompt string, n int, sp Sampling, stop byte) string {
	out, _ := w.generate(prompt, n, sp, stop)
	return out
}

// generate is Generate, also returning the state before each byte picked:
// states[i] is the state the i-th byte is picked from.
func (w *Weights) generate(prompt string, n int, sp Sampling, stop byte) (string, [][]float32) {
	var p [Embed]float32
	for i := 0; i < len(prompt); i++ {
		row := w.Embed[int(prompt[i])*Embed:][:Embed]
		for d := range p {
			p[d] += row[d]
		}
	}
	for d := range p {
		p[d] /= float32(len(prompt))
	}
	s := affine(w.W2, w.B2, affine(w.W1, w.B1, p[:], true), true)
	out := make([]byte, 0, n)
	var states [][]float32
	wt := make([]float64, printable)
	for len(out) < n {
		states = append(states, s)
		o := affine(w.WO, w.BO, s, false)[PrintLo : PrintHi+1]
		c := choose(o, wt, sp, len(prompt)+len(out))
		out = append(out, c)
		if stop >= PrintLo && stop <= PrintHi && c == stop {
			break
		}
		e := w.Embed[int(c)*Embed:][:Embed]
		x := append(append([]float32{}, s...), e...)
		W := make([]float32, 0, Hidden*(Hidden+Embed))
		for j := range Hidden {
			W = append(W, w.WH[j*Hidden:][:Hidden]...)
			W = append(W, w.WX[j*Embed:][:Embed]...)
		}
		s = affine(W, w.BH, x, true)
	}
	return string(out), states
}
