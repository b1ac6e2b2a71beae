package scenarios

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the scenario's name and description, the simulator's
// report, and one line per expectation with its verdict: what `batchd sim
// SCENARIO` prints.
func (r *Result) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "scenario %s (%s, seed %d)\n", r.Scenario, r.File, r.Seed)
	if d := strings.TrimSpace(r.Description); d != "" {
		fmt.Fprintln(w, wrap(d, 80))
	}
	fmt.Fprintln(w)
	if err := r.Report.WriteTable(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return writeChecks(w, r.Scenario, r.Passed, r.Checks)
}

// writeChecks prints one line per expectation with its verdict, then the
// scenario's.
func writeChecks(w io.Writer, scenario string, passed bool, checks []CheckResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "expect\tobserved\t")
	for _, c := range checks {
		obs := "no data"
		if c.Observed != nil {
			obs = fmt.Sprintf("%.6g", *c.Observed)
		}
		verdict := "ok"
		if !c.Passed {
			verdict = "FAILED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Check, obs, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "passed"
	if !passed {
		verdict = "FAILED"
	}
	_, err := fmt.Fprintf(w, "\nscenario %s %s\n", scenario, verdict)
	return err
}

// WriteFile writes the result as JSON (its --json form) to DIR/report.json,
// creating DIR, and returns the file's path.
func (r *Result) WriteFile(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "report.json")
	file, err := os.Create(path)
	if err != nil {
		return "", err
	}
	enc := json.NewEncoder(file)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		file.Close()
		return "", err
	}
	return path, file.Close()
}

// wrap breaks text into lines of at most width bytes at spaces (a longer
// word keeps a line of its own).
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(text) {
		switch {
		case n == 0:
		case n+1+len(word) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}
