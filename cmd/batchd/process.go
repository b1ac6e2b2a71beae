package main

import (
	"log/slog"
	"runtime/debug"
	"strconv"

	"github.com/batchd/batchd/engine/config"
)

// gcFromFile says which of the file's memory settings apply. GOGC and
// GOMEMLIMIT in the environment, which the runtime has applied already,
// win, as an operator expects of any Go program; a limit of 0 is none.
func gcFromFile(p config.Process, getenv func(string) string) (gcPercent, memoryLimit bool) {
	return getenv("GOGC") == "", getenv("GOMEMLIMIT") == "" && p.MemoryLimitBytes > 0
}

// applyGC applies the file's memory settings where they apply, and logs
// what the runtime now runs with.
func applyGC(p config.Process, getenv func(string) string, log *slog.Logger) {
	setGC, setLimit := gcFromFile(p, getenv)
	gc := "GOGC=" + getenv("GOGC")
	if setGC {
		debug.SetGCPercent(p.GCPercent)
		gc = strconv.Itoa(p.GCPercent)
	}
	if setLimit {
		debug.SetMemoryLimit(p.MemoryLimitBytes)
	}
	// A negative limit only reads the current one.
	log.Info("go runtime", "gc_percent", gc, "memory_limit_bytes", debug.SetMemoryLimit(-1), "gomemlimit_from_env", getenv("GOMEMLIMIT") != "")
}
