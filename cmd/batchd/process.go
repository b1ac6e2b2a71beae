package main

import (
	"log/slog"
	"runtime/debug"
	"strconv"

	"github.com/batchd/batchd/engine/config"
)

// gcSettings are the Go runtime's memory settings the server runs with.
type gcSettings struct {
	gcPercent      int   // GOGC; meaningless when gcFromEnv
	memoryLimit    int64 // GOMEMLIMIT in bytes, 0 for none; meaningless when limitFromEnv
	gcFromEnv      bool  // GOGC is set in the environment, and wins
	limitFromEnv   bool  // GOMEMLIMIT is set in the environment, and wins
	setMemoryLimit bool  // the file asks for a limit
}

// resolveGC decides the settings: the file's, except where the environment
// sets GOGC or GOMEMLIMIT, which the runtime has applied already and which
// an operator expects to win, as they do for any Go program.
func resolveGC(p config.Process, getenv func(string) string) gcSettings {
	s := gcSettings{
		gcPercent:    p.GCPercent,
		memoryLimit:  p.MemoryLimitBytes,
		gcFromEnv:    getenv("GOGC") != "",
		limitFromEnv: getenv("GOMEMLIMIT") != "",
	}
	s.setMemoryLimit = !s.limitFromEnv && s.memoryLimit > 0
	return s
}

// applyGC applies the settings resolveGC chose to this process and logs
// what the runtime now runs with.
func applyGC(p config.Process, getenv func(string) string, log *slog.Logger) {
	s := resolveGC(p, getenv)
	if !s.gcFromEnv {
		debug.SetGCPercent(s.gcPercent)
	}
	if s.setMemoryLimit {
		debug.SetMemoryLimit(s.memoryLimit)
	}
	gc := strconv.Itoa(s.gcPercent)
	if s.gcFromEnv {
		gc = "GOGC=" + getenv("GOGC")
	}
	// A negative limit only reads the current one.
	log.Info("go runtime", "gc_percent", gc, "memory_limit_bytes", debug.SetMemoryLimit(-1), "gomemlimit_from_env", s.limitFromEnv)
}
