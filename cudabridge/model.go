package cudabridge

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The model's name, version and shape. model.cu repeats the dimensions as
// BN_* macros; TestCUDASourceMatchesConstants keeps the two in step.
const (
	// ModelName is the model the backends serve.
	ModelName = "bytenet"
	// ModelVersion is its one version: the weights made from WeightSeed.
	ModelVersion = "v1"

	// Vocab is the number of input symbols: bytes.
	Vocab = 256
	// Embed is the embedding width (D).
	Embed = 64
	// Hidden is the hidden width (H) of the two dense layers and of the
	// continuation's state.
	Hidden = 64
	// Labels is the number of labels the head scores.
	Labels = 8
	// ContLen is the number of bytes of the greedy continuation.
	ContLen = 8
	// PrintLo and PrintHi bound the bytes the continuation may pick: the
	// printable ASCII range, so an output is always readable.
	PrintLo = 32
	PrintHi = 126

	// InputLenMax is the longest input the model takes, in bytes. It bounds
	// the padded input buffer and the pooling loop.
	InputLenMax = 1024
	// BatchMax is the most inputs in one batch: the seeds' batchstring.
	BatchMax = 100

	// WeightSeed seeds the splitmix64 stream the weights are drawn from
	// ("bytnet" in ASCII). The GPU never generates weights: they are made
	// here and uploaded, so both sides use the very same numbers.
	WeightSeed uint64 = 0x6279746e6574
)

// LabelNames are the labels' readable names, by index. The network is
// untrained: a label is a deterministic function of the input, not a
// meaning.
var LabelNames = [Labels]string{"amber", "blue", "coral", "dune", "ember", "fern", "gold", "haze"}

var (
	// ErrBatchSize is returned for a batch of no inputs or more than the
	// backend takes.
	ErrBatchSize = errors.New("batch size out of range")
	// ErrInputTooLong is the per-item error of an input longer than the
	// backend takes.
	ErrInputTooLong = errors.New("input too long")
	// ErrUnknownModel is the per-item error of a request for a model or
	// version this package does not serve.
	ErrUnknownModel = errors.New("unknown model or version")
	// ErrCorrupt marks a result that the kernels cannot have produced (a
	// continuation byte that is not printable): the device's memory or the
	// launch went wrong. A device's Run reports it as a device fault.
	ErrCorrupt = errors.New("corrupt result")
)

// Weights are the network's parameters, each matrix row-major with one row
// per output: W1[j*Embed+k] weighs input k of hidden unit j.
//
// The network: p = mean of Embed rows of the input's bytes (zeros for an
// empty input); h1 = relu(W1 p + B1); h2 = relu(W2 h1 + B2); the label
// logits are WL h2 + BL, the label their argmax. The continuation starts
// from s = h2 and takes ContLen steps: o = WO s + BO, c = the printable
// byte with the highest o, s = relu(WH s + WX Embed[c] + BH).
type Weights struct {
	Embed  []float32 // Vocab × Embed
	W1, B1 []float32 // Hidden × Embed, Hidden
	W2, B2 []float32 // Hidden × Hidden, Hidden
	WL, BL []float32 // Labels × Hidden, Labels
	WO, BO []float32 // Vocab × Hidden, Vocab
	WH     []float32 // Hidden × Hidden
	WX     []float32 // Hidden × Embed
	BH     []float32 // Hidden
}

// splitmix64 is Steele, Lea and Flood's generator: tiny, fast and the same
// everywhere, which is all the weights need.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// uniform returns n numbers uniform in [-scale, scale): the top 24 bits of
// each draw make a float in [0, 1), exactly, then 2u-1 is scaled in float64
// and rounded once to float32.
func (s *splitmix64) uniform(n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		u := float64(s.next()>>40) / (1 << 24)
		out[i] = float32((2*u - 1) * scale)
	}
	return out
}

// NewWeights draws the weights from seed, in the field order of Weights,
// each matrix row by row. Matrices are uniform in ±sqrt(6/fan_in) (He's
// scale for ReLU layers, so activations neither vanish nor blow up);
// biases in ±0.1; the embedding in ±1.
func NewWeights(seed uint64) *Weights {
	r := splitmix64(seed)
	he := func(fanIn int) float64 { return math.Sqrt(6 / float64(fanIn)) }
	w := &Weights{}
	w.Embed = r.uniform(Vocab*Embed, 1)
	w.W1 = r.uniform(Hidden*Embed, he(Embed))
	w.B1 = r.uniform(Hidden, 0.1)
	w.W2 = r.uniform(Hidden*Hidden, he(Hidden))
	w.B2 = r.uniform(Hidden, 0.1)
	w.WL = r.uniform(Labels*Hidden, he(Hidden))
	w.BL = r.uniform(Labels, 0.1)
	w.WO = r.uniform(Vocab*Hidden, he(Hidden))
	w.BO = r.uniform(Vocab, 0.1)
	w.WH = r.uniform(Hidden*Hidden, he(Hidden+Embed))
	w.WX = r.uniform(Hidden*Embed, he(Hidden+Embed))
	w.BH = r.uniform(Hidden, 0.1)
	return w
}

// Output is the model's result for one input.
type Output struct {
	// Label is the index of the highest label logit (the lowest index on a
	// tie).
	Label int
	// Logits are the label logits.
	Logits [Labels]float32
	// Cont is the greedy continuation: ContLen printable bytes.
	Cont [ContLen]byte
}

// String is the output a backend returns for the input: the label's name
// and the continuation, quoted.
//
// It is fmt.Sprintf("label=%s next=%q", ...) written out: a device formats
// every output of its batch before the batch's replies go, so this is on
// the serial path of each batch: a batch of 100 took 14.0 µs through fmt,
// 4.4 µs so, on the development VM (BenchmarkOutputString).
func (o Output) String() string {
	name := LabelNames[o.Label]
	var b strings.Builder
	b.Grow(len("label=") + len(name) + len(" next=") + 2 + 2*ContLen)
	b.WriteString("label=")
	b.WriteString(name)
	b.WriteString(" next=")
	for _, c := range o.Cont {
		if c < PrintLo || c > PrintHi {
			// Not what a device gives (collect refuses it), but quoted
			// as fmt would.
			b.WriteString(strconv.Quote(string(o.Cont[:])))
			return b.String()
		}
	}
	b.WriteByte('"')
	for _, c := range o.Cont {
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String()
}

// Infer is the reference: the network on one input, written plainly, one
// loop per formula. The batched CPU kernels and the GPU kernels compute the
// same float32 operations in the same order, so all three agree bit for bit.
// Every product is converted to float32 before it is added: Go may fuse
// x*y+z into one FMA (it does on arm64), and the conversion forbids it.
func (w *Weights) Infer(input []byte) Output {
	var p [Embed]float32
	for _, c := range input {
		row := w.Embed[int(c)*Embed:][:Embed]
		for d := range p {
			p[d] += row[d]
		}
	}
	if len(input) > 0 {
		for d := range p {
			p[d] /= float32(len(input))
		}
	}
	h1 := affine(w.W1, w.B1, p[:], true)
	h2 := affine(w.W2, w.B2, h1, true)
	var out Output
	copy(out.Logits[:], affine(w.WL, w.BL, h2, false))
	out.Label = argmax(out.Logits[:], 0)

	s := h2
	for t := range ContLen {
		o := affine(w.WO, w.BO, s, false)
		c := PrintLo + argmax(o[PrintLo:PrintHi+1], 0)
		out.Cont[t] = byte(c)
		next := make([]float32, Hidden)
		e := w.Embed[c*Embed:][:Embed]
		for j := range next {
			a := w.BH[j]
			for k, v := range s {
				a += float32(w.WH[j*Hidden+k] * v)
			}
			for k, v := range e {
				a += float32(w.WX[j*Embed+k] * v)
			}
			next[j] = relu(a)
		}
		s = next
	}
	return out
}

// affine returns W x + b (then ReLU when relu is set), summing each row in
// increasing column order.
func affine(W, b, x []float32, withReLU bool) []float32 {
	out := make([]float32, len(b))
	for j := range out {
		a := b[j]
		row := W[j*len(x):][:len(x)]
		for k, v := range x {
			a += float32(row[k] * v)
		}
		if withReLU {
			a = relu(a)
		}
		out[j] = a
	}
	return out
}

// relu is max(a, 0), written the way the kernels write it (a NaN, which
// finite weights cannot make, would become 0).
func relu(a float32) float32 {
	if !(a > 0) {
		return 0
	}
	return a
}

// argmax returns the index of the largest value of v, the lowest on a tie,
// plus off. v must not be empty.
func argmax(v []float32, off int) int {
	best := 0
	for i := 1; i < len(v); i++ {
		if v[i] > v[best] {
			best = i
		}
	}
	return best + off
}

// checkBatch validates a batch against the limits: the whole batch's size
// (an error wrapping ErrBatchSize), and each item's model and length (the
// item errors, nil when every item is good). A bad item fails alone; the
// others still run.
func checkBatch(model, version string, inputs []string, batchMax, inputLenMax int) ([]error, error) {
	if n := len(inputs); n < 1 || n > batchMax {
		return nil, fmt.Errorf("cudabridge: %d inputs, want 1 to %d: %w", n, batchMax, ErrBatchSize)
	}
	var itemErrs []error
	fail := func(i int, err error) {
		if itemErrs == nil {
			itemErrs = make([]error, len(inputs))
		}
		itemErrs[i] = err
	}
	known := model == ModelName && (version == "" || version == ModelVersion)
	for i, in := range inputs {
		switch {
		case !known:
			fail(i, fmt.Errorf("cudabridge: model %q version %q: serving only %s %s: %w", model, version, ModelName, ModelVersion, ErrUnknownModel))
		case len(in) > inputLenMax:
			fail(i, fmt.Errorf("cudabridge: input of %d bytes, want at most %d: %w", len(in), inputLenMax, ErrInputTooLong))
		}
	}
	return itemErrs, nil
}
