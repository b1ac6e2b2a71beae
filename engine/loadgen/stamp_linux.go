//go:build linux

package loadgen

import (
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"time"
)

// stampConn is a TCP connection whose reads also learn when the kernel
// received the data they return (SO_TIMESTAMPNS). The generator's many
// connections share one process and, on a development machine, the
// server's cores: when a batch's answers all come at once, its goroutines
// read them one after another (Go's poller even wakes the readers of a
// burst in reverse order), so the time a response is read is later than
// the time it reached the client's socket by the generator's own
// scheduling. The socket's time is what independent clients would see.
// The kernel turns receive timestamps on for the whole system in deferred
// work once the first socket asks, so the first reads of a run may carry
// none: those responses count to their read, as without stamps.
type stampConn struct {
	net.Conn
	raw syscall.RawConn
	oob []byte
	// last is when the data of the latest read reached the socket, and
	// stamped counts the reads that carried a time.
	last    time.Time
	stamped uint64
}

// withStamps returns nc reading through a stampConn, or nc itself where
// the socket cannot report receive times.
func withStamps(nc net.Conn) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	})
	if err != nil || serr != nil {
		return nc
	}
	return &stampConn{Conn: nc, raw: raw, oob: make([]byte, syscall.CmsgSpace(16))}
}

// Read reads with recvmsg, waiting for data through Go's poller (so the
// connection's deadlines hold), and keeps the receive time it comes with.
func (c *stampConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n, oobn int
	var rerr error
	err := c.raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = syscall.Recvmsg(int(fd), p, c.oob, 0)
		return rerr != syscall.EAGAIN && rerr != syscall.EINTR
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	if n == 0 {
		return 0, io.EOF
	}
	if t, ok := receiveTime(c.oob[:oobn]); ok {
		c.last = t
		c.stamped++
	}
	return n, nil
}

// receiveTime finds the SCM_TIMESTAMPNS time in a recvmsg's control data.
func receiveTime(oob []byte) (time.Time, bool) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level != syscall.SOL_SOCKET || m.Header.Type != syscall.SCM_TIMESTAMPNS {
			continue
		}
		// A struct timespec: two longs, of the platform's word size.
		switch len(m.Data) {
		case 16:
			return time.Unix(int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:]))), true
		case 8:
			return time.Unix(int64(int32(binary.NativeEndian.Uint32(m.Data))), int64(int32(binary.NativeEndian.Uint32(m.Data[4:])))), true
		}
	}
	return time.Time{}, false
}

// receivedSince returns when the data of c's latest read reached the
// socket, if a read since the count stamped (from stamps) carried a time.
func receivedSince(nc net.Conn, stamped uint64) (time.Time, bool) {
	c, ok := nc.(*stampConn)
	if !ok || c.stamped == stamped {
		return time.Time{}, false
	}
	return c.last, true
}

// stamps is the count receivedSince compares with.
func stamps(nc net.Conn) uint64 {
	if c, ok := nc.(*stampConn); ok {
		return c.stamped
	}
	return 0
}
