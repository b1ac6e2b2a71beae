package cudabridge

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"

	"github.com/batchd/batchd/actors/gen"
)

// The generation kernels of model.cu.
const (
	kernelNameGenPool    = "bytenet_gen_pool"
	kernelNameGenMean    = "bytenet_gen_mean"
	kernelNameGenFeed    = "bytenet_gen_feed"
	kernelNameGenScatter = "bytenet_gen_scatter"
	kernelNameGenGather  = "bytenet_gen_gather"
)

// DeviceGen is bytenet's generation backend on a GPU (gen.Step): the
// sequences' states live in device tables, and a step runs as the
// batched generator's launches (gen_plan.go): the prompt bytes pooled in
// one launch, the prompts fed to their end in four, each wave of fed back
// bytes in two, and the picks' logits in two, copied back for the host to
// pick from (greedy, or sampled in float64 as Gen does). Its bytes and
// states are Gen's, bit for bit.
//
// It shares its Device's context and its one-at-a-time rule: a step and
// a batch at once panic. A device fault (a CUDA error, a step past
// BatchTimeout) fails the step with StepDone.Fault, and the context, with
// every state, is re-created on the next step: the scheduler recomputes
// its sequences.
type DeviceGen struct {
	d   *Device
	opt GenOptions
	lim GenLimits
	tab *genTable
	// st is the context whose tables the table's rows describe: a new
	// context (after a fault) holds no sequence.
	st *gpuState
	wt [printable]float64
}

// genBufs are a context's generation buffers, allocated on its first step.
type genBufs struct {
	lim                                       GenLimits
	fn                                        struct{ pool, mean, feed, scatter, gather cuFunction }
	pool, s, p, h1, h2, o                     cuDevPtr
	x                                         cuDevPtr
	poolOff, poolLen, poolRow, poolFresh      cuDevPtr
	endRow, endLen, pickRow, feedRow, feedTok cuDevPtr
	// Host buffers (page-locked): the step's inputs and the logits.
	hx, hints, ho []byte
}

// NewGen returns a generator on d, whose tables and step buffers are
// sized by lim when its first step runs. A device serves one generator.
func (d *Device) NewGen(opt GenOptions, lim GenLimits) (*DeviceGen, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	return &DeviceGen{d: d, opt: opt, lim: lim, tab: newGenTable(lim)}, nil
}

// Held is the number of sequences whose state the generator keeps.
func (g *DeviceGen) Held() int { return len(g.tab.seqs) }

// Step runs job as Gen.Step does: each slot sampled by its own
// Temperature and Seed, or every slot by the options' Sampling when set.
func (g *DeviceGen) Step(job gen.StepJob) gen.StepDone {
	return g.StepSampled(job, g.opt.slotSampling(job))
}

// StepSampled runs job as Gen.StepSampled does, on the GPU.
func (g *DeviceGen) StepSampled(job gen.StepJob, sampling []Sampling) gen.StepDone {
	d := g.d
	if d.running.Add(1) != 1 {
		d.running.Add(-1)
		panic("cudabridge: device: two batches at once")
	}
	defer d.running.Add(-1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d.mu.Lock()
	defer d.mu.Unlock()

	fault := func(err error) gen.StepDone {
		g.tab.reset()
		return gen.StepDone{ID: job.ID, Fault: true, Err: err.Error()}
	}
	ctx := context.Background()
	if err := d.ready(ctx); err != nil {
		return fault(err)
	}
	st := d.st
	if st != g.st {
		g.tab.reset()
		g.st = st
	}
	if st.gen == nil {
		if err := d.buildGen(st, g.lim); err != nil {
			return fault(d.failed(err))
		}
	} else if st.gen.lim != g.lim {
		return fault(fmt.Errorf("cudabridge: device %d: a generator of limits %+v is set up, not %+v", d.cfg.Ordinal, st.gen.lim, g.lim))
	}
	pl, err := g.tab.plan(job, sampling, g.opt.fixed())
	if err != nil {
		g.tab.reset()
		return gen.StepDone{ID: job.ID, Err: err.Error()}
	}
	out, err := g.run(ctx, st, pl, len(job.Slots))
	if err != nil {
		return fault(d.failed(err))
	}
	return gen.StepDone{ID: job.ID, Out: out}
}

// ready makes the device's context current and healthy on this thread,
// resetting it after a fault and setting it up when there is none.
func (d *Device) ready(ctx context.Context) error {
	if d.closed {
		return fmt.Errorf("cudabridge: device %d: closed: %w", d.cfg.Ordinal, ErrDeviceFault)
	}
	if d.fault != nil {
		if err := d.reset(); err != nil {
			return err
		}
	} else if d.st != nil {
		// Another goroutine, on another thread, may have run the last
		// batch: make the context current on this one.
		if err := d.drv.CtxSetCurrent(d.st.ctx); err != nil {
			return d.failed(err)
		}
	}
	if d.st == nil {
		// The setup is bounded by BatchTimeout, not by the caller's ctx:
		// cut short, it would leave the device to set up again, and a
		// JIT compile slower than the watchdog would fault for ever.
		return d.setup(context.WithoutCancel(ctx))
	}
	return nil
}

// buildGen allocates st's generation buffers and looks up the kernels.
// What it allocated is freed with the context.
func (d *Device) buildGen(st *gpuState, lim GenLimits) error {
	drv := d.drv
	b := &genBufs{lim: lim}
	if err := lookupKernels(drv, st.module, []kernelRef{{kernelNameGenPool, &b.fn.pool}, {kernelNameGenMean, &b.fn.mean},
		{kernelNameGenFeed, &b.fn.feed}, {kernelNameGenScatter, &b.fn.scatter}, {kernelNameGenGather, &b.fn.gather}}); err != nil {
		return err
	}
	a := &allocator{drv: drv, st: st}
	devAlloc, hostAlloc := a.dev, a.host
	n, tok := lim.SeqsMax, lim.StepTokensMax
	devAlloc(&b.pool, n*Embed*4)
	devAlloc(&b.s, n*Hidden*4)
	devAlloc(&b.p, n*Embed*4)
	devAlloc(&b.h1, n*Hidden*4)
	devAlloc(&b.h2, n*Hidden*4)
	devAlloc(&b.o, n*Vocab*4)
	devAlloc(&b.x, tok)
	for _, p := range []*cuDevPtr{&b.poolOff, &b.poolLen, &b.poolRow, &b.poolFresh, &b.endRow, &b.endLen, &b.pickRow} {
		devAlloc(p, n*4)
	}
	devAlloc(&b.feedRow, tok*4)
	devAlloc(&b.feedTok, tok*4)
	hostAlloc(&b.hx, tok)
	hostAlloc(&b.hints, (7*n+2*tok)*4)
	hostAlloc(&b.ho, n*Vocab*4)
	if a.err != nil {
		return a.err
	}
	// The state tables start as zeros, like Gen's fresh states (a row is
	// always written before it is read; this only makes a stray read
	// deterministic).
	zeros := b.ho[:n*Hidden*4]
	clear(zeros)
	if err := drv.MemcpyHtoDAsync(b.s, zeros, st.stream); err != nil {
		return err
	}
	if err := d.wait(context.Background(), st.stream); err != nil {
		return err
	}
	st.gen = b
	return nil
}

// run copies pl's inputs in, launches the step and picks from the logits
// copied back.
func (g *DeviceGen) run(ctx context.Context, st *gpuState, pl *genPlan, slots int) ([]gen.StepOut, error) {
	drv, s, b, w := g.d.drv, st.stream, st.gen, st.weights
	// The int arrays go up through one page-locked buffer, each from its
	// own part of it (an async copy reads its source when it runs).
	hints := b.hints
	up := func(dst cuDevPtr, v []int32) error {
		if len(v) == 0 {
			return nil
		}
		src := hints[:len(v)*4]
		hints = hints[len(v)*4:]
		for i, x := range v {
			binary.LittleEndian.PutUint32(src[i*4:], uint32(x))
		}
		return drv.MemcpyHtoDAsync(dst, src, s)
	}
	if len(pl.x) > 0 {
		copy(b.hx, pl.x)
		if err := drv.MemcpyHtoDAsync(b.x, b.hx[:len(pl.x)], s); err != nil {
			return nil, err
		}
	}
	for _, c := range []struct {
		dst cuDevPtr
		v   []int32
	}{
		{b.poolOff, pl.poolOff}, {b.poolLen, pl.poolLen}, {b.poolRow, pl.poolRow}, {b.poolFresh, pl.poolFresh},
		{b.endRow, pl.endRow}, {b.endLen, pl.endLen}, {b.feedRow, pl.feedRow}, {b.feedTok, pl.feedTok}, {b.pickRow, pl.pickRow},
	} {
		if err := up(c.dst, c.v); err != nil {
			return nil, err
		}
	}
	p := func(v cuDevPtr) uint64 { return uint64(v) }
	var launches []launch
	if n := len(pl.poolRow); n > 0 {
		launches = append(launches, launch{b.fn.pool, n * Embed, []uint64{p(b.x), p(b.poolOff), p(b.poolLen), p(b.poolRow), p(b.poolFresh), p(w[wEmbed]), p(b.pool), uint64(n)}})
	}
	if n := len(pl.endRow); n > 0 {
		launches = append(launches,
			launch{b.fn.mean, n * Embed, []uint64{p(b.pool), p(b.endRow), p(b.endLen), p(b.p), uint64(n)}},
			launch{st.fn.dense, n * Hidden, []uint64{p(b.p), p(w[wW1]), p(w[wB1]), p(b.h1), uint64(n), Embed, Hidden, 1}},
			launch{st.fn.dense, n * Hidden, []uint64{p(b.h1), p(w[wW2]), p(w[wB2]), p(b.h2), uint64(n), Hidden, Hidden, 1}},
			launch{b.fn.scatter, n * Hidden, []uint64{p(b.h2), p(b.endRow), p(b.s), 0, uint64(n), Hidden}},
		)
	}
	for k := 0; k+1 < len(pl.waveAt); k++ {
		base, n := pl.waveAt[k], pl.waveAt[k+1]-pl.waveAt[k]
		launches = append(launches,
			launch{b.fn.feed, n * Hidden, []uint64{p(b.feedTok), p(b.feedRow), p(b.s), p(w[wEmbed]), p(w[wWH]), p(w[wWX]), p(w[wBH]), p(b.h1), uint64(base), uint64(n)}},
			launch{b.fn.scatter, n * Hidden, []uint64{p(b.h1), p(b.feedRow), p(b.s), uint64(base), uint64(n), Hidden}},
		)
	}
	picks := len(pl.pickRow)
	if picks > 0 {
		launches = append(launches,
			launch{b.fn.gather, picks * Hidden, []uint64{p(b.s), p(b.pickRow), p(b.h2), uint64(picks), Hidden}},
			launch{st.fn.dense, picks * Vocab, []uint64{p(b.h2), p(w[wWO]), p(w[wBO]), p(b.o), uint64(picks), Hidden, Vocab, 0}},
		)
	}
	for _, l := range launches {
		grid := (l.threads + launchBlockThreads - 1) / launchBlockThreads
		if grid < 1 || grid > launchGridBlocksMax {
			panic(fmt.Sprintf("cudabridge: launch of %d threads", l.threads))
		}
		if err := drv.LaunchKernel(l.fn, uint32(grid), launchBlockThreads, s, l.params); err != nil {
			return nil, err
		}
	}
	ho := b.ho[:picks*Vocab*4]
	if picks > 0 {
		if err := drv.MemcpyDtoHAsync(ho, b.o, s); err != nil {
			return nil, err
		}
	}
	if err := g.d.wait(ctx, s); err != nil {
		return nil, err
	}
	out := make([]gen.StepOut, slots)
	var o [printable]float32
	for k := range picks {
		row := ho[(k*Vocab+PrintLo)*4:]
		for v := range o {
			o[v] = math.Float32frombits(binary.LittleEndian.Uint32(row[v*4:]))
		}
		out[pl.pickSlot[k]] = stepOut(choose(o[:], g.wt[:], pl.pickSamp[k], pl.pickPos[k]), g.opt.Stop)
	}
	return out, nil
}
