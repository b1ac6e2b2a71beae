package gen

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WriteCharts writes the result's charts into dir (created if missing),
// each as PNG and SVG: kv_use (the share of KV blocks held over time, a
// line per rate), ttft_cdf (the completed requests' TTFT CDF, a line per
// rate, the SLO marked) and throughput (tokens/s and TTFT p95 against
// the rate). It returns the paths written.
func (r *Result) WriteCharts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("gen charts: %w", err)
	}
	var out []string
	for _, c := range []struct {
		name string
		draw func() (*plot.Plot, error)
	}{{"kv_use", r.kvPlot}, {"ttft_cdf", r.cdfPlot}, {"throughput", r.throughputPlot}} {
		p, err := c.draw()
		if err != nil {
			return out, fmt.Errorf("gen charts: %s: %w", c.name, err)
		}
		for _, f := range []string{"png", "svg"} {
			path := filepath.Join(dir, c.name+"."+f)
			if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
				return out, fmt.Errorf("gen charts: %w", err)
			}
			out = append(out, path)
		}
	}
	return out, nil
}

func (r *Result) kvPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: KV cache use over time", r.Scenario.Name)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "share of KV blocks held"
	p.Y.Min, p.Y.Max = 0, 1
	var lines []any
	for i, rep := range r.Reports {
		xy := make(plotter.XYs, len(rep.KVSeries))
		for k, pt := range rep.KVSeries {
			xy[k] = plotter.XY{X: pt.At.Seconds(), Y: pt.Used}
		}
		lines = append(lines, fmt.Sprintf("%v req/s", r.Rates[i]), xy)
	}
	return p, plotutil.AddLines(p, lines...)
}

func (r *Result) cdfPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: time to first token, completed requests (SLO %v)", r.Scenario.Name, r.Scenario.SLO.TTFT)
	p.X.Label.Text = "TTFT (ms)"
	p.Y.Label.Text = "share of completed requests"
	p.Y.Min, p.Y.Max = 0, 1
	var lines []any
	for i, rep := range r.Reports {
		n := len(rep.TTFTSample)
		step := max(n/1000, 1)
		var xy plotter.XYs
		for k := 0; k < n; k += step {
			xy = append(xy, plotter.XY{X: float64(rep.TTFTSample[k]) / float64(time.Millisecond), Y: float64(k+1) / float64(n)})
		}
		if n > 0 {
			xy = append(xy, plotter.XY{X: float64(rep.TTFTSample[n-1]) / float64(time.Millisecond), Y: 1})
			lines = append(lines, fmt.Sprintf("%v req/s", r.Rates[i]), xy)
		}
	}
	slo := float64(r.Scenario.SLO.TTFT) / float64(time.Millisecond)
	lines = append(lines, "SLO", plotter.XYs{{X: slo, Y: 0}, {X: slo, Y: 1}})
	return p, plotutil.AddLines(p, lines...)
}

func (r *Result) throughputPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: tokens/s and TTFT p95 (ms) by offered rate", r.Scenario.Name)
	p.X.Label.Text = "offered rate (req/s)"
	var tps, p95 plotter.XYs
	for i, rep := range r.Reports {
		tps = append(tps, plotter.XY{X: r.Rates[i], Y: rep.WindowTokensPerSec})
		p95 = append(p95, plotter.XY{X: r.Rates[i], Y: rep.TTFT.P95})
	}
	return p, plotutil.AddLinePoints(p, "tokens/s", tps, "TTFT p95 (ms)", p95)
}
