//go:build !linux

package engine

import "time"

// processCPU is not measured outside Linux: 0.
func processCPU() time.Duration { return 0 }
