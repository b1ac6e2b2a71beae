//go:build !unix

package loadgen

import "time"

// selfCPU is not measured off Unix.
func selfCPU() time.Duration { return 0 }

// openFilesMax is unknown off Unix: 0.
func openFilesMax() int { return 0 }
