//go:build !linux

package engine

import (
	"context"
	"time"
)

// kernelSleep sleeps until t on a Go timer: outside Linux the lateness of
// Go's timers is not worked around.
func kernelSleep(t time.Time) { time.Sleep(time.Until(t)) }

// pollUntil is yieldUntil: outside Linux there is no timer fd to wait on.
func pollUntil(ctx context.Context, t time.Time) error { return yieldUntil(ctx, t) }
