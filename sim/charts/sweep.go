package charts

import (
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/batchd/batchd/sim/sweep"
)

// WriteSweep writes the charts of a sweep into dir (created if missing):
// sweep_latency, the throughput-latency curve (p50 and p99 against the
// throughput reached) of each policy with the fleet's latency floor and,
// when it is the same at every point, its capacity; and sweep_throughput,
// the throughput of each policy against the swept setting with the
// physical bound. Each as PNG and SVG; it returns the paths written.
func WriteSweep(dir string, rs []sweep.Result) ([]string, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("charts: %w", err)
	}
	var policies []string
	by := map[string][]sweep.Result{}
	for _, r := range rs {
		if by[r.Policy] == nil {
			policies = append(policies, r.Policy)
		}
		by[r.Policy] = append(by[r.Policy], r)
	}
	param := string(rs[0].Param)
	if rs[0].Param == sweep.Linger {
		param = "linger (ms)"
	}
	sameCapacity := true
	for _, r := range rs {
		sameCapacity = sameCapacity && r.CapacityRPS == rs[0].CapacityRPS
	}

	lat := plot.New()
	lat.Title.Text = fmt.Sprintf("Throughput-latency (sweep of %s)", param)
	lat.X.Label.Text = "throughput (req/s)"
	lat.Y.Label.Text = "latency (ms)"
	lat.Y.Min = 0
	var args []any
	for _, p := range policies {
		var p50, p99 plotter.XYs
		for _, r := range by[p] {
			p50 = append(p50, plotter.XY{X: r.ThroughputRPS, Y: r.P50Ms})
			p99 = append(p99, plotter.XY{X: r.ThroughputRPS, Y: r.P99Ms})
		}
		args = append(args, p+" p50", p50, p+" p99", p99)
	}
	if err := plotutil.AddLinePoints(lat, args...); err != nil {
		return nil, fmt.Errorf("charts: sweep: %w", err)
	}
	xMax := 0.0
	for _, r := range rs {
		xMax = max(xMax, r.ThroughputRPS, r.CapacityRPS)
	}
	floor, err := plotter.NewLine(plotter.XYs{{X: 0, Y: rs[0].FloorMs}, {X: xMax, Y: rs[0].FloorMs}})
	if err != nil {
		return nil, fmt.Errorf("charts: sweep: %w", err)
	}
	floor.Dashes = []vg.Length{4, 4}
	lat.Add(floor)
	lat.Legend.Add("latency floor", floor)
	if sameCapacity && rs[0].CapacityRPS > 0 {
		yMax := 0.0
		for _, r := range rs {
			yMax = max(yMax, r.P99Ms)
		}
		capLine, err := plotter.NewLine(plotter.XYs{{X: rs[0].CapacityRPS, Y: 0}, {X: rs[0].CapacityRPS, Y: yMax}})
		if err != nil {
			return nil, fmt.Errorf("charts: sweep: %w", err)
		}
		capLine.Dashes = []vg.Length{2, 2}
		lat.Add(capLine)
		lat.Legend.Add("capacity", capLine)
	}
	lat.Legend.Top, lat.Legend.Left = true, true
	lat.Add(plotter.NewGrid())

	thr := plot.New()
	thr.Title.Text = fmt.Sprintf("Throughput against %s", param)
	thr.X.Label.Text = param
	thr.Y.Label.Text = "throughput (req/s)"
	thr.Y.Min = 0
	args = args[:0]
	for _, p := range policies {
		var xy plotter.XYs
		for _, r := range by[p] {
			xy = append(xy, plotter.XY{X: r.Value, Y: r.ThroughputRPS})
		}
		args = append(args, p, xy)
	}
	// The bound: no more than offered, no more than capacity.
	var bound plotter.XYs
	for _, r := range by[policies[0]] {
		bound = append(bound, plotter.XY{X: r.Value, Y: min(r.OfferedRPS, r.CapacityRPS)})
	}
	args = append(args, "physical bound", bound)
	if err := plotutil.AddLinePoints(thr, args...); err != nil {
		return nil, fmt.Errorf("charts: sweep: %w", err)
	}
	thr.Legend.Top, thr.Legend.Left = true, true
	thr.Add(plotter.NewGrid())

	var out []string
	for _, c := range []struct {
		name string
		p    *plot.Plot
	}{{"sweep_latency", lat}, {"sweep_throughput", thr}} {
		paths, err := save(c.p, dir, c.name)
		out = append(out, paths...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
