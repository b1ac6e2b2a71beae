//go:build linux

package fastlane

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// parker holds the kept-alive connections that waited a while for their
// next request (Config.ParkAfter) without a goroutine each: their sockets
// wait in an epoll set of the lane's own, whose descriptor waits in the
// runtime's poller, and a connection gets a goroutine again when its
// socket has something to read (or its client hung up).
//
// Why: an idle connection's goroutine is a stack the garbage collector
// scans at every cycle and a few KiB of memory that the socket itself
// does not need. With thousands of kept-alive connections (an open-loop
// client keeps one a request in flight) that made each cycle's mark
// several times longer, and the requests that allocate meanwhile wait in
// its assists (see BenchmarkGCIdleConns).
//
// A parked connection is in the set with EPOLLONESHOT: one readiness
// wakes it once, and parking it again re-arms it (one epoll_ctl). Each
// parking has an ID of its own as the event's data, never the descriptor,
// which the kernel reuses once the connection is closed.
type parker struct {
	f  *os.File // the epoll descriptor, in the runtime's poller
	rc syscall.RawConn
	fd int

	mu    sync.Mutex
	conns map[uint64]*conn // by parking ID (conn.parkID)

	events [128]syscall.EpollEvent // run's own
}

// parkEvents are what wakes a parked connection: a request's bytes, or
// the client's end (the read then sees it and the connection closes).
const parkEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

func newParker() (*parker, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("epoll set non-blocking: %w", err)
	}
	// Non-blocking, the descriptor goes into the runtime's poller, which
	// reports it readable when the set has a ready socket.
	f := os.NewFile(uintptr(fd), "fastlane-epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("epoll raw conn: %w", err)
	}
	// Only a descriptor in the poller takes a deadline: one that is not
	// would never wake a parked connection.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("epoll descriptor not in the runtime's poller: %w", err)
	}
	return &parker{f: f, rc: rc, fd: fd, conns: map[uint64]*conn{}}, nil
}

// add puts c in the table under c.parkID: its closer, which takes it
// out of the parked state under c.idleMu, finds it there to forget.
func (p *parker) add(c *conn) {
	p.mu.Lock()
	p.conns[c.parkID] = c
	p.mu.Unlock()
}

// arm adds c's socket to the set (c in the table already), and reports
// whether it is in. Once it is, the caller no longer touches c: wake may
// run at once.
func (p *parker) arm(c *conn) bool {
	id := c.parkID
	// Still in the table (its closer may have forgotten it), and what the
	// caller wrote to c before this comes before wake's reading it: run
	// takes the table's lock after the socket's event, which follows the
	// epoll_ctl below (an order the race detector cannot see through the
	// kernel).
	p.mu.Lock()
	_, ok := p.conns[id]
	p.mu.Unlock()
	if !ok {
		return false
	}
	if !p.ctl(c, id) {
		p.forget(c, id)
		return false
	}
	return true
}

// ctl adds c's socket to the set, armed for one event of parking id, or
// re-arms it there (EPOLL_CTL_MOD once it was added: c.inSet, which only
// spares the call that would fail).
func (p *parker) ctl(c *conn, id uint64) bool {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ev := syscall.EpollEvent{Events: parkEvents, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	op := syscall.EPOLL_CTL_MOD
	if !c.inSet {
		op = syscall.EPOLL_CTL_ADD
	}
	c.inSet = true // before: once in, c is wake's
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cerr = syscall.EpollCtl(p.fd, op, int(fd), &ev)
		switch {
		case errors.Is(cerr, syscall.EEXIST):
			cerr = syscall.EpollCtl(p.fd, syscall.EPOLL_CTL_MOD, int(fd), &ev)
		case errors.Is(cerr, syscall.ENOENT):
			cerr = syscall.EpollCtl(p.fd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
		}
	})
	return err == nil && cerr == nil
}

// forget drops parking id of c, if it is still c's.
func (p *parker) forget(c *conn, id uint64) {
	p.mu.Lock()
	if p.conns[id] == c {
		delete(p.conns, id)
	}
	p.mu.Unlock()
}

// parked is how many connections are in the set.
func (p *parker) parked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// run hands each connection whose socket is ready to wake, until close
// (nil) or a failure of the set: then it calls broken, after which none
// must be parked again, hands every connection still in the table to
// wake, and returns the failure.
func (p *parker) run(wake func(*conn), broken func()) error {
	err := p.loop(wake)
	if err == nil {
		return nil
	}
	broken()
	p.mu.Lock()
	left := make([]*conn, 0, len(p.conns))
	for id, c := range p.conns {
		left = append(left, c)
		delete(p.conns, id)
	}
	p.mu.Unlock()
	for _, c := range left {
		wake(c)
	}
	return err
}

func (p *parker) loop(wake func(*conn)) error {
	for {
		var n int
		var werr error
		err := p.rc.Read(func(fd uintptr) bool {
			n, werr = syscall.EpollWait(int(fd), p.events[:], 0)
			// Nothing ready: wait in the runtime's poller for the set to be.
			return !(n <= 0 && (werr == nil || errors.Is(werr, syscall.EAGAIN)))
		})
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("epoll wait: %w", err)
		}
		if werr != nil {
			if errors.Is(werr, syscall.EINTR) {
				continue
			}
			return fmt.Errorf("epoll_wait: %w", werr)
		}
		for _, ev := range p.events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			p.mu.Lock()
			c := p.conns[id]
			delete(p.conns, id)
			p.mu.Unlock()
			if c != nil {
				wake(c)
			}
		}
	}
}

// close ends run; a connection still in the set is its owner's to close.
func (p *parker) close() { _ = p.f.Close() }
