package main

import (
	"testing"

	"github.com/batchd/batchd/engine/config"
)

func TestGCFromFile(t *testing.T) {
	file := config.Process{GCPercent: 400, MemoryLimitBytes: 1 << 30}
	cases := []struct {
		name          string
		p             config.Process
		env           map[string]string
		gc, memoryMax bool
	}{
		{"the file's", file, nil, true, true},
		{"GOGC wins", file, map[string]string{"GOGC": "100"}, false, true},
		{"GOMEMLIMIT wins", file, map[string]string{"GOMEMLIMIT": "2GiB"}, true, false},
		{"no limit in the file", config.Process{GCPercent: 400}, nil, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gc, limit := gcFromFile(c.p, func(k string) string { return c.env[k] })
			if gc != c.gc || limit != c.memoryMax {
				t.Errorf("file's GOGC applies %v, its limit %v; want %v, %v", gc, limit, c.gc, c.memoryMax)
			}
		})
	}
}
