package loadgen

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The generator's HTTP client. It shares the machine with the server it
// measures, so its cost per request is part of every figure: net/http's
// client spent ~120 µs of CPU per request on the development VM (a
// connection's read and write loops are two goroutines, and every request
// hands off between them and the caller), enough to delay the generator's
// own sends and reads whenever a batch's 50 answers arrived at once.
// Here each sender (an open-loop worker, a closed-loop connection) owns one
// keep-alive connection and writes and reads it on its own goroutine;
// fasthttp only encodes the request and parses the response (HTTP/1.1
// framing is not ours to write).

// conns is the senders' connections, so that a cut run can end the
// exchanges in flight at once.
type conns struct {
	// dials counts the connections made.
	dials atomic.Int64
	mu    sync.Mutex
	set   map[*conn]struct{}
	cut   bool
	addr  string
	tls   *tls.Config // nil for http
}

// conn is one sender's connection; nil c means not (or no longer) dialled.
type conn struct {
	owner *conns
	c     net.Conn
	// tcp is the TCP connection under c (c itself without TLS), reading
	// with receive times where it can (withStamps).
	tcp net.Conn
	r   *bufio.Reader
	w   *bufio.Writer
}

func newConns(addr string, tlsConf *tls.Config) *conns {
	return &conns{set: map[*conn]struct{}{}, addr: addr, tls: tlsConf}
}

// open returns a sender's connection, not yet dialled.
func (cs *conns) open() *conn {
	c := &conn{owner: cs}
	cs.mu.Lock()
	cs.set[c] = struct{}{}
	cs.mu.Unlock()
	return c
}

// cutAll ends every exchange in flight (their reads and writes fail as
// timed out) and every later one.
func (cs *conns) cutAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.cut = true
	for c := range cs.set {
		if c.c != nil {
			_ = c.c.SetDeadline(time.Unix(1, 0))
		}
	}
}

// dial connects c, unless the run was cut.
func (c *conn) dial() error {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	nc, err := d.Dial("tcp", c.owner.addr)
	if err != nil {
		return err
	}
	c.owner.dials.Add(1)
	nc = withStamps(nc)
	tcp := nc
	if c.owner.tls != nil {
		nc = tls.Client(nc, c.owner.tls)
	}
	c.owner.mu.Lock()
	defer c.owner.mu.Unlock()
	if c.owner.cut {
		nc.Close()
		return errCut
	}
	c.c, c.tcp, c.r, c.w = nc, tcp, bufio.NewReaderSize(nc, 4096), bufio.NewWriterSize(nc, 4096)
	return nil
}

// close closes c's connection and forgets c.
func (c *conn) close() {
	c.owner.mu.Lock()
	defer c.owner.mu.Unlock()
	c.closeLocked()
	delete(c.owner.set, c)
}

// drop closes the connection, if any, for the next exchange to dial anew.
func (c *conn) drop() {
	c.owner.mu.Lock()
	defer c.owner.mu.Unlock()
	c.closeLocked()
}

func (c *conn) closeLocked() {
	if c.c != nil {
		c.c.Close()
		c.c, c.tcp, c.r, c.w = nil, nil, nil, nil
	}
}

// errCut is what an exchange of a run cut short fails with.
var errCut = fmt.Errorf("load: run cut short: %w", net.ErrClosed)

// arm sets the deadline of c's exchange, unless the run was cut (which
// a deadline set after cutAll would undo).
func (c *conn) arm(deadline time.Time) error {
	c.owner.mu.Lock()
	defer c.owner.mu.Unlock()
	if c.owner.cut {
		return errCut
	}
	return c.c.SetDeadline(deadline)
}

// exchange sends req and reads its response into resp, by deadline, on a
// kept connection (dialled first if need be). A failed exchange, or a
// response that says "Connection: close", leaves the connection closed.
// arrived is when the response's last data reached the client's socket,
// or zero where the socket does not say (see stampConn).
func (c *conn) exchange(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) (arrived time.Time, err error) {
	if c.c == nil {
		if err := c.dial(); err != nil {
			return time.Time{}, err
		}
	}
	tcp := c.tcp
	stamped := stamps(tcp)
	err = c.arm(deadline)
	if err == nil {
		err = req.Write(c.w)
	}
	if err == nil {
		err = c.w.Flush()
	}
	if err == nil {
		err = resp.ReadLimitBody(c.r, responseMaxBytes)
	}
	if err == nil {
		// Each exchange waits for its answer before the next request, so
		// the reads since the request went out are this response's.
		arrived, _ = receivedSince(tcp, stamped)
	}
	if err != nil || resp.ConnectionClose() {
		c.drop()
	}
	if err != nil {
		if c.owner.wasCut() {
			err = errCut // not the deadline cutAll set
		}
		return time.Time{}, fmt.Errorf("%s %s: %w", http.MethodPost, req.URI(), err)
	}
	return arrived, nil
}

func (cs *conns) wasCut() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.cut
}
