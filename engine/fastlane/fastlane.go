package fastlane

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config says which requests the lane serves, and its bounds.
type Config struct {
	// Fast reports whether a request of a plain head (parseHead) to
	// method and path is the lane's; the connection goes to net/http at
	// the first one that is not.
	Fast func(method, path string) bool
	// BodyMaxBytes bounds a body the lane reads; a larger one goes to
	// net/http. Default 64 KiB.
	BodyMaxBytes int
	// HeadMaxBytes bounds a head the lane reads; a longer one goes to
	// net/http (whose own bound, MaxHeaderBytes, then applies). Default
	// 8 KiB.
	HeadMaxBytes int
	// ParkAfter: a kept-alive connection that has waited this long for its
	// next request (up to twice as long) gives up its goroutine and read
	// buffer, and waits in the lane's epoll set until its client sends
	// (see parker; Linux only). 0: never.
	ParkAfter time.Duration
	// Logger gets a handler's panic; nil discards.
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.BodyMaxBytes <= 0 {
		c.BodyMaxBytes = 64 << 10
	}
	if c.HeadMaxBytes <= 0 {
		c.HeadMaxBytes = 8 << 10
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Server serves the connections of a listener: the lane's requests itself,
// and from the first other request on, the connection through srv.
type Server struct {
	srv *http.Server
	cfg Config
	ho  *handoff

	closing atomic.Bool // no new request is taken
	served  atomic.Int64
	handed  atomic.Int64

	mu    sync.Mutex
	conns map[*conn]struct{}
	ln    net.Listener
	wg    sync.WaitGroup

	// Parking (Config.ParkAfter): nil park when off. sweepGen counts the
	// sweeps, parkSeq the parkings; bufs are parked connections' read
	// buffers.
	park       *parker
	sweepGen   atomic.Uint64
	parkSeq    atomic.Uint64
	bufs       sync.Pool
	stopSweep  chan struct{}
	parkOnce   sync.Once
	parkBroken atomic.Bool // the set failed: no connection parks
}

// New returns a lane in front of srv, whose Handler serves the lane's
// requests too and whose ReadHeaderTimeout and IdleTimeout it keeps.
func New(srv *http.Server, cfg Config) *Server {
	cfg.defaults()
	return &Server{srv: srv, cfg: cfg, conns: map[*conn]struct{}{}}
}

// Serve accepts connections on ln until Shutdown or Close (then it
// returns http.ErrServerClosed) or until ln fails.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(s.Listen(ln))
}

// Listen accepts connections on ln, serves the lane's requests, and
// returns the listener of the connections handed to net/http: serve it
// with the lane's http.Server (Serve does). Closing that listener (as the
// http.Server's Shutdown and Close do) stops the lane from accepting and
// closes its idle connections; Shutdown also waits for the busy ones.
func (s *Server) Listen(ln net.Listener) net.Listener {
	s.mu.Lock()
	s.ln = ln
	s.ho = newHandoff(ln.Addr(), s.stopAccepting)
	if s.cfg.ParkAfter > 0 && s.park == nil {
		p, err := newParker()
		if err != nil {
			s.cfg.Logger.Warn("fastlane: idle connections keep their goroutines", "err", err)
		} else {
			s.park, s.stopSweep = p, make(chan struct{})
			go func() {
				// On a failure of the set no connection parks again, and
				// the parked ones are woken.
				if err := p.run(s.wake, func() { s.parkBroken.Store(true) }); err != nil {
					s.cfg.Logger.Error("fastlane: parking stopped", "err", err)
				}
			}()
			go s.sweep(s.cfg.ParkAfter, s.stopSweep)
		}
	}
	s.mu.Unlock()
	go s.accept(ln)
	return s.ho
}

// accept accepts on ln until it is closed or fails; a failure ends the
// handoff listener's Accept with it.
func (s *Server) accept(ln net.Listener) {
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff) // as net/http's own accept loop
				continue
			}
			s.ho.fail(err)
			return
		}
		backoff = 0
		c := s.track(nc)
		if c == nil {
			_ = nc.Close()
			continue
		}
		go c.serve()
	}
}

// stopAccepting closes the listener and the idle connections: the lane
// takes no new request.
func (s *Server) stopAccepting() {
	s.mu.Lock()
	// Before the connections are looked at: one that would park after
	// sees it, and parks no more (conn.endIdle).
	s.closing.Store(true)
	ln := s.ln
	if s.stopSweep != nil {
		s.parkOnce.Do(func() { close(s.stopSweep) })
	}
	s.mu.Unlock()
	s.closeConns(false)
	if ln != nil {
		_ = ln.Close()
	}
}

// Served is the requests the lane has served itself; HandedOff the
// connections it gave net/http.
func (s *Server) Served() int64 { return s.served.Load() }

// HandedOff: see Served.
func (s *Server) HandedOff() int64 { return s.handed.Load() }

func (s *Server) isClosing() bool { return s.closing.Load() }

// track adds a connection, nil when the server is closing.
func (s *Server) track(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return nil
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return c
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// Shutdown stops as http.Server.Shutdown does: no new connections, idle
// ones closed, each busy one closed once its request is answered, and the
// connections net/http serves stopped by its Shutdown; when ctx ends
// first, the rest are cut off and ctx's error returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopAccepting()
	err := s.srv.Shutdown(ctx)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.closeAll()
		<-done
		if err == nil {
			err = ctx.Err()
		}
	}
	s.closePark()
	return err
}

// Close closes the listener and every connection at once.
func (s *Server) Close() error {
	s.stopAccepting()
	err := s.srv.Close()
	s.closeAll()
	s.wg.Wait()
	s.closePark()
	return err
}

func (s *Server) closeAll() { s.closeConns(true) }

// closeConns closes the idle connections (every one, with all), and
// finishes the parked ones outside the server's lock (finishParked
// untracks them).
func (s *Server) closeConns(all bool) {
	s.mu.Lock()
	var parked []*conn
	for c := range s.conns {
		if c.closeIfIdle(all) {
			parked = append(parked, c)
		}
	}
	s.mu.Unlock()
	for _, c := range parked {
		s.finishParked(c)
	}
}

// closePark ends the parker, once every connection is gone.
func (s *Server) closePark() {
	s.mu.Lock()
	p := s.park
	s.mu.Unlock()
	if p != nil {
		p.close()
	}
}

// Parkings is how many times a connection was parked.
func (s *Server) Parkings() int64 { return int64(s.parkSeq.Load()) }

// Parked is how many connections are parked now (Config.ParkAfter).
func (s *Server) Parked() int {
	s.mu.Lock()
	p := s.park
	s.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.parked()
}

// sweep, every interval until stop, asks the connections idle since
// before the last sweep to park (their read is woken by a deadline in
// the past, see conn.endIdle), and closes the parked ones idle past the
// server's IdleTimeout, which no read deadline bounds while parked.
func (s *Server) sweep(interval time.Duration, stop chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			gen := s.sweepGen.Add(1)
			idle := s.srv.IdleTimeout
			var expired []*conn
			s.mu.Lock()
			for c := range s.conns {
				c.idleMu.Lock()
				switch {
				case c.parked && idle > 0 && now.Sub(c.idleAt) >= idle:
					c.parked = false
					expired = append(expired, c)
				case c.idle && c.parkable && !c.parked && !c.parkReq && c.idleGen+1 < gen:
					c.parkReq = true
					_ = c.nc.SetReadDeadline(aLongTimeAgo)
				}
				c.idleMu.Unlock()
			}
			s.mu.Unlock()
			for _, c := range expired {
				s.finishParked(c)
			}
		}
	}
}

// wake serves a parked connection whose socket is ready on a goroutine
// again, unless its closer took it first.
func (s *Server) wake(c *conn) {
	c.idleMu.Lock()
	mine := c.parked
	c.parked = false
	c.idleMu.Unlock()
	if mine {
		go c.resume()
	}
}

// finishParked closes a connection taken out of the parked state by its
// closer (closeIfIdle, the sweep's idle bound).
func (s *Server) finishParked(c *conn) {
	s.park.forget(c, c.parkID)
	_ = c.nc.Close()
	c.cancel()
	s.untrack(c)
}

// getBuf is a read buffer of bufInitial bytes, putBuf gives one back.
func (s *Server) getBuf() []byte {
	if b, ok := s.bufs.Get().(*[bufInitial]byte); ok {
		return b[:]
	}
	return make([]byte, bufInitial)
}

func (s *Server) putBuf(b []byte) {
	s.bufs.Put((*[bufInitial]byte)(b))
}

// handoff is the listener net/http serves: it accepts the connections the
// lane gives it.
type handoff struct {
	addr   net.Addr
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	closed func() // the lane stops accepting
	err    error  // the lane's listener's failure, set before done closes
}

func newHandoff(addr net.Addr, closed func()) *handoff {
	return &handoff{addr: addr, conns: make(chan net.Conn), done: make(chan struct{}), closed: closed}
}

// Accept implements net.Listener.
func (l *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener; the lane stops accepting too.
func (l *handoff) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.closed()
	})
	return nil
}

// fail ends Accept with the lane's listener's error.
func (l *handoff) fail(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}

// Addr implements net.Listener.
func (l *handoff) Addr() net.Addr { return l.addr }

// give hands c to net/http, and reports false when it serves no more.
func (l *handoff) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// prefixConn is a connection some of whose bytes the lane read already.
type prefixConn struct {
	net.Conn
	pre []byte
}

// CloseWrite shuts the connection's writing side, as net/http does
// before it closes one it refused a request on (so that the client reads
// the refusal rather than a reset).
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Read implements net.Conn.
func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
