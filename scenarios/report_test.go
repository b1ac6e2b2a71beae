package scenarios

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResultWrite: the table names the scenario, wraps its description
// and gives each expectation a verdict; report.json is the JSON form.
func TestResultWrite(t *testing.T) {
	s, err := Builtin("reference")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(s.Seed)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"scenario reference (", "expect", "scenario reference passed\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out[:strings.Index(out, "\n\n")], "\n") {
		if len(line) > 80 && strings.Contains(line, " ") && !strings.HasPrefix(line, "scenario ") {
			t.Errorf("description line of %d bytes: %q", len(line), line)
		}
	}
	path, err := res.WriteFile(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil || back.Scenario != "reference" || len(back.Checks) != len(res.Checks) {
		t.Errorf("report.json: %v, %+v", err, back)
	}
}

func TestWrap(t *testing.T) {
	if got := wrap("aa bb cc  dddddd", 5); got != "aa bb\ncc\ndddddd" {
		t.Errorf("wrap = %q", got)
	}
}
