package cudabridge

import (
	"fmt"
	"testing"

	"github.com/batchd/batchd/actors/gen"
)

// The cost of a generation step on the CPU, for the step cost model
// a + b·tokens + c·KV: decode steps of 1, 16 and 64 sequences (one token
// each) give a and b; decode steps over short and long contexts give c
// (none expected: the state is the same size at any length); and a
// prefill chunk gives the cost of a prompt byte.
//
//	go test ./cudabridge -run '^$' -bench Gen -benchtime 2000x

func benchDecode(b *testing.B, seqs, ctxLen int, sp Sampling) {
	g, err := NewGen(GenOptions{Sampling: &sp})
	if err != nil {
		b.Fatal(err)
	}
	benchDecodeOn(b, g, seqs, ctxLen)
}

// benchDecodeOn prefills seqs prompts of ctxLen bytes on g, then times its
// decode steps.
func benchDecodeOn(b *testing.B, g gen.Step, seqs, ctxLen int) {
	prompt := ProfileInputs(seqs, ctxLen)
	slots := make([]gen.StepSlot, seqs)
	for i := range slots {
		slots[i] = gen.StepSlot{Seq: uint64(i), Input: prompt[i], PromptLen: len(prompt[i]), Sample: true}
	}
	// The prefills, a sequence a step; then every step decodes them all.
	for i := range slots {
		res := g.Step(gen.StepJob{Model: ModelName, Slots: slots[i : i+1]})
		if res.Err != "" {
			b.Fatal(res.Err)
		}
		slots[i].Start, slots[i].Input = len(slots[i].Input), string(res.Out[0].Token)
	}
	job := gen.StepJob{Model: ModelName, Version: ModelVersion, Slots: slots}
	run := func() {
		res := g.Step(job)
		if res.Err != "" {
			b.Fatal(res.Err)
		}
		for i, o := range res.Out {
			slots[i].Start += len(slots[i].Input)
			slots[i].Input = string(o.Token)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(seqs), "ns/token")
}

func BenchmarkGenDecode(b *testing.B) {
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("seqs=%d", n), func(b *testing.B) { benchDecode(b, n, 128, Sampling{}) })
	}
	// The KV term: the same step over contexts 16 times longer.
	b.Run("seqs=16/context=2048", func(b *testing.B) { benchDecode(b, 16, 2048, Sampling{}) })
	// Sampling's softmax on top of the greedy pick.
	b.Run("seqs=16/temperature=1", func(b *testing.B) { benchDecode(b, 16, 128, Sampling{Temperature: 1, Seed: 1}) })
}

// BenchmarkGenPrefill is one sequence's prefill of a 256-byte prompt
// (restarted each time at Start 0), per step.
func BenchmarkGenPrefill(b *testing.B) {
	g, err := NewGen(GenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	prompt := ProfileInputs(1, 256)[0]
	job := gen.StepJob{Model: ModelName, Slots: []gen.StepSlot{{Seq: 1, Input: prompt, PromptLen: len(prompt), Sample: true}}}
	for b.Loop() {
		if res := g.Step(job); res.Err != "" {
			b.Fatal(res.Err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(prompt)), "ns/token")
}
