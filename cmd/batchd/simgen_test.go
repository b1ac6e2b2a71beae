package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// batchd sim-gen runs a built-in generation scenario, prints its report
// and expectations and writes its charts (exit 0); a scenario whose
// expectation fails exits 1 naming it; an unknown one is a usage error.
func TestSimGen(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if code := run([]string{"sim-gen", "crash-tenants", "--charts", dir}, &out, io.Discard); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	for _, want := range []string{"== 20 req/s", "gold ", "expectations hold", "charts: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "kv_use.png")); err != nil {
		t.Error(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\nduration: 2s\nrates: [4]\nexpect: [tokens_per_sec > 1000000]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run([]string{"sim-gen", bad}, io.Discard, &stderr); code != exitFail || !strings.Contains(stderr.String(), "tokens_per_sec > 1000000") {
		t.Errorf("failing scenario: exit %d, %s", code, stderr.String())
	}
	if code := run([]string{"sim-gen", "no-such-scenario"}, io.Discard, io.Discard); code != exitUsage {
		t.Errorf("unknown scenario: exit %d, want %d", code, exitUsage)
	}
}
