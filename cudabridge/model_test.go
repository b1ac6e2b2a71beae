package cudabridge

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.txt from the reference")

// testInputs are the inputs every comparison runs on: edge cases (empty,
// one byte, NUL and high bytes, the longest input) and seeded random
// inputs of every length class.
func testInputs() []string {
	in := []string{
		"", "a", "aa", "ab", "ba", "hello", "Hello, world!",
		"The quick brown fox jumps over the lazy dog",
		"h\u00e9llo w\u00f6rld \u2713", "\x00", "\x00\x01\x02\xfe\xff",
		"0123456789", strings.Repeat("z", 100), strings.Repeat("ab", InputLenMax/2),
		`{"input": "json"}`, "line one\nline two\n",
	}
	r := rand.New(rand.NewPCG(6, 6))
	for i := range 48 {
		n := r.IntN(40)
		switch i % 4 {
		case 1:
			n = r.IntN(300)
		case 2:
			n = InputLenMax - r.IntN(50)
		}
		b := make([]byte, n)
		for j := range b {
			if i%3 == 0 {
				b[j] = byte(r.IntN(256))
			} else {
				b[j] = byte(PrintLo + r.IntN(PrintHi-PrintLo+1))
			}
		}
		in = append(in, string(b))
	}
	return in
}

// logitsClose is the stated tolerance: bit-exact is expected, 1e-5
// relative (absolute below 1) is accepted.
func logitsClose(a, b [Labels]float32) bool {
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		if math.Abs(x-y) > 1e-5*math.Max(1, math.Max(math.Abs(x), math.Abs(y))) {
			return false
		}
	}
	return true
}

func TestWeightsDeterministic(t *testing.T) {
	a, b := NewWeights(WeightSeed), NewWeights(WeightSeed)
	wa, wb := weightArrays(a), weightArrays(b)
	other := weightArrays(NewWeights(WeightSeed + 1))
	sizes := []int{Vocab * Embed, Hidden * Embed, Hidden, Hidden * Hidden, Hidden, Labels * Hidden, Labels, Vocab * Hidden, Vocab, Hidden * Hidden, Hidden * Embed, Hidden}
	for i := range wa {
		if len(wa[i]) != sizes[i] {
			t.Fatalf("weight array %d: %d values, want %d", i, len(wa[i]), sizes[i])
		}
		same := 0
		for j := range wa[i] {
			if math.Float32bits(wa[i][j]) != math.Float32bits(wb[i][j]) {
				t.Fatalf("weight array %d differs between two draws from one seed", i)
			}
			if wa[i][j] == other[i][j] {
				same++
			}
			if !(math.Abs(float64(wa[i][j])) <= 1) {
				t.Fatalf("weight array %d value %d = %v, outside [-1, 1]", i, j, wa[i][j])
			}
		}
		if same == len(wa[i]) {
			t.Errorf("weight array %d is the same for another seed", i)
		}
	}
}

// TestGolden checks the reference against the known answers in
// testdata/golden.txt, made once with -update: any change to the weights or
// the math shows here (and would break the checked-in PTX's agreement).
func TestGolden(t *testing.T) {
	w := NewWeights(WeightSeed)
	inputs := testInputs()
	path := filepath.Join("testdata", "golden.txt")
	if *update {
		var b strings.Builder
		b.WriteString("# input (Go-quoted, long ones as their length and a hash)\tlabel\tcontinuation\tlogits (float32 bits)\n")
		for _, in := range inputs {
			fmt.Fprintln(&b, goldenLine(in, w.Infer([]byte(in))))
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cudabridge -run Golden -update once)", err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "#") {
			want = append(want, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(inputs) {
		t.Fatalf("golden file has %d lines, want %d (rerun with -update if the inputs changed)", len(want), len(inputs))
	}
	labels := map[int]bool{}
	conts := map[string]bool{}
	for i, in := range inputs {
		out := w.Infer([]byte(in))
		labels[out.Label] = true
		conts[string(out.Cont[:])] = true
		if got := goldenLine(in, out); got != want[i] {
			t.Errorf("input %d:\n got %s\nwant %s", i, got, want[i])
		}
	}
	// A model whose output ignored its input would pass the comparison
	// above once its golden file was made; it must not.
	if len(labels) < 3 || len(conts) < len(inputs)/4 {
		t.Errorf("outputs barely depend on the input: %d labels, %d continuations over %d inputs", len(labels), len(conts), len(inputs))
	}
}

func goldenLine(in string, o Output) string {
	q := strconv.Quote(in)
	if len(in) > 64 {
		h := splitmix64(0)
		for _, c := range []byte(in) {
			h = splitmix64(uint64(h)*31 + uint64(c))
		}
		q = fmt.Sprintf("len=%d,hash=%016x", len(in), h.next())
	}
	bits := make([]string, Labels)
	for i, l := range o.Logits {
		bits[i] = fmt.Sprintf("%08x", math.Float32bits(l))
	}
	return fmt.Sprintf("%s\t%s\t%q\t%s", q, LabelNames[o.Label], string(o.Cont[:]), strings.Join(bits, ","))
}

// TestInferProperties checks what the architecture implies, independent of
// the weights' values: mean pooling makes a byte repeated twice the same as
// once and two bytes' order irrelevant; the label is the logits' argmax;
// the continuation is printable.
func TestInferProperties(t *testing.T) {
	w := NewWeights(WeightSeed)
	if w.Infer([]byte("a")) != w.Infer([]byte("aa")) {
		t.Error(`"a" and "aa" pool to the same mean but give different outputs`)
	}
	if w.Infer([]byte("xy")) != w.Infer([]byte("yx")) {
		t.Error(`"xy" and "yx" pool to the same mean but give different outputs`)
	}
	if w.Infer([]byte("ab")) == w.Infer([]byte("abc")) {
		t.Error(`"ab" and "abc" give the same output`)
	}
	for _, in := range testInputs() {
		o := w.Infer([]byte(in))
		for l := range Labels {
			if o.Logits[l] > o.Logits[o.Label] || (o.Logits[l] == o.Logits[o.Label] && l < o.Label) {
				t.Fatalf("%q: label %d is not the first argmax of %v", in, o.Label, o.Logits)
			}
		}
		for _, c := range o.Cont {
			if c < PrintLo || c > PrintHi {
				t.Fatalf("%q: continuation byte %d not printable", in, c)
			}
		}
		if s := o.String(); !strings.HasPrefix(s, "label="+LabelNames[o.Label]+" next=") {
			t.Fatalf("output string %q", s)
		}
	}
}

func TestArgmaxTiesTakeTheLowestIndex(t *testing.T) {
	for _, c := range []struct {
		v    []float32
		want int
	}{
		{[]float32{1}, 0}, {[]float32{1, 1}, 0}, {[]float32{0, 2, 2}, 1}, {[]float32{-1, -3, -1}, 0}, {[]float32{0, 0, 0, 5}, 3},
	} {
		if got := argmax(c.v, 10); got != c.want+10 {
			t.Errorf("argmax(%v) = %d, want %d", c.v, got-10, c.want)
		}
	}
}

// randomBatch returns n inputs drawn from the test inputs and random
// lengths, so batches mix short and long members.
func randomBatch(r *rand.Rand, n int) []string {
	pool := testInputs()
	out := make([]string, n)
	for i := range out {
		out[i] = pool[r.IntN(len(pool))]
	}
	return out
}

// TestCPUMatchesReference: a batch through the batched kernels gives every
// input the reference's output, bit for bit, whatever its batch-mates and
// padding (batch independence).
func TestCPUMatchesReference(t *testing.T) {
	w := NewWeights(WeightSeed)
	c, err := NewCPU(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 7, 33, BatchMax} {
		batch := randomBatch(r, n)
		outs, err := c.Forward(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range batch {
			if want := w.Infer([]byte(in)); outs[i] != want {
				t.Fatalf("batch of %d, item %d (%d bytes): got %v %v, want %v %v", n, i, len(in), outs[i], outs[i].Logits, want, want.Logits)
			}
		}
	}
}

// TestBatchIndependence: an input's output alone equals its output next to
// a long batch-mate (much padding), at another position, among 99 others.
func TestBatchIndependence(t *testing.T) {
	c, err := NewCPU(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := "independent"
	alone, err := c.Forward(ctx, []string{in})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("~", InputLenMax)
	for _, batch := range [][]string{
		{in, long},
		{long, "x", in},
		append(ProfileInputs(BatchMax-1, 300), in),
	} {
		outs, err := c.Forward(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		at := -1
		for i, b := range batch {
			if b == in {
				at = i
			}
		}
		if outs[at] != alone[0] {
			t.Errorf("in a batch of %d at %d: %v %v, alone: %v %v", len(batch), at, outs[at], outs[at].Logits, alone[0], alone[0].Logits)
		}
	}
}

func TestCPURunValidation(t *testing.T) {
	c, err := NewCPU(Limits{BatchMax: 4, InputLenMax: 8})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []int{0, 5} {
		if _, _, err := c.Run(ctx, ModelName, ModelVersion, make([]string, n)); !errors.Is(err, ErrBatchSize) {
			t.Errorf("batch of %d: err %v, want ErrBatchSize", n, err)
		}
	}
	outs, itemErrs, err := c.Run(ctx, ModelName, ModelVersion, []string{"ok", "far too long", "fine"})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 3 || len(itemErrs) != 3 || !errors.Is(itemErrs[1], ErrInputTooLong) || itemErrs[0] != nil || itemErrs[2] != nil {
		t.Fatalf("outputs %q, item errors %v: want only item 1 to fail with ErrInputTooLong", outs, itemErrs)
	}
	w := NewWeights(WeightSeed)
	if outs[0] != w.Infer([]byte("ok")).String() || outs[2] != w.Infer([]byte("fine")).String() || outs[1] != "" {
		t.Errorf("outputs %q: the good items must still be served", outs)
	}
	for _, mv := range [][2]string{{"echo", ""}, {ModelName, "v2"}} {
		outs, itemErrs, err := c.Run(ctx, mv[0], mv[1], []string{"a", "b"})
		if err != nil || len(itemErrs) != 2 || !errors.Is(itemErrs[0], ErrUnknownModel) || !errors.Is(itemErrs[1], ErrUnknownModel) || outs[0] != "" {
			t.Errorf("model %q version %q: outputs %q, item errors %v, err %v: want ErrUnknownModel per item", mv[0], mv[1], outs, itemErrs, err)
		}
	}
	if _, itemErrs, err := c.Run(ctx, ModelName, "", []string{"a"}); err != nil || itemErrs != nil {
		t.Errorf("no version: item errors %v, err %v; the one version serves it", itemErrs, err)
	}
	if _, err := NewCPU(Limits{BatchMax: BatchMax + 1, InputLenMax: 1}); err == nil {
		t.Error("NewCPU accepted BatchMax above the package's")
	}
}

func TestCPURunCancelled(t *testing.T) {
	c, err := NewCPU(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	outs, _, err := c.Run(ctx, ModelName, ModelVersion, []string{"a"})
	if !errors.Is(err, context.Canceled) || outs != nil {
		t.Fatalf("cancelled run: outputs %q, err %v; want context.Canceled and no outputs", outs, err)
	}
}

// TestCUDASourceMatchesConstants keeps model.cu's dimensions and kernel
// names in step with the Go side, and the checked-in PTX free of what
// would break the bit-for-bit agreement: fused multiply-adds, flushing
// denormals to zero, approximate division.
func TestCUDASourceMatchesConstants(t *testing.T) {
	src, err := os.ReadFile("model.cu")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"BN_VOCAB": Vocab, "BN_EMBED": Embed, "BN_HIDDEN": Hidden, "BN_CONT": ContLen, "BN_PRINT_LO": PrintLo, "BN_PRINT_HI": PrintHi}
	re := regexp.MustCompile(`(?m)^#define (BN_[A-Z_]+) (\d+)`)
	got := map[string]int{}
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		got[m[1]], _ = strconv.Atoi(m[2])
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("model.cu: %s = %d, want %d", k, got[k], v)
		}
	}
	ptx := string(modelPTX)
	// The launches pass 6, 8 and 10 parameters of 8 bytes each.
	for k, want := range map[string]int{kernelNameEmbedPool: 6, kernelNameDense: 8, kernelNameStep: 10} {
		if n, all64 := ptxParams(ptx, k); n != want || !all64 {
			t.Errorf("model.ptx entry %s: %d parameters (all 64-bit: %v), want %d of 64 bits", k, n, all64, want)
		}
	}
	for _, bad := range []string{"fma.", ".ftz", ".approx", "mul.f32", "add.f32"} {
		if strings.Contains(ptx, bad) {
			t.Errorf("model.ptx contains %q: the GPU would not match the CPU bit for bit", bad)
		}
	}
	if !strings.Contains(ptx, "mul.rn.f32") || !strings.Contains(ptx, "add.rn.f32") || !strings.Contains(ptx, "div.rn.f32") {
		t.Error("model.ptx lacks the explicitly rounded mul.rn/add.rn/div.rn the kernels use")
	}
}

// TestPTXUpToDate regenerates the PTX with clang, when clang is installed,
// and compares it with the checked-in file.
func TestPTXUpToDate(t *testing.T) {
	clang := ""
	for _, name := range []string{os.Getenv("CLANG"), "clang", "clang-14"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			clang = p
			break
		}
	}
	if clang == "" {
		t.Skip("clang not found (set CLANG or install clang): cannot check model.ptx against model.cu")
	}
	// Another clang emits other (equally good) PTX: only the version that
	// made the checked-in file can check it.
	if v, err := exec.Command(clang, "--version").Output(); err != nil || !strings.Contains(string(v), "version "+ptxClangMajor+".") {
		t.Skipf("%s is not clang %s, which made model.ptx: cannot compare", clang, ptxClangMajor)
	}
	out := filepath.Join(t.TempDir(), "model.ptx")
	cmd := exec.Command(clang, ptxArgs(out)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("%s cannot compile CUDA here: %v: %s", clang, err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(modelPTX) {
		t.Errorf("model.ptx is not what %s makes of model.cu: run make ptx", clang)
	}
}

// ptxClangMajor is the major version of the clang that made model.ptx
// (Debian 12's clang-14).
const ptxClangMajor = "14"

// ptxArgs are clang's arguments to compile model.cu to out; the Makefile's
// ptx target and the go:generate line use the same.
func ptxArgs(out string) []string {
	return []string{"-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80", "-nocudainc", "-nocudalib", "-O2", "-ffp-contract=off", "-S", "-o", out, "model.cu"}
}
