package fastlane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one connection the lane serves, on one goroutine.
type conn struct {
	s      *Server
	nc     net.Conn
	remote string
	ctx    context.Context
	cancel context.CancelFunc
	blank  *http.Request // no fields but the context
	// req, url and heads are the request being served, reused from one
	// request to the next: the handler keeps none of them once it has
	// returned (it waits for the engine's answer in Await).
	req   http.Request
	url   url.URL
	heads headStore

	buf  []byte // buf[r:w] is read and not consumed
	r, w int
	kept bool      // it has served a request: between requests, the idle bound applies
	rdl  time.Time // nc's read deadline
	wdl  time.Time // nc's write deadline
	resp response
	body bodyReader
	out  []byte
	keys []string

	// idleMu keeps the idle state, against Shutdown and the sweep that
	// parks connections (Config.ParkAfter).
	idleMu sync.Mutex
	idle   bool // waits for a request's first byte
	// parkable: idle between requests (kept), so it may be parked;
	// idleGen and idleAt are the sweep and the time it went idle.
	parkable bool
	idleGen  uint64
	idleAt   time.Time
	// parkReq: the sweep asks it to park, and woke its read with a
	// deadline in the past. parked: its socket waits in the parker's set
	// and no goroutine serves it; parkID names that parking there.
	parkReq bool
	parked  bool
	parkID  uint64
	inSet   bool // its socket was added to the parker's set once

	// The wait for a reply (await): done, on the engine's goroutine,
	// ends the read the connection watches its client with by a
	// deadline in the past, or sends on wake when it is not reading.
	amu      sync.Mutex
	replied  bool
	watching bool
	wake     chan struct{}
	doneFn   func()
}

// bufInitial is a connection's first read buffer; a larger request grows
// it, and past bufKeptMax it goes back to this size between requests.
const (
	bufInitial = 4 << 10
	bufKeptMax = 16 << 10
)

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String(), buf: make([]byte, bufInitial), wake: make(chan struct{}, 1)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.blank = (&http.Request{}).WithContext(c.ctx)
	c.doneFn = c.done
	return c
}

// serve serves the connection's requests until it closes, goes to
// net/http, or is parked (resume serves it on).
func (c *conn) serve() {
	handedOff, parked := false, false
	defer func() {
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.s.cfg.Logger.Error("fastlane: handler panic", "remote", c.remote, "panic", fmt.Sprint(p), "stack", string(buf))
		} else if parked {
			return // the parker's, or its closer's, now
		}
		c.cancel()
		if !handedOff {
			_ = c.nc.Close()
		}
		c.s.untrack(c)
	}()
	for {
		n := c.readHead()
		if n == headParked {
			parked = true
			return
		}
		if n == 0 {
			return
		}
		var h head
		ok := n > 0
		if ok {
			h, ok = parseHeadInto(c.buf[c.r:c.r+n], c.s.cfg.BodyMaxBytes, &c.heads)
		}
		if !ok || !c.s.cfg.Fast(h.method, h.target) {
			handedOff = c.handOff()
			return
		}
		if !c.readBody(n + h.contentLength) {
			// The body did not come in time, or the client ended its
			// side: net/http answers that (400, 408) as it would have.
			handedOff = c.handOff()
			return
		}
		if !c.serveOne(&h, n) {
			return
		}
	}
}

// headParked is readHead's answer for a connection it parked.
const headParked = -2

// readHead waits for a whole head at buf[r:] and returns its length (the
// blank line's included); 0 when the connection is to close (the client
// closed it, a timeout, an error, a shutdown), -1 when the head is too
// long for the lane, headParked when it parked the connection (see
// parker): the goroutine then ends and no longer touches c.
func (c *conn) readHead() int {
	headerDeadline := false
	for {
		if i := bytes.Index(c.buf[c.r:c.w], crlf2); i >= 0 {
			return i + len(crlf2)
		}
		if c.w-c.r >= c.s.cfg.HeadMaxBytes {
			return -1
		}
		now := time.Now()
		if c.r == c.w {
			// Between requests: the idle bound, set anew only when
			// half of it is gone (a deadline is a runtime timer).
			c.r, c.w = 0, 0
			if len(c.buf) > bufKeptMax {
				c.buf = make([]byte, bufInitial) // a large body's, given back
			}
			switch idle := c.s.srv.IdleTimeout; {
			case !c.kept:
				// A new connection's first request is due within the
				// head's bound, as net/http has it: a client that
				// connects and sends nothing is not kept for the
				// idle bound.
				if hd := c.s.srv.ReadHeaderTimeout; hd > 0 {
					c.setReadDeadline(now.Add(hd))
					headerDeadline = true
				}
			case idle > 0 && (c.rdl.IsZero() || c.rdl.Before(now.Add(idle/2))):
				c.setReadDeadline(now.Add(idle))
			case idle <= 0 && !c.rdl.IsZero():
				// No idle bound: none of the deadlines the last request
				// left (Await's end, a parking's wake).
				c.setReadDeadline(time.Time{})
			}
			if !c.setIdle(now) {
				return 0
			}
		} else if hd := c.s.srv.ReadHeaderTimeout; hd > 0 && !headerDeadline {
			headerDeadline = true
			c.setReadDeadline(now.Add(hd))
		}
		if c.w == len(c.buf) {
			c.room(min(2*(c.w-c.r), c.s.cfg.HeadMaxBytes))
		}
		n, err := c.nc.Read(c.buf[c.w:])
		c.w += n
		if c.idle {
			// A stopping server answers what came, and closes.
			switch c.endIdle(n == 0 && errors.Is(err, os.ErrDeadlineExceeded)) {
			case idleParked:
				return headParked
			case idleReadOn:
				continue // the sweep's wake, and no parking after all
			}
		}
		if err != nil && n == 0 {
			return 0
		}
	}
}

// setIdle marks the connection waiting for a request since now, and
// reports false when it is to close (the server is stopping).
func (c *conn) setIdle(now time.Time) bool {
	c.idleMu.Lock()
	defer c.idleMu.Unlock()
	c.idle, c.parkable, c.idleAt = true, c.kept, now
	c.idleGen = c.s.sweepGen.Load()
	return !c.s.isClosing()
}

// What endIdle did.
const (
	idleServe  = iota // the read's result stands
	idleParked        // parked: the goroutine ends
	idleReadOn        // the read was the sweep's wake: read again
)

// endIdle ends the idle wait after a read: woken by the sweep (parkReq)
// with nothing read (woke), the connection parks; woken but not parking
// (bytes came, the server stops, the set refused it), its read deadline
// is put back as it was.
func (c *conn) endIdle(woke bool) int {
	c.idleMu.Lock()
	c.idle = false
	req := c.parkReq
	c.parkReq = false
	park := req && woke && c.r == c.w && c.s.park != nil && !c.s.parkBroken.Load() && !c.s.isClosing()
	if park {
		// Still idle to Shutdown's eyes: it closes a parked connection.
		c.idle, c.parked = true, true
		c.parkID = c.s.parkSeq.Add(1)
		c.s.park.add(c)
	}
	c.idleMu.Unlock()
	if park {
		c.release()
		c.rdl = aLongTimeAgo // the sweep's: resume sets it anew
		if c.s.park.arm(c) {
			return idleParked
		}
		c.idleMu.Lock()
		mine := c.parked
		c.parked = false
		c.idleMu.Unlock()
		if !mine {
			return idleParked // closed meanwhile by Shutdown: its closer's
		}
		// Not parked after all: readHead sets the idle deadline anew
		// (rdl says the socket's is past).
		c.buf = c.s.getBuf()
		return idleReadOn
	}
	if !req {
		return idleServe
	}
	// Put back the read deadline the sweep's wake replaced: the one this
	// goroutine set last (an idle connection's rdl is never a past one:
	// readHead renews that before it waits).
	_ = c.nc.SetReadDeadline(c.rdl)
	if woke {
		return idleReadOn
	}
	return idleServe
}

// resume serves a parked connection on, in a goroutine of its own, once
// its socket is ready (the parker's wake). Its read deadline is the
// sweep's, in the past (rdl says so): readHead sets the idle one anew.
func (c *conn) resume() {
	c.buf = c.s.getBuf()
	c.r, c.w = 0, 0
	c.serve()
}

// release gives a parked connection's read buffer back, and drops what
// it kept of its last request and response (the head's field map and
// values, the response's fields, body and bytes): the next request makes
// them anew, as a new connection's first does.
func (c *conn) release() {
	if len(c.buf) == bufInitial {
		c.s.putBuf(c.buf)
	}
	c.buf, c.r, c.w = nil, 0, 0
	c.req, c.url, c.heads = http.Request{}, url.URL{}, headStore{}
	c.resp.hdr, c.resp.body, c.out, c.keys = nil, nil, nil, nil
}

// closeIfIdle closes the connection if it waits for a request (any, with
// all), and reports whether it was parked: then the caller, its closer,
// must finish it (Server.finishParked) outside the server's lock.
func (c *conn) closeIfIdle(all bool) (parked bool) {
	c.idleMu.Lock()
	defer c.idleMu.Unlock()
	if c.parked {
		c.parked = false
		return true
	}
	if c.idle || all {
		_ = c.nc.Close()
	}
	return false
}

// room makes room in buf for n bytes from r on (moving them to its
// start, or into a larger buffer).
func (c *conn) room(n int) {
	if c.r+n <= len(c.buf) && c.w < len(c.buf) {
		return
	}
	if n <= len(c.buf) {
		c.w = copy(c.buf, c.buf[c.r:c.w])
		c.r = 0
		return
	}
	b := make([]byte, n)
	c.w = copy(b, c.buf[c.r:c.w])
	c.r, c.buf = 0, b
}

// readBody waits until buf[r:] holds n bytes (a head and its body),
// within the server's ReadHeaderTimeout.
func (c *conn) readBody(n int) bool {
	if c.w-c.r >= n {
		return true
	}
	c.room(n)
	if hd := c.s.srv.ReadHeaderTimeout; hd > 0 {
		c.setReadDeadline(time.Now().Add(hd))
	}
	for c.w-c.r < n {
		m, err := c.nc.Read(c.buf[c.w:])
		c.w += m
		if err != nil && c.w-c.r < n {
			return false
		}
	}
	return true
}

func (c *conn) setReadDeadline(t time.Time) {
	if err := c.nc.SetReadDeadline(t); err == nil {
		c.rdl = t
	}
}

// handOff gives the connection, with what it read of its next request,
// to net/http, and reports whether it took it.
func (c *conn) handOff() bool {
	// net/http sets the read deadlines it needs, and without a
	// WriteTimeout no write deadline: the lane's must not outlive it.
	_ = c.nc.SetReadDeadline(time.Time{})
	_ = c.nc.SetWriteDeadline(time.Time{})
	pc := &prefixConn{Conn: c.nc, pre: slices.Clone(c.buf[c.r:c.w])}
	if !c.s.ho.give(pc) {
		return false
	}
	c.s.handed.Add(1)
	return true
}

// serveOne runs the request whose head (n bytes) and body are at buf[r:],
// writes its response, and reports whether the connection serves on.
func (c *conn) serveOne(h *head, n int) bool {
	// A copy of the connection's blank request, which holds its
	// context, in the connection's own: no allocation, where
	// WithContext would be two.
	req := &c.req
	*req = *c.blank
	c.url = url.URL{Path: h.target}
	req.Method, req.URL, req.RequestURI = h.method, &c.url, h.target
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/1.1", 1, 1
	req.Header, req.Host, req.RemoteAddr = h.header, h.host, c.remote
	req.ContentLength, req.Close, req.Body = int64(h.contentLength), h.close, http.NoBody
	if h.contentLength > 0 {
		c.body.b = c.buf[c.r+n : c.r+n+h.contentLength]
		req.Body = &c.body
	}
	w := &c.resp
	w.reset(c)
	c.s.srv.Handler.ServeHTTP(w, req)
	c.s.served.Add(1)
	c.kept = true
	c.body.b = nil
	c.r += n + h.contentLength
	keep := !h.close && !c.s.isClosing() && !slices.ContainsFunc(w.hdr["Connection"], closes)
	return c.write(w, keep) && keep
}

// closes reports whether a Connection value is close.
func closes(v string) bool { return strings.EqualFold(v, "close") }

// write writes w's response in one call, and reports whether it went.
func (c *conn) write(w *response, keep bool) bool {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	b := c.out[:0]
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	if text := http.StatusText(status); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(status), 10)
	}
	b = append(b, "\r\n"...)
	noBody := status < 200 || status == http.StatusNoContent || status == http.StatusNotModified
	keys := c.keys[:0]
	for k := range w.hdr {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "Connection" || (noBody && k == "Content-Length") {
			continue // the lane's to say
		}
		for _, v := range w.hdr[k] {
			b = append(b, k...)
			b = append(b, ": "...)
			b = appendFieldValue(b, v)
			b = append(b, "\r\n"...)
		}
	}
	c.keys = keys[:0]
	if _, ok := w.hdr["Date"]; !ok {
		b = append(b, "Date: "...)
		b = append(b, httpDate()...)
		b = append(b, "\r\n"...)
	}
	if !noBody {
		if _, ok := w.hdr["Content-Length"]; !ok {
			b = append(b, "Content-Length: "...)
			b = strconv.AppendInt(b, int64(len(w.body)), 10)
			b = append(b, "\r\n"...)
		}
		if _, ok := w.hdr["Content-Type"]; !ok && len(w.body) > 0 {
			b = append(b, "Content-Type: "...)
			b = append(b, http.DetectContentType(w.body)...)
			b = append(b, "\r\n"...)
		}
	}
	if !keep {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	if !noBody {
		b = append(b, w.body...)
	}
	c.out = b
	if len(c.out) > 64<<10 {
		defer func() { c.out = nil }() // not kept: a large answer is rare
	}
	if w.wdl.IsZero() {
		if !c.wdl.IsZero() {
			if c.nc.SetWriteDeadline(time.Time{}) == nil {
				c.wdl = time.Time{}
			}
		}
	} else if now := time.Now(); c.wdl.IsZero() || w.wdl.Before(c.wdl) || c.wdl.Sub(now) < w.wdl.Sub(now)/2 {
		// Set anew only when the one set leaves less than half the
		// window asked for: a response is then bounded by half to all of
		// it.
		if c.nc.SetWriteDeadline(w.wdl) == nil {
			c.wdl = w.wdl
		}
	}
	_, err := c.nc.Write(b)
	return err == nil
}

// appendFieldValue appends v with CR and LF as spaces (as net/http
// writes a field).
func appendFieldValue(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return b
}

// await runs a request through submit and waits for done, watching the
// client meanwhile: when it goes (the connection ends), cancel withdraws
// the request. Reports whether it did.
func (c *conn) await(submit func(done func()), cancel func() bool) (gone bool) {
	select {
	case <-c.wake: // a wake left by the last wait
	default:
	}
	c.amu.Lock()
	c.replied, c.watching = false, false
	c.amu.Unlock()
	submit(c.doneFn)
	peerDone := false
	for {
		c.amu.Lock()
		if c.replied {
			c.amu.Unlock()
			return false
		}
		// Read on (a client may send its next request at once) while
		// the buffer has room; else wait on wake alone.
		c.watching = !peerDone && c.w < len(c.buf)
		watching := c.watching
		c.amu.Unlock()
		if !watching {
			<-c.wake
			continue
		}
		n, err := c.nc.Read(c.buf[c.w:])
		c.w += n
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			// done's deadline, or the idle one passed during a long
			// wait: then watch on without one.
			c.amu.Lock()
			if !c.replied {
				c.setReadDeadline(time.Time{})
			}
			c.amu.Unlock()
		default:
			// The client went (or closed its side: net/http takes
			// that as going, too).
			peerDone = true
			if cancel() {
				return true
			}
		}
	}
}

// done is the end of a wait; it runs on the engine's goroutine.
func (c *conn) done() {
	c.amu.Lock()
	c.replied = true
	watching := c.watching
	if watching {
		c.setReadDeadline(aLongTimeAgo)
	}
	c.amu.Unlock()
	if !watching {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// aLongTimeAgo is a deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

// response is the lane's http.ResponseWriter: the whole response is
// written at once after the handler returns.
type response struct {
	c      *conn
	hdr    http.Header
	status int
	body   []byte
	wdl    time.Time
}

func (w *response) reset(c *conn) {
	w.c, w.status, w.wdl = c, 0, time.Time{}
	if w.hdr == nil {
		w.hdr = make(http.Header, 4)
	} else {
		clear(w.hdr)
	}
	if cap(w.body) > 64<<10 {
		w.body = nil
	}
	w.body = w.body[:0]
}

// Header implements http.ResponseWriter.
func (w *response) Header() http.Header { return w.hdr }

// WriteHeader implements http.ResponseWriter.
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.status == 0 {
		w.status = code
	}
}

// Write implements http.ResponseWriter.
func (w *response) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// SetWriteDeadline bounds the response's write (http.ResponseController).
func (w *response) SetWriteDeadline(t time.Time) error {
	w.wdl = t
	return nil
}

// SetReadDeadline does nothing: the body is read before the handler runs
// (http.ResponseController).
func (w *response) SetReadDeadline(time.Time) error { return nil }

// Await is conn.await: the wait for the engine's answer, watching the
// client (see the package doc).
func (w *response) Await(submit func(done func()), cancel func() bool) bool {
	return w.c.await(submit, cancel)
}

// bodyReader is a request's body, read already.
type bodyReader struct{ b []byte }

func (r *bodyReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func (r *bodyReader) Close() error { return nil }

// httpDate is the Date field's value now, made once a second.
func httpDate() string {
	now := time.Now()
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.s
	}
	d := &cachedDate{sec: sec, s: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}

type cachedDate struct {
	sec int64
	s   string
}

var dateCache atomic.Pointer[cachedDate]
