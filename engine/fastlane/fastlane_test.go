package fastlane

import (
	"bufio"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
)

const waitMax = 10 * time.Second

func TestParseHead(t *testing.T) {
	const ok = "POST /fast/echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n"
	h, good := parseHead([]byte(ok), 100)
	if !good || h.method != "POST" || h.target != "/fast/echo" || h.host != "h" || h.contentLength != 3 || h.close || len(h.header) != 1 {
		t.Fatalf("plain head: %+v, %v", h, good)
	}
	h, good = parseHead([]byte("POST /a HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\nx-custom-field:  v 1 \r\nConnection: Close\r\nAuthorization: Bearer k\r\n\r\n"), 100)
	if !good || !h.close || h.header.Get("X-Custom-Field") != "v 1" || h.header.Get("Authorization") != "Bearer k" {
		t.Fatalf("fields canonical and trimmed, Connection: close: %+v, %v", h, good)
	}
	for _, bad := range []string{
		"POST /a HTTP/1.0\r\nHost: h\r\nContent-Length: 0\r\n\r\n",     // another version
		"POST /a?q=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", // a query
		"POST /a%20b HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", // an escape
		"POST a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",      // not absolute
		"POST  /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",    // two spaces
		"POST /a HTTP/1.1\r\nContent-Length: 0\r\n\r\n",                // no Host
		"POST /a HTTP/1.1\r\nHost: h\r\nHost: i\r\nContent-Length: 0\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h/i\r\nContent-Length: 0\r\n\r\n",                              // two Hosts
		"POST /a HTTP/1.1\r\nHost: h\r\n\r\n",                                                     // no length
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",           // two lengths
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\n",                               // not digits
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n",                              // over the bound
		"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",                       // chunked
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n",        // expect
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nConnection: Upgrade\r\n\r\n",         // upgrade
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nX-A: b\r\n c\r\n\r\n",                // folded
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nX A: b\r\n\r\n",                      // not a token
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nX-A: b\x01\r\n\r\n",                  // a control byte
		"POST /a HTTP/1.1\nHost: h\nContent-Length: 0\n\n",                                        // bare LF
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nNoColon\r\n\r\n",                     // no colon
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n" + strings.Repeat("X-A: b\r\n", 70), // too many
	} {
		if _, good := parseHead([]byte(bad+"\r\n"), 100); good {
			t.Errorf("%q: read by the lane, want net/http's", bad)
		}
	}
}

// rig is a lane in front of an http.Server, on loopback.
type rig struct {
	s    *Server
	addr string
	eng  *fakeEngine
}

// fakeEngine answers the /fast/wait requests when the test says.
type fakeEngine struct {
	mu        sync.Mutex
	dones     chan func()
	cancelled int
	cancelOK  bool
}

// waitCancelled waits until cancel has been called n times.
func (e *fakeEngine) waitCancelled(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(waitMax)
	for {
		e.mu.Lock()
		got := e.cancelled
		e.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cancel called %d times, want %d: a client went, and its request was not withdrawn", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func handler(eng *fakeEngine) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/fast/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		served := "net/http"
		if _, ok := w.(interface {
			Await(func(func()), func() bool) bool
		}); ok {
			served = "lane"
		}
		w.Header().Set("X-Served-By", served)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("/fast/wait", func(w http.ResponseWriter, r *http.Request) {
		a := w.(interface {
			Await(func(func()), func() bool) bool
		})
		gone := a.Await(func(done func()) { eng.dones <- done }, func() bool {
			eng.mu.Lock()
			defer eng.mu.Unlock()
			eng.cancelled++
			return eng.cancelOK
		})
		if gone {
			return
		}
		_, _ = io.WriteString(w, "answered")
	})
	// The request as the handler sees it: its path and its fields.
	mux.HandleFunc("/fast/fields/", func(w http.ResponseWriter, r *http.Request) {
		keys := slices.Sorted(maps.Keys(r.Header))
		for i, k := range keys {
			keys[i] = k + "=" + strings.Join(r.Header[k], ",")
		}
		_, _ = io.WriteString(w, r.URL.Path+" "+r.Host+" "+strings.Join(keys, " "))
	})
	mux.HandleFunc("/fast/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	mux.HandleFunc("/fast/empty", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Served-By", "net/http")
		_, _ = io.WriteString(w, "other")
	})
	return mux
}

func newRig(t *testing.T) *rig { return newRigWith(t, time.Minute, 0) }

// newRigWith is newRig with the server's idle bound, and the lane's
// parking (Config.ParkAfter; 0: off).
func newRigWith(t *testing.T, idle, parkAfter time.Duration) *rig {
	t.Helper()
	r, served := listenRig(t, idle, parkAfter)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitMax)
		defer cancel()
		if err := r.s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return r
}

// listenRig starts a rig that the test stops itself; served gets what
// Serve returns.
func listenRig(t *testing.T, idle, parkAfter time.Duration) (r *rig, served chan error) {
	t.Helper()
	eng := &fakeEngine{dones: make(chan func(), 16), cancelOK: true}
	srv := &http.Server{Handler: handler(eng), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: idle}
	s := New(srv, Config{Fast: func(m, p string) bool { return m == http.MethodPost && strings.HasPrefix(p, "/fast/") },
		BodyMaxBytes: 1 << 10, ParkAfter: parkAfter})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served = make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	return &rig{s: s, addr: ln.Addr().String(), eng: eng}, served
}

// client is one connection to the rig.
type client struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func (r *rig) dial(t *testing.T) *client {
	t.Helper()
	nc, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(waitMax))
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *client) send(raw string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, raw); err != nil {
		c.t.Fatal(err)
	}
}

// read reads one response, and its body.
func (c *client) read() (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, string(b)
}

func post(path, body string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// Requests in a row on one connection, and several in one write, are
// each answered in order by the lane, with the fields net/http would
// have written.
func TestKeepAlive(t *testing.T) {
	r := newRig(t)
	c := r.dial(t)
	for _, body := range []string{"one", "", "three"} {
		c.send(post("/fast/echo", body))
		resp, got := c.read()
		if resp.StatusCode != 200 || got != body || resp.Header.Get("X-Served-By") != "lane" || resp.Close {
			t.Fatalf("%q: %d %q by %q (close %v)", body, resp.StatusCode, got, resp.Header.Get("X-Served-By"), resp.Close)
		}
		if resp.ContentLength != int64(len(body)) || resp.Header.Get("Date") == "" || resp.Header.Get("Content-Type") != "text/plain" {
			t.Errorf("%q: fields %v, length %d", body, resp.Header, resp.ContentLength)
		}
	}
	c.send(post("/fast/echo", "a") + post("/fast/echo", "bb") + post("/fast/echo", "ccc"))
	for _, want := range []string{"a", "bb", "ccc"} {
		if _, got := c.read(); got != want {
			t.Fatalf("pipelined: %q, want %q", got, want)
		}
	}
}

// TestReusedRequest: a connection's requests in a row, served in the
// connection's one request, header map and field array, each see their
// own path, host and fields only, none of the last one's.
func TestReusedRequest(t *testing.T) {
	r := newRig(t)
	c := r.dial(t)
	for _, tc := range []struct{ head, want string }{
		{"POST /fast/fields/one HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nX-B: 2\r\nX-A: 3\r\nContent-Length: 0\r\n\r\n",
			"/fast/fields/one a Content-Length=0 X-A=1,3 X-B=2"},
		{"POST /fast/fields/two HTTP/1.1\r\nHost: b\r\nX-C: 4\r\nContent-Length: 0\r\n\r\n",
			"/fast/fields/two b Content-Length=0 X-C=4"},
		{"POST /fast/fields/3 HTTP/1.1\r\nHost: c\r\nX-B: 5\r\nX-A: 6\r\nContent-Length: 0\r\n\r\n",
			"/fast/fields/3 c Content-Length=0 X-A=6 X-B=5"},
	} {
		c.send(tc.head)
		resp, got := c.read()
		if resp.StatusCode != 200 || got != tc.want {
			t.Errorf("%d %q, want %q", resp.StatusCode, got, tc.want)
		}
	}
}

// A request that is not the lane's goes to net/http with its connection,
// which serves everything after it; a malformed one gets net/http's own
// answer.
func TestHandOff(t *testing.T) {
	r := newRig(t)
	c := r.dial(t)
	c.send(post("/fast/echo", "x"))
	if resp, _ := c.read(); resp.Header.Get("X-Served-By") != "lane" {
		t.Fatalf("first request served by %q", resp.Header.Get("X-Served-By"))
	}
	c.send("GET /other HTTP/1.1\r\nHost: x\r\n\r\n" + post("/fast/echo", "y"))
	if resp, got := c.read(); got != "other" || resp.Header.Get("X-Served-By") != "net/http" {
		t.Fatalf("GET: %q by %q", got, resp.Header.Get("X-Served-By"))
	}
	if resp, got := c.read(); got != "y" || resp.Header.Get("X-Served-By") != "net/http" {
		t.Fatalf("after the hand-off: %q by %q", got, resp.Header.Get("X-Served-By"))
	}
	for _, bad := range []string{
		"POST /fast/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc",
		"POST /fast/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST /fast/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n" + strings.Repeat("z", 2000),
	} {
		c := r.dial(t)
		c.send(bad)
		resp, got := c.read()
		var want http.Response
		switch {
		case strings.Contains(bad, "Content-Length: 4"):
			want.StatusCode = http.StatusBadRequest
		default:
			want.StatusCode = http.StatusOK
		}
		if resp.StatusCode != want.StatusCode || (resp.StatusCode == 200 && resp.Header.Get("X-Served-By") != "net/http") {
			t.Errorf("%.60q: %d %q by %q, want net/http's %d", bad, resp.StatusCode, got, resp.Header.Get("X-Served-By"), want.StatusCode)
		}
	}
}

// Connection: close is answered with it, and the connection closed after;
// so is a handler's own Connection: close, and a 204 has no length.
func TestConnectionClose(t *testing.T) {
	r := newRig(t)
	for _, raw := range []string{
		"POST /fast/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 1\r\n\r\nq",
		post("/fast/empty", ""),
	} {
		c := r.dial(t)
		c.send(raw)
		resp, _ := c.read()
		if !resp.Close {
			t.Errorf("%.40q: no Connection: close in %v", raw, resp.Header)
		}
		if resp.StatusCode == http.StatusNoContent && resp.Header.Get("Content-Length") != "" {
			t.Errorf("204 with a Content-Length")
		}
		if _, err := c.br.ReadByte(); err != io.EOF {
			t.Errorf("%.40q: connection still open (%v)", raw, err)
		}
	}
}

// A head and body that come in pieces are read whole.
func TestPieces(t *testing.T) {
	eng := &fakeEngine{dones: make(chan func(), 1)}
	srv := &http.Server{Handler: handler(eng), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	s := New(srv, Config{Fast: func(m, p string) bool { return true }, BodyMaxBytes: 1 << 10})
	s.ho = newHandoff(nil, func() {})
	srvSide, cliSide := net.Pipe() // each write is read apart
	defer cliSide.Close()
	c := s.track(srvSide)
	go c.serve()
	raw := post("/fast/echo", "hello, pieces")
	go func() {
		for i := 0; i < len(raw); i += 7 {
			if _, err := io.WriteString(cliSide, raw[i:min(i+7, len(raw))]); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(cliSide), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "hello, pieces" {
		t.Fatalf("body %q", b)
	}
}

// Await ends with done; a client that goes meanwhile has its request
// withdrawn (cancel), and bytes it sends meanwhile are its next request.
func TestAwait(t *testing.T) {
	r := newRig(t)
	c := r.dial(t)
	c.send(post("/fast/wait", ""))
	(<-r.eng.dones)() // the connection waits in its read: done ends it
	if _, got := c.read(); got != "answered" {
		t.Fatalf("waited request: %q", got)
	}
	c.send(post("/fast/wait", ""))
	done := <-r.eng.dones
	c.send(post("/fast/echo", "next")) // while the first waits
	done()
	if _, got := c.read(); got != "answered" {
		t.Fatalf("waited request: %q", got)
	}
	if _, got := c.read(); got != "next" {
		t.Fatalf("the request sent during the wait: %q", got)
	}
	// The client goes while its request waits: withdrawn.
	c2 := r.dial(t)
	c2.send(post("/fast/wait", ""))
	<-r.eng.dones
	c2.nc.Close()
	r.eng.waitCancelled(t, 1)
}

// A withdrawal too late (cancel false) waits for done.
func TestAwaitCancelTooLate(t *testing.T) {
	r := newRig(t)
	r.eng.cancelOK = false
	c := r.dial(t)
	c.send(post("/fast/wait", ""))
	done := <-r.eng.dones
	_ = c.nc.(*net.TCPConn).CloseWrite() // the client's side ends: gone
	r.eng.waitCancelled(t, 1)
	done()
	if _, got := c.read(); got != "answered" {
		t.Fatalf("after a late withdrawal: %q", got)
	}
}

// Shutdown closes idle connections, lets a waiting request finish (with
// Connection: close), and returns.
func TestShutdown(t *testing.T) {
	r, served := listenRig(t, time.Minute, 0)
	s, eng := r.s, r.eng
	idle := r.dial(t)
	idle.send(post("/fast/echo", "x"))
	idle.read()
	busy := r.dial(t)
	busy.send(post("/fast/wait", ""))
	done := <-eng.dones
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitMax)
		defer cancel()
		stopped <- s.Shutdown(ctx)
	}()
	if _, err := idle.br.ReadByte(); err != io.EOF {
		t.Errorf("idle connection after Shutdown: %v, want EOF", err)
	}
	done()
	resp, got := busy.read()
	if got != "answered" || !resp.Close {
		t.Errorf("busy connection: %q, close %v", got, resp.Close)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
}

// A handler's panic closes its connection; the server serves on.
func TestPanic(t *testing.T) {
	r := newRig(t)
	c := r.dial(t)
	c.send(post("/fast/panic", ""))
	if _, err := c.br.ReadByte(); err == nil {
		t.Fatal("a response after a panic")
	}
	c2 := r.dial(t)
	c2.send(post("/fast/echo", "ok"))
	if _, got := c2.read(); got != "ok" {
		t.Fatalf("after a panic: %q", got)
	}
}

// The lane's Host bytes are net/http's (httpguts), so that a Host it
// would refuse goes to it.
func TestValidHostIsNetHTTPs(t *testing.T) {
	for c := 0; c < 256; c++ {
		b := string([]byte{'a', byte(c), 'b'})
		if got, want := validHost(b), httpguts.ValidHostHeader(b); got != want {
			t.Errorf("byte %#x: lane %v, net/http %v", c, got, want)
		}
	}
}

// A connection that sends nothing is closed after the head's bound, not
// kept for the idle one (net/http's rule for a first request); one that
// has served a request waits for the idle bound.
func TestFirstRequestDue(t *testing.T) {
	eng := &fakeEngine{dones: make(chan func(), 1)}
	srv := &http.Server{Handler: handler(eng), ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: time.Hour}
	s := New(srv, Config{Fast: func(m, p string) bool { return true }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	r := &rig{s: s, addr: ln.Addr().String(), eng: eng}
	silent := r.dial(t)
	kept := r.dial(t)
	kept.send(post("/fast/echo", "x"))
	kept.read()
	if _, err := silent.br.ReadByte(); err != io.EOF {
		t.Fatalf("a connection that sent nothing: %v, want it closed", err)
	}
	// The kept one is still open: a request on it is answered.
	kept.send(post("/fast/echo", "y"))
	if _, got := kept.read(); got != "y" {
		t.Fatalf("kept connection: %q", got)
	}
}
