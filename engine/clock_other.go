//go:build !linux

package engine

import (
	"context"
	"time"
)

// pollUntil is yieldUntil: outside Linux there is no timer fd to wait on.
func pollUntil(ctx context.Context, t time.Time) error { return yieldUntil(ctx, t) }
