package server

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/batchd/batchd/engine/config"
)

// fallDetector decides when load has fallen far enough that memory an
// overload grew should go back to the OS. The runtime keeps a heap near its
// last goal (at GOGC 400, five times the live heap an overload had) until a
// collection shrinks it, and returns freed pages only gradually; an idle
// server makes no garbage, so nothing shrinks it for minutes. Once per
// fall, not on every quiet period: a release costs a collection.
type fallDetector struct {
	peak int64 // the most requests of a period since the last release
}

// fallPeakMin is the fewest requests in a period that count as load worth
// releasing after: below it, the heap never grew.
const fallPeakMin = 1000

// step takes the requests of the period just ended and reports whether to
// release now: they fell below a quarter of the peak since the last one.
func (f *fallDetector) step(n int64) bool {
	if f.peak >= fallPeakMin && n*4 < f.peak {
		f.peak = n
		return true
	}
	f.peak = max(f.peak, n)
	return false
}

// releaseEvery is releaseOnFall's period: memory goes back within two
// periods of the load falling.
const releaseEvery = 5 * time.Second

// releaseOnFall gives memory back to the OS (debug.FreeOSMemory: a
// collection, then every free page) when the requests of a period fall
// below a quarter of the busiest recent one, until ctx ends.
func releaseOnFall(ctx context.Context, requests func() int64, log *slog.Logger) {
	t := time.NewTicker(releaseEvery)
	defer t.Stop()
	var f fallDetector
	last := requests()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := requests()
		if f.step(now - last) {
			debug.FreeOSMemory()
			log.Debug("load fell: memory given back to the OS", "requests_in_period", now-last)
		}
		last = now
	}
}

// gcFromFile says which of the file's memory settings apply. GOGC and
// GOMEMLIMIT in the environment, which the runtime has applied already,
// win, as an operator expects of any Go program; a limit of 0 is none.
func gcFromFile(p config.Process, getenv func(string) string) (gcPercent, memoryLimit bool) {
	return getenv("GOGC") == "", getenv("GOMEMLIMIT") == "" && p.MemoryLimitBytes > 0
}

// ApplyGC applies the file's memory settings (process.gc_percent,
// process.memory_limit_bytes) to this process where the environment
// (getenv) does not set them, and logs what the runtime now runs with.
func ApplyGC(p config.Process, getenv func(string) string, log *slog.Logger) {
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
