package main

import (
	"testing"

	"github.com/batchd/batchd/engine/config"
)

func TestResolveGC(t *testing.T) {
	file := config.Process{GCPercent: 400, MemoryLimitBytes: 1 << 30}
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	cases := []struct {
		name            string
		p               config.Process
		env             map[string]string
		gcEnv, limitEnv bool
		setLimit        bool
	}{
		{"the file's", file, nil, false, false, true},
		{"GOGC wins", file, map[string]string{"GOGC": "100"}, true, false, true},
		{"GOMEMLIMIT wins", file, map[string]string{"GOMEMLIMIT": "2GiB"}, false, true, false},
		{"no limit in the file", config.Process{GCPercent: 400}, nil, false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := resolveGC(c.p, env(c.env))
			if s.gcFromEnv != c.gcEnv || s.limitFromEnv != c.limitEnv || s.setMemoryLimit != c.setLimit {
				t.Errorf("got gcFromEnv %v, limitFromEnv %v, setMemoryLimit %v; want %v, %v, %v",
					s.gcFromEnv, s.limitFromEnv, s.setMemoryLimit, c.gcEnv, c.limitEnv, c.setLimit)
			}
			if s.gcPercent != c.p.GCPercent || s.memoryLimit != c.p.MemoryLimitBytes {
				t.Errorf("got %d%%, %d bytes; want the file's %d%%, %d", s.gcPercent, s.memoryLimit, c.p.GCPercent, c.p.MemoryLimitBytes)
			}
		})
	}
}
