package cudabridge

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// clockedForwarder is a Forwarder on a fake clock: batch number k of n
// inputs of l bytes takes n·l µs plus k µs (so repeated runs differ and the
// median is not the first or last).
type clockedForwarder struct {
	now   time.Time
	calls int
	sizes [][2]int
}

func (c *clockedForwarder) Forward(_ context.Context, inputs []string) ([]Output, error) {
	c.calls++
	c.sizes = append(c.sizes, [2]int{len(inputs), len(inputs[0])})
	c.now = c.now.Add(time.Duration(len(inputs)*len(inputs[0])+c.calls%5) * time.Microsecond)
	return make([]Output, len(inputs)), nil
}

func TestProfile(t *testing.T) {
	f := &clockedForwarder{now: time.Unix(0, 0)}
	cfg := ProfileConfig{Sizes: []int{1, 10}, Lengths: []int{4, 8}, Reps: 5, Warmup: 2}
	points, err := Profile(context.Background(), ForwardBatch(f), DefaultLimits(), cfg, func() time.Time { return f.now })
	if err != nil {
		t.Fatal(err)
	}
	if f.calls != 4*(5+2) {
		t.Errorf("%d batches, want 4 points × 7 runs", f.calls)
	}
	for _, s := range f.sizes {
		if (s[0] != 1 && s[0] != 10) || (s[1] != 4 && s[1] != 8) {
			t.Fatalf("a batch of %d inputs of %d bytes: not a configured size and length", s[0], s[1])
		}
	}
	if len(points) != 4 {
		t.Fatalf("%d points", len(points))
	}
	for _, p := range points {
		base := time.Duration(p.BatchSize*p.InputLen) * time.Microsecond
		if p.Min < base || p.Max > base+4*time.Microsecond || p.Median < p.Min || p.Median > p.Max || p.Min == p.Max {
			t.Errorf("point %+v: want min ≤ median ≤ max within [%v, %v+4µs], and a spread", p, base, base)
		}
	}
	var b strings.Builder
	if err := WriteLatencyTable(&b, []string{"test"}, points, 8); err != nil {
		t.Fatal(err)
	}
	m, err := actors.ParseLatencyTable([]byte(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(m.Table) != 2 || m.Table[0].Latency != points[2].Median || m.Table[1].Latency != points[3].Median {
		t.Errorf("table %+v from points %+v: want the length-8 medians", m.Table, points)
	}
	if err := WriteLatencyTable(&b, nil, points, 16); err == nil {
		t.Error("a table at a length not measured was written")
	}
}

func TestProfileConfigValidate(t *testing.T) {
	ok := ProfileConfig{Sizes: []int{1, 2}, Lengths: []int{0}, Reps: 1}
	if err := ok.Validate(DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []ProfileConfig{
		{Lengths: []int{1}, Reps: 1},
		{Sizes: []int{2, 2}, Lengths: []int{1}, Reps: 1},
		{Sizes: []int{0}, Lengths: []int{1}, Reps: 1},
		{Sizes: []int{1}, Lengths: []int{InputLenMax + 1}, Reps: 1},
		{Sizes: []int{1}, Lengths: []int{1}, Reps: 0},
		{Sizes: []int{1}, Lengths: []int{1}, Reps: 1, Warmup: -1},
	} {
		if err := bad.Validate(DefaultLimits()); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (ProfileConfig{Sizes: []int{50}, Lengths: []int{1}, Reps: 1}).Validate(Limits{BatchMax: 10, InputLenMax: 10}); err == nil {
		t.Error("a size above the backend's BatchMax accepted")
	}
}

func TestProfileInputs(t *testing.T) {
	a, b := ProfileInputs(5, 33), ProfileInputs(5, 33)
	seen := map[string]bool{}
	for i := range a {
		if a[i] != b[i] || len(a[i]) != 33 {
			t.Fatalf("input %d: %q vs %q", i, a[i], b[i])
		}
		for _, c := range []byte(a[i]) {
			if c < PrintLo || c > PrintHi {
				t.Fatalf("byte %d not printable", c)
			}
		}
		seen[a[i]] = true
	}
	if len(seen) != 5 {
		t.Errorf("%d distinct inputs of 5", len(seen))
	}
}

// TestTableLength: the table is made for the length closest to 128, the
// larger on a tie.
func TestTableLength(t *testing.T) {
	for _, c := range []struct {
		lengths []int
		want    int
	}{
		{[]int{16, 128, 1024}, 128},
		{[]int{16}, 16},
		{[]int{1024, 8, 100}, 100},
		{[]int{64, 192}, 192},
	} {
		if got := TableLength(c.lengths); got != c.want {
			t.Errorf("TableLength(%v) = %d, want %d", c.lengths, got, c.want)
		}
	}
}
