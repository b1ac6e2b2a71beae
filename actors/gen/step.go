package gen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/batchd/batchd/actors"
)

// StepJob is one step of a generation model on one device: a slot per
// sequence the step advances, each feeding that sequence's next input
// tokens (a prefill chunk, or for a decode its last generated token) and,
// when the slot reaches the end of the sequence's known context, asking
// for the next token. It is plain data, so a step can be shipped to a
// device on another node.
type StepJob struct {
	// ID correlates the job with its StepDone. Unique per scheduler.
	ID uint64
	// Device is the index of the device of the scheduler's group that runs
	// the step.
	Device  int
	Model   string
	Version string
	Slots   []StepSlot
	// Free lists sequences whose KV state the device may drop: finished,
	// cancelled, expired or preempted since its last step.
	Free []uint64
}

// StepSlot is one sequence's part of a step.
type StepSlot struct {
	// Seq names the sequence (the request ID).
	Seq uint64
	// Start is the position in the sequence's context of Input's first
	// token: the KV tokens the device holds for Seq. 0 starts the sequence
	// afresh (a first prefill, or a recompute after preemption or a crash):
	// the device drops whatever it held for Seq.
	Start int
	// Input is the tokens to feed, one byte each: a prefill chunk of the
	// context (the prompt, then on a recompute the tokens already sent), or
	// for a decode the last token generated.
	Input string
	// PromptLen is the length of the request's prompt: the context past it
	// is generated text (an emulated generator draws the output length from
	// the prompt).
	PromptLen int
	// Sample asks for the token that follows Input: set when Input ends
	// the known context (the last prefill chunk, or a decode).
	Sample bool
	// Temperature and Seed are the sequence's sampling (Request's):
	// the same in every slot of the sequence.
	Temperature float64
	Seed        int64
}

// StepOut is the result of one slot.
type StepOut struct {
	// Token is the next token, when the slot asked for one.
	Token byte
	// End: Token is the sequence's last (the model ended it).
	End bool
}

// StepDone reports a finished StepJob to the scheduler that started it.
type StepDone struct {
	ID uint64
	// Out holds one entry per slot when Err is empty and Fault is false.
	Out []StepOut
	// Err is set when the step failed as a whole; the scheduler treats it
	// as a device fault, since the device's KV state is then unknown.
	Err string
	// Fault is set when the device itself failed (crashed, lost its
	// memory): no output is valid and every KV state on it is gone.
	Fault bool
}

// StepContext is the Context of a runtime that hosts a Scheduler: it
// also runs generation steps. ExecStep hands a step to the runtime, which
// runs it off the actor on the device it names and later delivers a
// StepDone with the same ID to the actor itself (a hung step may never
// complete). It is apart from Context.Exec, whose jobs are the fixed-cost
// batchstring batches, so that the runtimes of the batcher need no change.
type StepContext interface {
	actors.Context
	ExecStep(job StepJob)
}

// Step is a generation backend, the generation counterpart of
// batchstring: prefill chunks and decode slots in, one next token per
// sampling slot out. An implementation keeps each sequence's KV state
// between steps (StepSlot.Start says where a slot resumes). It is what a
// runtime's ExecStep calls, blocking, off the actor.
type Step interface {
	Step(job StepJob) StepDone
}

// Cost is the cost model of a generation step: Base + PerToken·(tokens
// fed in the step) + PerSample·(tokens sampled: one per slot that asks
// for the next token, the decodes and the prefills that end) +
// PerKVToken·(KV tokens the step's sequences hold, which attention
// reads). It is what the scheduler predicts a step with and what the
// emulated generator takes.
//
// PerSample is apart from PerToken because feeding a token and sampling
// one need not cost alike: bytenet on the CPU feeds a prompt byte in
// about 24 ns (its recurrent state's update) and samples a token in about
// 6.3 µs (the output layer over every byte; engine/config's
// BytenetCPUCost), so a model with one term for both predicted its
// prefills a hundred times too slow.
type Cost struct {
	Base       time.Duration
	PerToken   time.Duration
	PerSample  time.Duration
	PerKVToken time.Duration
}

// Of is the time of a step that feeds tokens, samples sampled of them
// and reads kv KV tokens.
func (c Cost) Of(tokens, sampled, kv int) time.Duration {
	return c.Base + time.Duration(tokens)*c.PerToken + time.Duration(sampled)*c.PerSample + time.Duration(kv)*c.PerKVToken
}

// StepCost is the cost of job under c: its tokens fed, the tokens it
// samples, and its sequences' KV after the step.
func (c Cost) StepCost(job StepJob) time.Duration {
	tokens, sampled, kv := 0, 0, 0
	for _, s := range job.Slots {
		tokens += len(s.Input)
		kv += s.Start + len(s.Input)
		if s.Sample {
			sampled++
		}
	}
	return c.Of(tokens, sampled, kv)
}

// Lognormal is a length distribution with a long tail: exp(ln(Median) +
// Sigma·N(0,1)), rounded and clamped to [1, Max].
type Lognormal struct {
	Median float64
	Sigma  float64
	Max    int
}

// Draw draws one length from r.
func (l Lognormal) Draw(r *rand.Rand) int {
	v := math.Round(math.Exp(math.Log(l.Median) + l.Sigma*r.NormFloat64()))
	return int(min(max(v, 1), float64(max(l.Max, 1))))
}

// Validate reports a distribution that cannot be drawn from.
func (l Lognormal) Validate() error {
	if !(l.Median >= 1) || l.Sigma < 0 || math.IsNaN(l.Sigma) || l.Max < 1 {
		return fmt.Errorf("lognormal %+v: want Median >= 1, Sigma >= 0, Max >= 1", l)
	}
	return nil
}

// The emulated generator's tokens are a function of the context before
// them: genSeed(model, version) folded with every context token
// (genFold), mapped to a letter (genToken). So the token at a position is
// a checkable function of prompt, position, model and version, and a
// sequence recomputed from its prompt and the tokens already sent goes on
// exactly where it stopped.
func genSeed(model, version string) uint64 { return actors.InputHash(model + "@" + version) }

func genFold(h uint64, b byte) uint64 {
	h = (h ^ uint64(b)) * 1099511628211
	return h ^ h>>29
}

func genToken(h uint64) byte {
	x := h * 0x9E3779B97F4A7C15
	return 'a' + byte((x>>40)%26)
}

// genOutLen is the emulated output length of a prompt whose context hash
// is hp: drawn from dist by a generator seeded with hp, so it is a
// function of the prompt, model and version.
func genOutLen(hp uint64, dist Lognormal) int {
	return dist.Draw(rand.New(rand.NewPCG(hp, 0x67656e6c656e)))
}

// EmulatedOutput is the whole output the emulated generator gives a
// prompt on model version, cut at maxTokens: what a checker compares a
// stream with.
func EmulatedOutput(model, version, prompt string, outLen Lognormal, maxTokens int) string {
	h := genSeed(model, version)
	for i := 0; i < len(prompt); i++ {
		h = genFold(h, prompt[i])
	}
	n := min(genOutLen(h, outLen), maxTokens)
	out := make([]byte, 0, n)
	for range n {
		t := genToken(h)
		out = append(out, t)
		h = genFold(h, t)
	}
	return string(out)
}

// Emulated is the emulated generation backend of one device: a Step
// whose tokens are EmulatedOutput's and whose output lengths are drawn
// from OutLen (its cost is the runtime's, Cost.StepCost). It keeps, per sequence, the hash of
// the context it holds (its stand-in for the KV cache), so a slot that
// does not resume where the sequence stopped is an error, as a real
// device's garbage output would be.
type Emulated struct {
	OutLen Lognormal
	// BlockTokens is the KV block size Blocks counts in.
	BlockTokens int
	seqs        map[uint64]*emuSeq
	blocks      int
}

type emuSeq struct {
	h   uint64 // hash of the context fed so far
	pos int    // context tokens fed
	// n is the output length, once the prompt has been fed.
	n int
}

// NewEmulated returns an emulated generator with no sequences.
func NewEmulated(outLen Lognormal, blockTokens int) *Emulated {
	return &Emulated{OutLen: outLen, BlockTokens: max(blockTokens, 1), seqs: map[uint64]*emuSeq{}}
}

// Reset drops every sequence, as a device that crashed loses its memory.
func (e *Emulated) Reset() {
	clear(e.seqs)
	e.blocks = 0
}

// Held is the number of sequences whose state the device keeps.
func (e *Emulated) Held() int { return len(e.seqs) }

// Blocks is the KV blocks of BlockTokens tokens that the sequences the
// device keeps fill: the memory it really uses.
func (e *Emulated) Blocks() int { return e.blocks }

func (e *Emulated) drop(id uint64) {
	if s := e.seqs[id]; s != nil {
		e.blocks -= (s.pos + e.BlockTokens - 1) / e.BlockTokens
		delete(e.seqs, id)
	}
}

// Step runs job.
func (e *Emulated) Step(job StepJob) StepDone {
	for _, id := range job.Free {
		e.drop(id)
	}
	out := make([]StepOut, len(job.Slots))
	seed := genSeed(job.Model, job.Version)
	for i, sl := range job.Slots {
		s := e.seqs[sl.Seq]
		if sl.Start == 0 {
			e.drop(sl.Seq)
			s = &emuSeq{h: seed}
			e.seqs[sl.Seq] = s
		}
		if s == nil || s.pos != sl.Start || sl.PromptLen < 1 {
			return StepDone{ID: job.ID, Err: fmt.Sprintf("emulated generator: sequence %d resumes at %d, holds %v", sl.Seq, sl.Start, s)}
		}
		for j := 0; j < len(sl.Input); j++ {
			s.h = genFold(s.h, sl.Input[j])
			if s.pos%e.BlockTokens == 0 {
				e.blocks++
			}
			s.pos++
			if s.pos == sl.PromptLen {
				s.n = genOutLen(s.h, e.OutLen)
			}
		}
		if sl.Sample {
			if s.pos < sl.PromptLen {
				return StepDone{ID: job.ID, Err: fmt.Sprintf("emulated generator: sequence %d samples inside its prompt", sl.Seq)}
			}
			out[i] = StepOut{Token: genToken(s.h), End: s.pos-sl.PromptLen >= s.n-1}
		}
	}
	return StepDone{ID: job.ID, Out: out}
}
