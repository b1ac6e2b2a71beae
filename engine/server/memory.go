package server

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"
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
