package cudabridge

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Forwarder runs one batch of inputs (1 to its BatchMax, none longer than
// its InputLenMax) and returns one output per input: a CPU or a Device.
// Profile measures one; the backends' Run validates a batch and calls it.
type Forwarder interface {
	Forward(ctx context.Context, inputs []string) ([]Output, error)
}

var (
	_ Forwarder = (*CPU)(nil)
	_ Forwarder = (*Device)(nil)
)

// ProfileConfig says what Profile measures.
type ProfileConfig struct {
	// Sizes are the batch sizes, strictly increasing, each 1 to the
	// backend's BatchMax.
	Sizes []int
	// Lengths are the input lengths in bytes, each 0 to the backend's
	// InputLenMax; every input of a measured batch has this length.
	Lengths []int
	// Reps is how many timed runs make each point (its median, min and
	// max); Warmup runs before them are not timed.
	Reps   int
	Warmup int
}

// Limits on a profile, so a typo cannot run for hours.
const (
	profileRepsMax   = 1000
	profilePointsMax = 10_000
)

// DefaultProfileSizes are 1 to 100: every size to 10, then steps of 10.
func DefaultProfileSizes() []int {
	s := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for n := 20; n <= 100; n += 10 {
		s = append(s, n)
	}
	return s
}

// Validate checks c against the backend's limits.
func (c ProfileConfig) Validate(lim Limits) error {
	if len(c.Sizes) == 0 || len(c.Lengths) == 0 {
		return fmt.Errorf("cudabridge: profile: no sizes or no lengths")
	}
	for i, n := range c.Sizes {
		if n < 1 || n > lim.BatchMax {
			return fmt.Errorf("cudabridge: profile: batch size %d: want 1 to %d", n, lim.BatchMax)
		}
		if i > 0 && n <= c.Sizes[i-1] {
			return fmt.Errorf("cudabridge: profile: batch sizes must increase (%d after %d)", n, c.Sizes[i-1])
		}
	}
	for _, l := range c.Lengths {
		if l < 0 || l > lim.InputLenMax {
			return fmt.Errorf("cudabridge: profile: input length %d: want 0 to %d", l, lim.InputLenMax)
		}
	}
	if c.Reps < 1 || c.Reps > profileRepsMax || c.Warmup < 0 || c.Warmup > profileRepsMax {
		return fmt.Errorf("cudabridge: profile: reps %d, warmup %d: want 1 to %d and 0 to %d", c.Reps, c.Warmup, profileRepsMax, profileRepsMax)
	}
	if len(c.Sizes)*len(c.Lengths) > profilePointsMax {
		return fmt.Errorf("cudabridge: profile: %d points: want at most %d", len(c.Sizes)*len(c.Lengths), profilePointsMax)
	}
	return nil
}

// ProfilePoint is the measured latency of batches of one size and input
// length: the median, fastest and slowest of Reps runs, wall clock around
// Forward (padding, copies, launches, the wait and decoding included).
type ProfilePoint struct {
	BatchSize, InputLen int
	Median, Min, Max    time.Duration
}

// ItemsPerSecond is the throughput of back-to-back batches at the median.
func (p ProfilePoint) ItemsPerSecond() float64 {
	return float64(p.BatchSize) / p.Median.Seconds()
}

// ProfileInputs returns n distinct printable inputs of length bytes each,
// the same on every call.
func ProfileInputs(n, length int) []string {
	out := make([]string, n)
	r := splitmix64(uint64(n)<<32 | uint64(length))
	for i := range out {
		b := make([]byte, length)
		for j := range b {
			b[j] = byte(PrintLo + r.next()%(PrintHi-PrintLo+1))
		}
		out[i] = string(b)
	}
	return out
}

// BatchFunc runs one batch of inputs and says whether it succeeded: what
// Profile times. Any backend is one (a worker process, an upstream model
// server), not only the bytenet model's.
type BatchFunc func(ctx context.Context, inputs []string) error

// ForwardBatch is f's Forward as a BatchFunc.
func ForwardBatch(f Forwarder) BatchFunc {
	return func(ctx context.Context, inputs []string) error {
		_, err := f.Forward(ctx, inputs)
		return err
	}
}

// Profile measures run over every size and length of c, lengths outer,
// and returns the points in that order. now is the clock (time.Now).
func Profile(ctx context.Context, run BatchFunc, lim Limits, c ProfileConfig, now func() time.Time) ([]ProfilePoint, error) {
	if err := c.Validate(lim); err != nil {
		return nil, err
	}
	var points []ProfilePoint
	times := make([]time.Duration, c.Reps)
	for _, l := range c.Lengths {
		for _, n := range c.Sizes {
			inputs := ProfileInputs(n, l)
			for range c.Warmup {
				if err := run(ctx, inputs); err != nil {
					return nil, fmt.Errorf("cudabridge: profile: batch of %d × %d bytes: %w", n, l, err)
				}
			}
			for r := range times {
				start := now()
				if err := run(ctx, inputs); err != nil {
					return nil, fmt.Errorf("cudabridge: profile: batch of %d × %d bytes: %w", n, l, err)
				}
				times[r] = now().Sub(start)
			}
			s := slices.Clone(times)
			slices.Sort(s)
			points = append(points, ProfilePoint{BatchSize: n, InputLen: l, Median: s[len(s)/2], Min: s[0], Max: s[len(s)-1]})
		}
	}
	return points, nil
}

// WriteLatencyTable writes points as the latency table the simulator's
// table model reads (actors.ParseLatencyTable, `batchd sim
// --latency-table`): one "batch_size,latency" line per size at input
// length tableLen, the median. The header lines and the other lengths'
// points are comments, so the file stays one table while keeping the
// whole measurement.
func WriteLatencyTable(w io.Writer, header []string, points []ProfilePoint, tableLen int) error {
	var b strings.Builder
	for _, h := range header {
		fmt.Fprintf(&b, "# %s\n", h)
	}
	fmt.Fprintf(&b, "# table: median batch latency at input length %d bytes\n", tableLen)
	fmt.Fprintln(&b, "# batch_size,latency")
	rows := 0
	for _, p := range points {
		if p.InputLen == tableLen {
			fmt.Fprintf(&b, "%d,%v\n", p.BatchSize, p.Median)
			rows++
		}
	}
	if rows == 0 {
		return fmt.Errorf("cudabridge: profile: no point at input length %d", tableLen)
	}
	fmt.Fprintln(&b, "# every point: input_len batch_size median min max items_per_s")
	for _, p := range points {
		fmt.Fprintf(&b, "# %d %d %v %v %v %.0f\n", p.InputLen, p.BatchSize, p.Median, p.Min, p.Max, p.ItemsPerSecond())
	}
	_, err := io.WriteString(w, b.String())
	return err
}
