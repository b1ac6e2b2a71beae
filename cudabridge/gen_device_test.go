package cudabridge

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/batchd/batchd/actors/gen"
)

// The GPU generator's code path (planning, buffers, copies, launches and
// their parameters, picking from the logits copied back) on the fake
// driver, whose kernels are the Go twins: DeviceGen gives Gen's bytes and,
// read back from the fake device memory, its states, bit for bit.
func TestDeviceGenMatchesGen(t *testing.T) {
	d, f := openFake(t, Limits{BatchMax: 2, InputLenMax: 16})
	lim := GenLimits{SeqsMax: 4, StepTokensMax: 1 << 10}
	rapid.Check(t, func(rt *rapid.T) {
		ref, _ := NewGen(GenOptions{SeqsMax: 4})
		g, err := d.NewGen(GenOptions{}, lim)
		if err != nil {
			rt.Fatal(err)
		}
		randomGenJobs(rt, ref, g, 4, func(rt *rapid.T, held map[uint64]bool) {
			if g.Held() != ref.Held() {
				rt.Fatalf("device holds %d sequences, reference %d", g.Held(), ref.Held())
			}
			f.mu.Lock()
			pool, s := bytesFloat32(f.mem[d.st.gen.pool]), bytesFloat32(f.mem[d.st.gen.s])
			f.mu.Unlock()
			for id := range held {
				if err := sameState(ref, id, g.tab, pool, s); err != nil {
					rt.Fatal(err)
				}
			}
		})
	})
}

// A device fault in a step fails it with Fault and loses every state; the
// scheduler's recompute from Start 0 then continues the very stream.
func TestDeviceGenFault(t *testing.T) {
	d, f := openFake(t, Limits{BatchMax: 2, InputLenMax: 16})
	g, err := d.NewGen(GenOptions{}, GenLimits{SeqsMax: 4, StepTokensMax: 64})
	if err != nil {
		t.Fatal(err)
	}
	prompt := "abcdefgh"
	want := NewWeights(WeightSeed).Generate(prompt, 3, Sampling{}, 0)
	step := func(sl gen.StepSlot) gen.StepDone {
		return g.Step(gen.StepJob{Model: ModelName, Slots: []gen.StepSlot{sl}})
	}
	if res := step(gen.StepSlot{Seq: 1, Input: prompt, PromptLen: len(prompt), Sample: true}); res.Err != "" || res.Out[0].Token != want[0] {
		t.Fatalf("prefill: %+v, want %q", res, want[0])
	}
	f.mu.Lock()
	f.failOp, f.failAt, f.failCode = "LaunchKernel", f.counts["LaunchKernel"]+1, 719
	f.mu.Unlock()
	res := step(gen.StepSlot{Seq: 1, Start: len(prompt), Input: want[:1], PromptLen: len(prompt), Sample: true})
	if !res.Fault || g.Held() != 0 || d.fault == nil {
		t.Fatalf("faulted step: %+v, held %d, device fault %v", res, g.Held(), d.fault)
	}
	if res := step(gen.StepSlot{Seq: 1, Start: len(prompt), Input: want[:1], PromptLen: len(prompt), Sample: true}); res.Err == "" {
		t.Fatalf("a resume after the fault: %+v; want an error (the state is gone)", res)
	}
	ctx := prompt + want[:2]
	res = step(gen.StepSlot{Seq: 1, Input: ctx, PromptLen: len(prompt), Sample: true})
	if res.Err != "" || res.Fault || res.Out[0].Token != want[2] {
		t.Fatalf("recompute: %+v, want %q", res, want[2])
	}
}
