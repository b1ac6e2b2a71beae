package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/httpapi"
	"github.com/batchd/batchd/engine/jobs"
)

// TestJobsCorruptRecord: one byte of a queued item's input changed in the
// store file, below bbolt (which checks its pages' structure, not their
// contents). The real server starts, fails that item alone with code
// corrupt, logs an error naming its job, and runs the rest of that job
// and another job to completion with their own inputs' outputs.
func TestJobsCorruptRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	file := filepath.Join(data, "jobs.db")
	s, err := jobs.Open(jobs.DefaultConfig(file), nil)
	if err != nil {
		t.Fatal(err)
	}
	const damaged = "damage-me-7f3a9c"
	spec := func(in ...string) jobs.Spec {
		return jobs.Spec{Kind: jobs.KindBatch, Tenant: httpapi.DefaultTenant, Model: "echo", Inputs: in, BodyHash: "hash-" + in[0]}
	}
	a, _, err := s.Submit(spec("a-0", damaged, "a-2"))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.Submit(spec("b-0", "b-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The live record and stale copies in pages bbolt freed (it copies a
	// page on write): all are changed, the live one among them.
	if n := bytes.Count(raw, []byte(damaged)); n < 1 {
		t.Fatal("input not in the file")
	}
	for i := bytes.Index(raw, []byte(damaged)); i >= 0; i = bytes.Index(raw, []byte(damaged)) {
		raw[i] ^= 0x01 // "damage" -> "eamage"
	}
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := filepath.Join(dir, "batchd.yaml")
	yaml := fmt.Sprintf("http:\n  addr: 127.0.0.1:0\nmodels:\n  - name: echo\n    versions: [{name: v1}]\njobs:\n  dir: %s\n", data)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, cfg)
	wait := func(id string) jobStatus {
		t.Helper()
		var st jobStatus
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st = jobStatus{}
			getJSON(t, srv.base+"/v1/requests/"+id, &st)
			p := st.Progress
			if p.Completed+p.Failed+p.Cancelled+p.Expired == p.Total && len(st.Items) == p.Total {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s did not finish: %+v\n%s", id, p, srv.stderr.String())
			}
		}
	}
	if st := wait(b.ID); st.Status != "completed" || st.Progress.Completed != 2 {
		t.Fatalf("the other job: %s %+v", st.Status, st.Progress)
	}
	st := wait(a.ID)
	if st.Progress.Completed != 2 || st.Progress.Failed != 1 {
		t.Fatalf("the damaged job: %+v, want 2 completed and 1 failed", st.Progress)
	}
	if it := st.Items[1]; it.Status != "failed" || it.Output != "" {
		t.Fatalf("the damaged item: %+v", it)
	}
	if st.Items[0].Status != "completed" || st.Items[2].Status != "completed" {
		t.Fatalf("the damaged job's other items: %+v", st.Items)
	}
	if log := srv.stderr.String(); !strings.Contains(log, "ERROR") || !strings.Contains(log, a.ID) {
		t.Fatalf("no error naming job %s in the log:\n%s", a.ID, log)
	}
}

// TestJobsEmptyStore: an empty (0-byte) jobs.db stops the start with an
// error naming it, and is left as it is.
func TestJobsEmptyStore(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(data, "jobs.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", data}, &stdout, &stderr)
	if code == exitOK || !strings.Contains(stderr.String(), file) || !strings.Contains(stderr.String(), "empty") {
		t.Errorf("exit %d, stderr %q: want a failure naming %s as empty", code, stderr.String(), file)
	}
	if fi, err := os.Stat(file); err != nil || fi.Size() != 0 {
		t.Errorf("the empty file was changed: %v %v", fi, err)
	}
}
