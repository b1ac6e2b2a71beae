//go:build !linux

package loadgen

import (
	"net"
	"time"
)

// withStamps returns nc: receive times are read on Linux only.
func withStamps(nc net.Conn) net.Conn { return nc }

// receivedSince reports no receive time off Linux.
func receivedSince(net.Conn, uint64) (time.Time, bool) { return time.Time{}, false }

// stamps is always 0 off Linux.
func stamps(net.Conn) uint64 { return 0 }
