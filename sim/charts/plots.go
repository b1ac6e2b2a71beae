package charts

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Formats are the file formats every chart is written in.
var Formats = []string{"png", "svg"}

// Size of every chart.
const (
	width  = 8 * vg.Inch
	height = 4.5 * vg.Inch
)

// WriteRun writes the charts of a run into dir (created if missing):
// latency_cdf, latency_over_time, queue_depth and batch_sizes, each as PNG
// and SVG. It returns the paths written, in a fixed order. A chart with
// nothing to draw (no completed request, no autoscaling samples) is
// skipped, not drawn empty.
func WriteRun(dir string, s Series) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("charts: %w", err)
	}
	var out []string
	for _, c := range []struct {
		name string
		draw func(Series) (*plot.Plot, error)
	}{
		{"latency_cdf", cdfPlot},
		{"latency_over_time", latencyPlot},
		{"queue_depth", queuePlot},
		{"batch_sizes", batchPlot},
	} {
		p, err := c.draw(s)
		if errors.Is(err, errNothing) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("charts: %s: %w", c.name, err)
		}
		paths, err := save(p, dir, c.name)
		out = append(out, paths...)
		if err != nil {
			return out, err
		}
	}
	if len(s.Devices) > 0 {
		paths, err := saveScaling(s, dir)
		out = append(out, paths...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// saveScaling draws the autoscaled fleet: devices, offered load and p95
// over the same time axis, three panels stacked, as scaling.png and
// scaling.svg.
func saveScaling(s Series, dir string) ([]string, error) {
	dev := plot.New()
	dev.Title.Text = "Autoscaled fleet: devices, offered load and p95 over time"
	dev.Y.Label.Text = "devices"
	dev.Y.Min = 0
	if err := plotutil.AddLines(dev, "up (booting or running)", xys(s.Devices), "ready (batcher)", xys(s.Ready)); err != nil {
		return nil, err
	}
	dev.Legend.Top = true
	load := plot.New()
	load.Y.Label.Text = "offered (req/s)"
	load.Y.Min = 0
	if err := plotutil.AddLines(load, "offered", xys(s.Load)); err != nil {
		return nil, err
	}
	lat := plot.New()
	lat.X.Label.Text = "time (s)"
	lat.Y.Label.Text = "p95 (ms)"
	lat.Y.Min = 0
	var p95 plotter.XYs
	for _, b := range s.Bins {
		if b.Completed > 0 {
			p95 = append(p95, plotter.XY{X: b.FromS + s.BinS/2, Y: b.P95Ms})
		}
	}
	if err := plotutil.AddLines(lat, "p95 (by arrival)", p95); err != nil {
		return nil, err
	}
	rows := [][]*plot.Plot{{dev}, {load}, {lat}}
	xmax := 0.0
	for _, r := range rows {
		r[0].Add(plotter.NewGrid())
		xmax = max(xmax, r[0].X.Max)
	}
	for _, r := range rows {
		r[0].X.Min, r[0].X.Max = 0, xmax
	}
	var out []string
	for _, f := range Formats {
		path := filepath.Join(dir, "scaling."+f)
		c, err := draw.NewFormattedCanvas(width, 2*height, f)
		if err != nil {
			return out, fmt.Errorf("charts: %s: %w", path, err)
		}
		canvases := plot.Align(rows, draw.Tiles{Rows: 3, Cols: 1, PadY: vg.Points(4)}, draw.New(c))
		for i, r := range rows {
			r[0].Draw(canvases[i][0])
		}
		file, err := os.Create(path)
		if err != nil {
			return out, fmt.Errorf("charts: %w", err)
		}
		_, err = c.WriteTo(file)
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return out, fmt.Errorf("charts: %s: %w", path, err)
		}
		out = append(out, path)
	}
	return out, nil
}

// errNothing is a chart with no data.
var errNothing = errors.New("nothing to draw")

func save(p *plot.Plot, dir, name string) ([]string, error) {
	var out []string
	for _, f := range Formats {
		path := filepath.Join(dir, name+"."+f)
		if err := p.Save(width, height, path); err != nil {
			return out, fmt.Errorf("charts: %s: %w", path, err)
		}
		out = append(out, path)
	}
	return out, nil
}

func xys(ps []Point) plotter.XYs {
	out := make(plotter.XYs, len(ps))
	for i, p := range ps {
		out[i] = plotter.XY{X: p.X, Y: p.Y}
	}
	return out
}

func cdfPlot(s Series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Latency CDF per tenant (completed requests)"
	p.X.Label.Text = "latency (ms)"
	p.Y.Label.Text = "fraction of requests"
	p.Y.Min, p.Y.Max = 0, 1
	var args []any
	for _, c := range s.CDFs {
		if len(c.Points) == 0 {
			continue
		}
		// A step from zero, so the curve starts on the axis.
		pts := append([]Point{{X: c.Points[0].X, Y: 0}}, c.Points...)
		args = append(args, fmt.Sprintf("%s (%d)", c.Tenant, c.Completed), xys(pts))
	}
	if len(args) == 0 {
		return nil, errNothing
	}
	if err := plotutil.AddLines(p, args...); err != nil {
		return nil, err
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	return p, nil
}

func latencyPlot(s Series) (*plot.Plot, error) {
	var p50, p95, p99 plotter.XYs
	for _, b := range s.Bins {
		if b.Completed == 0 {
			continue
		}
		x := b.FromS + s.BinS/2
		p50 = append(p50, plotter.XY{X: x, Y: b.P50Ms})
		p95 = append(p95, plotter.XY{X: x, Y: b.P95Ms})
		p99 = append(p99, plotter.XY{X: x, Y: b.P99Ms})
	}
	if len(p50) == 0 {
		return nil, errNothing
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Latency over time (by arrival, %g s bins)", s.BinS)
	p.X.Label.Text = "arrival time (s)"
	p.Y.Label.Text = "latency (ms)"
	p.Y.Min = 0
	// Headroom above the highest p99 for the legend.
	top := 0.0
	for _, xy := range p99 {
		top = max(top, xy.Y)
	}
	p.Y.Max = 1.3 * top
	if err := plotutil.AddLines(p, "p50", p50, "p95", p95, "p99", p99); err != nil {
		return nil, err
	}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p, nil
}

func queuePlot(s Series) (*plot.Plot, error) {
	if len(s.Queue) == 0 {
		return nil, errNothing
	}
	p := plot.New()
	p.Title.Text = "Queue depth over time (requests queued under all keys)"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "queued requests"
	p.Y.Min = 0
	if err := plotutil.AddLines(p, "queued", xys(s.Queue)); err != nil {
		return nil, err
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// batchBarsMax bounds the bars of the batch-size chart; larger batch
// maxima are grouped.
const batchBarsMax = 100

func batchPlot(s Series) (*plot.Plot, error) {
	n := len(s.BatchSizes) - 1 // the batch max
	var total int64
	for _, c := range s.BatchSizes {
		total += c
	}
	if n < 1 || total == 0 {
		return nil, errNothing
	}
	group := (n + batchBarsMax - 1) / batchBarsMax
	var vals plotter.Values
	for lo := 1; lo <= n; lo += group {
		var sum int64
		for k := lo; k < lo+group && k <= n; k++ {
			sum += s.BatchSizes[k]
		}
		vals = append(vals, float64(sum))
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Batch sizes (%d batches)", total)
	if group == 1 {
		p.X.Label.Text = "batch size"
	} else {
		p.X.Label.Text = fmt.Sprintf("batch size (bars of %d sizes)", group)
	}
	p.Y.Label.Text = "batches"
	bars, err := plotter.NewBarChart(vals, vg.Length(math.Max(1, 400/float64(len(vals)))))
	if err != nil {
		return nil, err
	}
	bars.LineStyle.Width = 0
	bars.Color = plotutil.Color(0)
	// Bar i stands for sizes starting at 1 + i*group.
	bars.XMin = 1
	if group > 1 {
		bars.XMin = 0
	}
	p.Add(bars)
	return p, nil
}
