package cudabridge

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/batchd/batchd/actors/gen"
)

// genStepper is a generator whose states a test can read: Gen, genBatch
// and DeviceGen.
type genStepper interface {
	StepSampled(job gen.StepJob, sampling []Sampling) gen.StepDone
}

// randomGenJobs drives two generators with the same random steps, as a
// scheduler would (chunked prefills, decodes, restarts at Start 0, frees,
// a few broken slots, per-slot sampling), and checks their StepDones are
// equal and, after each step, that check (the states) holds.
func randomGenJobs(t *rapid.T, ref, got genStepper, seqsMax int, check func(t *rapid.T, held map[uint64]bool)) {
	type seq struct {
		ctx       []byte // prompt then the bytes picked
		promptLen int
		pos       int // bytes fed (-1: not held)
	}
	seqs := make([]*seq, 6)
	for i := range seqs {
		n := rapid.IntRange(1, 40).Draw(t, "promptLen")
		seqs[i] = &seq{ctx: rapid.SliceOfN(rapid.Byte(), n, n).Draw(t, "prompt"), promptLen: n, pos: -1}
	}
	steps := rapid.IntRange(1, 40).Draw(t, "steps")
	for step := range steps {
		job := gen.StepJob{ID: uint64(step), Model: ModelName, Version: ModelVersion}
		var samp []Sampling
		var picked []*seq
		for id, s := range seqs {
			if s.pos >= 0 && rapid.IntRange(0, 9).Draw(t, "free") == 0 {
				job.Free = append(job.Free, uint64(id))
				s.pos = -1
				continue
			}
			if !rapid.Bool().Draw(t, "inStep") {
				continue
			}
			start := s.pos
			if start < 0 || rapid.IntRange(0, 19).Draw(t, "restart") == 0 {
				start = 0
			}
			n := rapid.IntRange(0, len(s.ctx)-start).Draw(t, "chunk")
			if start == 0 && n == 0 {
				n = 1
			}
			if rapid.IntRange(0, 49).Draw(t, "break") == 0 && start+n < len(s.ctx) {
				start++ // a slot that does not resume where its sequence stopped
			}
			end := min(start+n, len(s.ctx))
			sl := gen.StepSlot{Seq: uint64(id), Start: start, Input: string(s.ctx[start:end]), PromptLen: s.promptLen}
			sl.Sample = end == len(s.ctx) && end >= s.promptLen
			job.Slots = append(job.Slots, sl)
			samp = append(samp, Sampling{Temperature: float64(rapid.IntRange(0, 3).Draw(t, "temp")) / 2, Seed: uint64(id)})
			picked = append(picked, s)
			s.pos = end
		}
		if len(job.Slots) == 0 {
			continue
		}
		a, b := ref.StepSampled(job, samp), got.StepSampled(job, samp)
		if (a.Err == "") != (b.Err == "") || !slices.Equal(a.Out, b.Out) {
			t.Fatalf("step %d %+v: reference %+v, batched %+v", step, job, a, b)
		}
		if a.Err != "" {
			for _, s := range seqs {
				s.pos = -1
			}
			continue
		}
		held := map[uint64]bool{}
		for i, s := range picked {
			if job.Slots[i].Sample && s.pos == len(s.ctx) {
				s.ctx = append(s.ctx, a.Out[i].Token)
			}
		}
		for id, s := range seqs {
			if s.pos >= 0 {
				held[uint64(id)] = true
			}
		}
		check(t, held)
	}
}

// The batched generator (the GPU's launches, through the Go kernels) gives
// Gen's bytes and states, bit for bit.
func TestGenBatchMatchesGen(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ref, _ := NewGen(GenOptions{SeqsMax: 4})
		b, err := newGenBatch(GenOptions{}, GenLimits{SeqsMax: 4, StepTokensMax: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		randomGenJobs(t, ref, b, 4, func(t *rapid.T, held map[uint64]bool) {
			if len(b.tab.seqs) != ref.Held() {
				t.Fatalf("batched holds %d sequences, reference %d", len(b.tab.seqs), ref.Held())
			}
			for id := range held {
				if err := sameState(ref, id, b.tab, b.pool, b.s); err != nil {
					t.Fatal(err)
				}
			}
		})
	})
}

// sameState compares seq's state in ref with its row of the tables pool
// and s: the pool while inside the prompt, the recurrent state after.
func sameState(ref *Gen, seq uint64, tab *genTable, pool, s []float32) error {
	a, r := ref.seqs[seq], tab.seqs[seq]
	if a == nil || r == nil || a.pos != r.pos || a.promptLen != r.promptLen {
		return fmt.Errorf("sequence %d: reference %+v, batched row %+v", seq, a, r)
	}
	if a.pos < a.promptLen {
		if got := pool[int(r.row)*Embed:][:Embed]; !slices.Equal(got, a.pool[:]) {
			return fmt.Errorf("sequence %d at %d: pool %v, reference %v", seq, a.pos, got, a.pool)
		}
		return nil
	}
	if got := s[int(r.row)*Hidden:][:Hidden]; !slices.Equal(got, a.s[:]) {
		return fmt.Errorf("sequence %d at %d: state %v, reference %v", seq, a.pos, got, a.s)
	}
	return nil
}
