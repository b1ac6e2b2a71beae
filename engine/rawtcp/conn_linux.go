package rawtcp

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// rawConn is an accepted TCP connection whose reads and writes are raw
// system calls (syscall.RawSyscall), made from inside the connection's
// syscall.RawConn, so they wait in the runtime's network poller as
// net.TCPConn's do, and keep its deadlines and Close.
//
// Why: the socket is non-blocking, so neither call can block, and the
// runtime need not be told of them. A call it is told of after an idle
// spell wakes its monitor thread (sysmon) from its deep sleep, and sysmon
// then ticks every 20 µs for a while. A server between requests is idle,
// so that is once a request: with the server pinned to one core, about
// 17 µs of CPU a request went to sysmon, a third of a plain net/http
// server's whole cost (perf sched_switch: the first read or write after
// an idle spell woke sysmon 0.94 times a request at 2,000 req/s).
//
// Everything else (deadlines, Close, addresses, keep-alive, ReadFrom)
// is the embedded net.TCPConn's.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn

	// A call's arguments and results live here, not in a closure (which
	// would be allocated each call); rmu and wmu keep concurrent calls of
	// one direction apart, as the poller's own locks do for TCPConn.
	rmu     sync.Mutex
	rbuf    []byte
	rn      int
	rerrno  syscall.Errno
	readFn  func(uintptr) bool
	wmu     sync.Mutex
	wbuf    []byte
	wn      int
	werrno  syscall.Errno
	writeFn func(uintptr) bool
}

// rawIOMax bounds one call's bytes, as the runtime's poller does (1 GiB).
const rawIOMax = 1 << 30

// eintrMax bounds the retries of a call interrupted by a signal; a
// non-blocking socket's call is not interrupted in practice.
const eintrMax = 16

// Wrap returns c with raw reads and writes when it is a TCP connection,
// else c itself. Under the race detector it is c itself too: package
// syscall's reads and writes tell the detector that a write to any
// descriptor comes before a read that follows it (one process's client
// and server talk through the kernel in tests), and raw calls would not,
// so a test's client and server would seem to race.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || raceBuild {
		return c
	}
	if r, err := newRawConn(tc); err == nil {
		return r
	}
	return c
}

func newRawConn(tc *net.TCPConn) (*rawConn, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &rawConn{TCPConn: tc, rc: rc}
	r.readFn, r.writeFn = r.readOnce, r.writeAll
	return r, nil
}

// Read implements net.Conn.
func (c *rawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rbuf, c.rn, c.rerrno = b[:min(len(b), rawIOMax)], 0, 0
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerrno
	c.rbuf = nil
	if err := c.callError("read", err, errno); err != nil {
		return n, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// readOnce reads what has arrived, or reports none (false: wait).
func (c *rawConn) readOnce(fd uintptr) bool {
	for range eintrMax {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rbuf[0])), uintptr(len(c.rbuf)))
		switch e {
		case 0:
			c.rn = int(r)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerrno = e
		return true
	}
	c.rerrno = syscall.EINTR
	return true
}

// Write implements net.Conn: all of b is written, or an error says why
// not.
func (c *rawConn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf, c.wn, c.werrno = b, 0, 0
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werrno
	c.wbuf = nil
	return n, c.callError("write", err, errno)
}

// writeAll writes as much of the rest as the socket takes, and reports
// whether it is done (false: wait until it takes more).
func (c *rawConn) writeAll(fd uintptr) bool {
	for tries := 0; c.wn < len(c.wbuf); {
		rest := c.wbuf[c.wn:]
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(min(len(rest), rawIOMax)))
		switch e {
		case 0:
			c.wn += int(r)
			tries = 0
			continue
		case syscall.EINTR:
			if tries++; tries < eintrMax {
				continue
			}
		case syscall.EAGAIN:
			return false
		}
		c.werrno = e
		return true
	}
	return true
}

// callError is a call's error as TCPConn's would be (net/http looks at
// the operation and at Timeout): the RawConn's, its own wrapping taken
// off, or the system call's; nil when there is neither.
func (c *rawConn) callError(op string, err error, errno syscall.Errno) error {
	switch {
	case err != nil:
		if oe, ok := errors.AsType[*net.OpError](err); ok {
			err = oe.Err
		}
	case errno != 0:
		err = os.NewSyscallError(op, errno)
	default:
		return nil
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
