package cudabridge

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/batchd/batchd/actors/gen"
)

// TestGPUGenMatchesGen runs the generation kernels on every GPU: random
// scheduler-like steps (chunked prefills, decodes, restarts, frees,
// greedy and sampled slots) must give Gen's bytes and, read back from the
// device, its states, bit for bit; then 64 sequences with prompts of up to
// 1 KiB generate 128 bytes each in steps of all of them, as Gen does. It
// skips without a GPU.
func TestGPUGenMatchesGen(t *testing.T) {
	v, infos, devs := gpuDevices(t)
	var report strings.Builder
	fmt.Fprintf(&report, "# GPU generator vs Gen (CPU), %s, CUDA driver %v\n", time.Now().UTC().Format(time.RFC3339), v)
	lim := GenLimits{SeqsMax: 64, StepTokensMax: 64 * InputLenMax}
	for k, d := range devs {
		cases := 0
		rapid.Check(t, func(rt *rapid.T) {
			cases++
			ref, _ := NewGen(GenOptions{SeqsMax: lim.SeqsMax})
			g, err := d.NewGen(GenOptions{}, lim)
			if err != nil {
				rt.Fatal(err)
			}
			randomGenJobs(rt, ref, g, lim.SeqsMax, func(rt *rapid.T, held map[uint64]bool) {
				pool := readDeviceFloats(rt, d, d.st.gen.pool, lim.SeqsMax*Embed)
				s := readDeviceFloats(rt, d, d.st.gen.s, lim.SeqsMax*Hidden)
				for id := range held {
					if err := sameState(ref, id, g.tab, pool, s); err != nil {
						rt.Fatal(err)
					}
				}
			})
		})
		// A full batch: 64 sequences decoding together.
		sp := Sampling{Temperature: 0.8, Seed: uint64(k) + 1}
		ref, _ := NewGen(GenOptions{Sampling: &sp})
		g, err := d.NewGen(GenOptions{Sampling: &sp}, lim)
		if err != nil {
			t.Fatal(err)
		}
		prompts := ProfileInputs(64, 1)
		for i := range prompts {
			prompts[i] = ProfileInputs(1, 1+i*16)[0]
		}
		slots := make([]gen.StepSlot, len(prompts))
		for i, p := range prompts {
			slots[i] = gen.StepSlot{Seq: uint64(i), Input: p, PromptLen: len(p), Sample: true}
		}
		bytes := 0
		for step := range 128 {
			job := gen.StepJob{ID: uint64(step), Model: ModelName, Slots: slots}
			a, b := ref.Step(job), g.Step(job)
			if a.Err != "" || b.Err != "" || b.Fault {
				t.Fatalf("device %d step %d: reference %v, GPU %v %v", infos[k].Ordinal, step, a.Err, b.Err, b.Fault)
			}
			for i := range slots {
				if a.Out[i] != b.Out[i] {
					t.Fatalf("device %d step %d sequence %d: GPU %q, CPU %q", infos[k].Ordinal, step, i, b.Out[i].Token, a.Out[i].Token)
				}
				bytes++
				slots[i].Start += len(slots[i].Input)
				slots[i].Input = string(a.Out[i].Token)
			}
		}
		line := fmt.Sprintf("device %d (%s): %d random step sequences with states bit-exact, %d bytes of 64 sequences identical: %v",
			infos[k].Ordinal, infos[k].Name, cases, bytes, !t.Failed())
		t.Log(line)
		fmt.Fprintln(&report, line)
	}
	writeReport(t, "gpu-gen-vs-cpu.txt", report.String())
}

// BenchmarkGPUGenDecode is BenchmarkGenDecode's decode steps on GPU 0
// (one step: copies in, 4 launches, the logits back, the picks on the
// host). It skips without a GPU.
func BenchmarkGPUGenDecode(b *testing.B) {
	_, _, devs := gpuDevices(b)
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("seqs=%d", n), func(b *testing.B) {
			g, err := devs[0].NewGen(GenOptions{}, DefaultGenLimits())
			if err != nil {
				b.Fatal(err)
			}
			benchDecodeOn(b, g, n, 128)
		})
	}
}
