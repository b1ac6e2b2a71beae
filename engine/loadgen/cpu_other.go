//go:build !unix

package loadgen

import "time"

// selfCPU is not measured off Unix.
func selfCPU() time.Duration { return 0 }
