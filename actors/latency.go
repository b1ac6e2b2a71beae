package actors

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// LatencyModel predicts how long a device takes to run a batch. It is the
// cost model the batcher plans with and, in the simulator, the device's
// actual service time (before faults).
//
// A batch costs Base + PerItem·n + PerPaddedByte·n·maxLen: every input is
// padded to the batch's longest member, so padding shows in the cost. When
// Table is set it replaces Base and PerItem: the cost of n items is read from
// the table by linear interpolation between its points (and held flat past
// its ends). When FanoutConcurrency is set it replaces PerItem and Table:
// the device is a single-item API called once per input, at most
// FanoutConcurrency calls at once, each FanoutCall long, so a batch of n
// costs Base + ⌈n/FanoutConcurrency⌉·FanoutCall.
type LatencyModel struct {
	Base          time.Duration
	PerItem       time.Duration
	PerPaddedByte time.Duration
	// Table holds measured points, sorted by strictly increasing BatchSize.
	Table []LatencyPoint
	// FanoutConcurrency is how many single-item calls run at once;
	// FanoutCall is one call's latency. Both or neither.
	FanoutConcurrency int
	FanoutCall        time.Duration
}

// LatencyPoint is one measured batch latency.
type LatencyPoint struct {
	BatchSize int
	Latency   time.Duration
}

// FixedLatency is the seeds' backend: the same cost for 1 to 100 inputs.
func FixedLatency(d time.Duration) LatencyModel { return LatencyModel{Base: d} }

// Validate reports a model that cannot predict anything sensible.
func (m LatencyModel) Validate() error {
	if m.Base < 0 || m.PerItem < 0 || m.PerPaddedByte < 0 {
		return fmt.Errorf("latency model: negative coefficient")
	}
	for i, p := range m.Table {
		if p.BatchSize < 1 || p.Latency <= 0 {
			return fmt.Errorf("latency model: table point %d: batch size and latency must be positive", i)
		}
		if i > 0 && p.BatchSize <= m.Table[i-1].BatchSize {
			return fmt.Errorf("latency model: table point %d: batch sizes must increase", i)
		}
	}
	switch {
	case m.FanoutConcurrency < 0 || m.FanoutCall < 0:
		return fmt.Errorf("latency model: negative fan-out")
	case (m.FanoutConcurrency > 0) != (m.FanoutCall > 0):
		return fmt.Errorf("latency model: a fan-out needs both a concurrency and a call latency")
	case m.FanoutConcurrency > 0 && (m.PerItem > 0 || len(m.Table) > 0):
		return fmt.Errorf("latency model: a fan-out replaces the per-item cost and the table")
	case m.FanoutConcurrency == 0 && len(m.Table) == 0 && m.Base+m.PerItem <= 0:
		return fmt.Errorf("latency model: a batch must cost more than zero")
	}
	return nil
}

// Fanout reports whether m is a single-item API fanned out.
func (m LatencyModel) Fanout() bool { return m.FanoutConcurrency > 0 }

// Waves is how many rounds of FanoutConcurrency calls a batch of n takes.
func (m LatencyModel) Waves(n int) int {
	return (n + m.FanoutConcurrency - 1) / m.FanoutConcurrency
}

// Predict returns the cost of a batch of n inputs whose longest is maxLen
// bytes.
// The affine case is small enough to be inlined where the batcher asks
// several times for each request.
func (m *LatencyModel) Predict(n, maxLen int) time.Duration {
	if m.FanoutConcurrency > 0 || len(m.Table) > 0 {
		return m.predictOther(n, maxLen)
	}
	return m.Base + time.Duration(n)*(m.PerItem+time.Duration(maxLen)*m.PerPaddedByte)
}

// predictOther is Predict for a fan-out or a table.
func (m *LatencyModel) predictOther(n, maxLen int) time.Duration {
	var d time.Duration
	if m.Fanout() {
		d = m.Base + time.Duration(m.Waves(n))*m.FanoutCall
	} else {
		d = m.interpolate(n)
	}
	return d + time.Duration(n)*time.Duration(maxLen)*m.PerPaddedByte
}

// interpolate reads the table at n. The point at or after n is found by
// bisection: a measured table has a point for every batch size (100), and
// the batcher predicts several times a request on its one goroutine (a
// linear scan was a fifth of that goroutine's CPU on the H200 host).
func (m LatencyModel) interpolate(n int) time.Duration {
	t := m.Table
	if n <= t[0].BatchSize {
		return t[0].Latency
	}
	if n > t[len(t)-1].BatchSize {
		return t[len(t)-1].Latency
	}
	// The first point with BatchSize >= n: t[0] < n, so i >= 1.
	lo, hi := 1, len(t)-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t[mid].BatchSize < n {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	a, b := t[lo-1], t[lo]
	frac := float64(n-a.BatchSize) / float64(b.BatchSize-a.BatchSize)
	return a.Latency + time.Duration(frac*float64(b.Latency-a.Latency))
}

// ParseLatencyTable reads a measured latency profile: one
// "batch_size,latency" line per point (latency as a Go duration, e.g.
// "100ms", or plain milliseconds), '#' comments and blank lines allowed,
// batch sizes increasing. An error names the line.
func ParseLatencyTable(data []byte) (LatencyModel, error) {
	var m LatencyModel
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		size, lat, ok := strings.Cut(line, ",")
		if !ok {
			return LatencyModel{}, fmt.Errorf("latency table line %d: want batch_size,latency, got %q", i+1, line)
		}
		n, err := strconv.Atoi(strings.TrimSpace(size))
		if err != nil {
			return LatencyModel{}, fmt.Errorf("latency table line %d: batch size: %w", i+1, err)
		}
		lat = strings.TrimSpace(lat)
		d, err := time.ParseDuration(lat)
		if err != nil {
			ms, err2 := strconv.ParseFloat(lat, 64)
			if err2 != nil {
				return LatencyModel{}, fmt.Errorf("latency table line %d: latency %q: want a duration or milliseconds", i+1, lat)
			}
			d = time.Duration(ms * float64(time.Millisecond))
		}
		m.Table = append(m.Table, LatencyPoint{BatchSize: n, Latency: d})
		if len(m.Table) > latencyTableMax {
			return LatencyModel{}, fmt.Errorf("latency table: more than %d points", latencyTableMax)
		}
	}
	if len(m.Table) == 0 {
		return LatencyModel{}, fmt.Errorf("latency table: no points")
	}
	if err := m.Validate(); err != nil {
		return LatencyModel{}, err
	}
	return m, nil
}

// latencyTableMax bounds a profile: one point per batch size up to 10,000
// is far more than any backend takes.
const latencyTableMax = 10_000
