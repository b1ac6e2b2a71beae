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

	closing atomic.Bool

	mu    sync.Mutex
	conns map[*conn]struct{}
	ln    net.Listener
	wg    sync.WaitGroup
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
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.ho = newHandoff(ln.Addr())
	s.mu.Unlock()
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ho) }()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				<-served
				return http.ErrServerClosed
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff) // as net/http's own accept loop (EMFILE)
				continue
			}
			_ = s.srv.Close()
			<-served
			return err
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
	s.mu.Lock()
	s.closing.Store(true)
	ln := s.ln
	for c := range s.conns {
		c.closeIfIdle()
	}
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
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
	return err
}

// Close closes the listener and every connection at once.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closing.Store(true)
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	err := s.srv.Close()
	s.closeAll()
	s.wg.Wait()
	return err
}

func (s *Server) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
}

// handoff is the listener net/http serves: it accepts the connections the
// lane gives it.
type handoff struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoff(addr net.Addr) *handoff {
	return &handoff{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *handoff) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
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

// Read implements net.Conn.
func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
