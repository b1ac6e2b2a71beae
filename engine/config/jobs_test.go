package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestJobsSection(t *testing.T) {
	f, err := Load("j.yaml", []byte("jobs:\n  dir: /data/batchd\n  items_max: 500\n  window_job: 10\n  window_total: 30\n  retain_age: 2h\n  streams_max: 9\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.JobsConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != "/data/batchd/jobs.db" || c.ItemsMax != 500 || c.WindowJob != 10 || c.WindowTotal != 30 || c.RetainAge != 2*time.Hour || c.StreamsMax != 9 {
		t.Errorf("jobs config %+v", c)
	}
	h, err := f.HTTPConfig()
	if err != nil || h.JobItemsMax != 500 {
		t.Errorf("http JobItemsMax %d, %v", h.JobItemsMax, err)
	}
	// No dir: the user's state directory.
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	f, _ = LoadEmbedded()
	if c, err := f.JobsConfig(); err != nil || c.Path != filepath.Join(state, "batchd", "jobs.db") {
		t.Errorf("default path %q, %v", c.Path, err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"jobs:\n  window_job: 300\n", "jobs.window_total: 256: want 300 to"},
		{"jobs:\n  items_max: 0\n", "jobs.items_max: 0: want 1 to"},
		{"jobs:\n  retain_age: 0s\n", "jobs.retain_age: 0s"},
		{"jobs:\n  streams_max: 0\n", "jobs.streams_max: 0: want 1 to"},
		{"jobs:\n  windw_job: 3\n", `jobs.windw_job: unknown key (did you mean "window_job"?)`},
	} {
		if _, err := Load("j.yaml", []byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
}
