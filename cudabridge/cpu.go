package cudabridge

import (
	"context"
	"fmt"
	"math/bits"
	"sync/atomic"
)

// Limits is the largest batch a backend takes: its buffers are sized for
// it once, at start.
type Limits struct {
	// BatchMax is the most inputs in one batch, 1 to BatchMax.
	BatchMax int
	// InputLenMax is the longest input in bytes, 1 to InputLenMax.
	InputLenMax int
}

// DefaultLimits are the package maxima: batches of up to 100 inputs of up
// to 1 KiB.
func DefaultLimits() Limits { return Limits{BatchMax: BatchMax, InputLenMax: InputLenMax} }

// Validate reports a limit out of range.
func (l Limits) Validate() error {
	if l.BatchMax < 1 || l.BatchMax > BatchMax {
		return fmt.Errorf("cudabridge: BatchMax %d: want 1 to %d", l.BatchMax, BatchMax)
	}
	if l.InputLenMax < 1 || l.InputLenMax > InputLenMax {
		return fmt.Errorf("cudabridge: InputLenMax %d: want 1 to %d", l.InputLenMax, InputLenMax)
	}
	return nil
}

// serveBatch is the backends' Run: it checks the batch and each item, runs
// the good items as one batch and formats their outputs. A bad item fails
// alone; an error of the run fails the batch.
func serveBatch(ctx context.Context, f Forwarder, lim Limits, model, version string, inputs []string) ([]string, []error, error) {
	itemErrs, err := checkBatch(model, version, inputs, lim.BatchMax, lim.InputLenMax)
	if err != nil {
		return nil, nil, err
	}
	good := inputs
	var idx []int // good's positions in inputs, when some items failed
	if itemErrs != nil {
		good = nil
		for i, in := range inputs {
			if itemErrs[i] == nil {
				good = append(good, in)
				idx = append(idx, i)
			}
		}
	}
	outputs := make([]string, len(inputs))
	if len(good) == 0 {
		return outputs, itemErrs, nil
	}
	outs, err := f.Forward(ctx, good)
	if err != nil {
		return nil, nil, err
	}
	if len(outs) != len(good) {
		panic(fmt.Sprintf("cudabridge: %d outputs for %d inputs", len(outs), len(good)))
	}
	for k, o := range outs {
		i := k
		if idx != nil {
			i = idx[k]
		}
		outputs[i] = o.String()
	}
	return outputs, itemErrs, nil
}

// CPU runs the model in pure Go: the reference on every machine, and the
// backend `batchd serve --backend cpu` uses. A batch runs through the same
// kernels, in the same order, as on the GPU. Like a device, a CPU backend
// runs one batch at a time (give each engine device its own) and asserts
// it: a second Run while one is in flight panics.
type CPU struct {
	w   *Weights
	lim Limits

	running atomic.Int32
	// Buffers sized for the largest batch, allocated once.
	x             []byte
	lens          []int32
	p, h1, h2, h3 []float32
	logits, o     []float32
	cont          []byte
}

// NewCPU returns a CPU backend for batches within lim, with the weights
// made from WeightSeed.
func NewCPU(lim Limits) (*CPU, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	n := lim.BatchMax
	return &CPU{
		w:      NewWeights(WeightSeed),
		lim:    lim,
		x:      make([]byte, n*lim.InputLenMax),
		lens:   make([]int32, n),
		p:      make([]float32, n*Embed),
		h1:     make([]float32, n*Hidden),
		h2:     make([]float32, n*Hidden),
		h3:     make([]float32, n*Hidden),
		logits: make([]float32, n*Labels),
		o:      make([]float32, n*Vocab),
		cont:   make([]byte, n*ContLen),
	}, nil
}

// Limits returns the backend's limits.
func (c *CPU) Limits() Limits { return c.lim }

// Run implements the engine's Backend contract: one output per input, an
// item error for an input too long or for another model, an error wrapping
// ErrBatchSize for an empty or oversized batch, and ctx's error when ctx
// ends during the batch (checked between kernels).
func (c *CPU) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	return serveBatch(ctx, c, c.lim, model, version, inputs)
}

// Forward runs inputs as one batch and returns their outputs. The inputs
// must be 1 to BatchMax and none longer than InputLenMax (an error
// otherwise).
func (c *CPU) Forward(ctx context.Context, inputs []string) ([]Output, error) {
	if c.running.Add(1) != 1 {
		c.running.Add(-1)
		panic("cudabridge: CPU backend: two batches at once")
	}
	defer c.running.Add(-1)

	n, lpad, err := pad(inputs, c.lim, c.x, false)
	if err != nil {
		return nil, err
	}
	for i, in := range inputs {
		c.lens[i] = int32(len(in))
	}
	w := c.w
	steps := []func(){
		func() { kernelEmbedPool(c.x, c.lens, w.Embed, c.p, n, lpad) },
		func() { kernelDense(c.p, w.W1, w.B1, c.h1, n, Embed, Hidden, true) },
		func() { kernelDense(c.h1, w.W2, w.B2, c.h2, n, Hidden, Hidden, true) },
		func() { kernelDense(c.h2, w.WL, w.BL, c.logits, n, Hidden, Labels, false) },
	}
	for _, f := range steps {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("cudabridge: CPU batch abandoned: %w", err)
		}
		f()
	}
	cur, next := c.h2, c.h3
	for t := range ContLen {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("cudabridge: CPU batch abandoned: %w", err)
		}
		kernelDense(cur, w.WO, w.BO, c.o, n, Hidden, Vocab, false)
		kernelStep(c.o, cur, w.Embed, w.WH, w.WX, w.BH, next, c.cont, n, t)
		cur, next = next, cur
	}
	outs, err := collect(n, c.logits, c.cont)
	if err != nil {
		panic(err) // the Go kernels pick printable bytes only
	}
	return outs, nil
}

// pad copies inputs into x as n rows of lpad bytes, lpad the longest
// input's length (at least 1, so rows are never empty), zeros after each
// input; with pow2, lpad is rounded up to a power of two (at most
// lim.InputLenMax), for fewer batch shapes. The padding is never read: the
// kernels stop at each input's length.
func pad(inputs []string, lim Limits, x []byte, pow2 bool) (n, lpad int, err error) {
	n = len(inputs)
	if n < 1 || n > lim.BatchMax {
		return 0, 0, fmt.Errorf("cudabridge: %d inputs, want 1 to %d: %w", n, lim.BatchMax, ErrBatchSize)
	}
	lpad = 1
	for _, in := range inputs {
		if len(in) > lim.InputLenMax {
			return 0, 0, fmt.Errorf("cudabridge: input of %d bytes, want at most %d: %w", len(in), lim.InputLenMax, ErrInputTooLong)
		}
		lpad = max(lpad, len(in))
	}
	if pow2 {
		lpad = min(1<<bits.Len(uint(lpad-1)), lim.InputLenMax)
	}
	if len(x) < n*lpad {
		panic("cudabridge: pad buffer smaller than the limits")
	}
	for i, in := range inputs {
		row := x[i*lpad:][:lpad]
		clear(row[copy(row, in):])
	}
	return n, lpad, nil
}

// collect makes the outputs from the label logits and continuation bytes
// of n items. A continuation byte outside PrintLo..PrintHi cannot come
// from the kernels: it means a corrupt result (ErrCorrupt).
func collect(n int, logits []float32, cont []byte) ([]Output, error) {
	outs := make([]Output, n)
	for i := range outs {
		o := &outs[i]
		copy(o.Logits[:], logits[i*Labels:][:Labels])
		o.Label = argmax(o.Logits[:], 0)
		copy(o.Cont[:], cont[i*ContLen:][:ContLen])
		for _, c := range o.Cont {
			if c < PrintLo || c > PrintHi {
				return nil, fmt.Errorf("cudabridge: item %d: continuation byte %d is not printable: %w", i, c, ErrCorrupt)
			}
		}
	}
	return outs, nil
}
