//go:build linux

package fastlane

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// parkAfterTest parks a connection idle 2 to 4 ms.
const parkAfterTest = 2 * time.Millisecond

// newParkRig is newRig with parking on, and the server's idle bound.
func newParkRig(t *testing.T, idle time.Duration) *rig { return newRigWith(t, idle, parkAfterTest) }

// waitFor waits until cond holds, failing the test after waitMax.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitMax)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waitMax)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// servingGoroutines counts the goroutines in conn.serve.
func servingGoroutines() int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), "fastlane.(*conn).serve(")
}

// tracked is how many connections the lane serves or holds parked.
func (r *rig) tracked() int {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return len(r.s.conns)
}

// A kept-alive connection that waits is parked (no goroutine, no read
// buffer), and served on when its client sends: each time, requests in a
// row and several in one write alike; with an idle bound, and with none.
func TestParkResume(t *testing.T) {
	for _, idle := range []time.Duration{time.Minute, 0} {
		t.Run(fmt.Sprint(idle), func(t *testing.T) { testParkResume(t, idle) })
	}
}

func testParkResume(t *testing.T, idle time.Duration) {
	r := newParkRig(t, idle)
	c := r.dial(t)
	for i := range 4 {
		body := fmt.Sprintf("request %d", i)
		c.send(post("/fast/echo", body))
		if resp, got := c.read(); got != body || resp.Header.Get("X-Served-By") != "lane" || resp.Close {
			t.Fatalf("%d: %q by %q (close %v)", i, got, resp.Header.Get("X-Served-By"), resp.Close)
		}
		waitFor(t, "the connection parked", func() bool { return r.s.Parked() == 1 })
	}
	// Parked, its goroutine is gone; one that waits for its answer has
	// its own.
	if n := servingGoroutines(); n != 0 {
		t.Errorf("%d goroutines serve a connection while it is parked", n)
	}
	busy := r.dial(t)
	busy.send(post("/fast/wait", ""))
	done := <-r.eng.dones
	if n := servingGoroutines(); n != 1 {
		t.Errorf("%d goroutines serve the parked connection and the busy one, want 1", n)
	}
	done()
	if _, got := busy.read(); got != "answered" {
		t.Errorf("busy connection: %q", got)
	}
	c.send(post("/fast/echo", "a") + post("/fast/echo", "bb"))
	for _, want := range []string{"a", "bb"} {
		if _, got := c.read(); got != want {
			t.Fatalf("pipelined after parking: %q, want %q", got, want)
		}
	}
	if r.s.Served() != 7 || r.tracked() != 2 {
		t.Errorf("served %d, tracked %d; want 7 and 2", r.s.Served(), r.tracked())
	}
}

// A connection that has sent nothing yet is not parked: its first
// request is due within ReadHeaderTimeout, which its read's deadline
// bounds.
func TestParkNotBeforeFirstRequest(t *testing.T) {
	r := newParkRig(t, time.Minute)
	c := r.dial(t)
	gen := r.s.sweepGen.Load()
	waitFor(t, "three sweeps", func() bool { return r.s.sweepGen.Load() >= gen+3 })
	if n := r.s.Parked(); n != 0 {
		t.Fatalf("%d parked before the first request", n)
	}
	c.send(post("/fast/echo", "first"))
	if _, got := c.read(); got != "first" {
		t.Fatalf("first request: %q", got)
	}
}

// A parked connection idle past the server's IdleTimeout is closed, and
// forgotten, as one waiting in its read would be.
func TestParkedIdleTimeout(t *testing.T) {
	r := newParkRig(t, 50*time.Millisecond)
	c := r.dial(t)
	c.send(post("/fast/echo", "x"))
	c.read()
	waitFor(t, "the connection parked", func() bool { return r.s.Parked() == 1 })
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Fatalf("parked past the idle bound: %v, want EOF", err)
	}
	waitFor(t, "the connection forgotten", func() bool { return r.s.Parked() == 0 && r.tracked() == 0 })
}

// A client that closes its parked connection: the connection wakes,
// reads the end, and is gone.
func TestParkedClientGoes(t *testing.T) {
	r := newParkRig(t, time.Minute)
	c := r.dial(t)
	c.send(post("/fast/echo", "x"))
	c.read()
	waitFor(t, "the connection parked", func() bool { return r.s.Parked() == 1 })
	c.nc.Close()
	waitFor(t, "the connection gone", func() bool { return r.s.Parked() == 0 && r.tracked() == 0 })
}

// Shutdown closes parked connections as idle ones, and returns at once
// (it waits for every tracked connection).
func TestParkedShutdown(t *testing.T) {
	r, served := listenRig(t, time.Minute, parkAfterTest)
	s := r.s
	var cs []*client
	for range 3 {
		c := r.dial(t)
		c.send(post("/fast/echo", "x"))
		c.read()
		cs = append(cs, c)
	}
	waitFor(t, "the connections parked", func() bool { return s.Parked() == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for i, c := range cs {
		if _, err := c.br.ReadByte(); err != io.EOF {
			t.Errorf("parked connection %d after Shutdown: %v, want EOF", i, err)
		}
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	if n := r.tracked(); n != 0 {
		t.Errorf("%d connections still tracked", n)
	}
}

// Clients that pause about as long as the lane waits before parking, so
// that requests arrive while connections park, are woken, or are asked
// to: every request answered with its own body, in order.
func TestParkRaces(t *testing.T) {
	r := newParkRig(t, time.Minute)
	const clients, requests = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", r.addr)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(waitMax))
			c := &client{t: t, nc: nc, br: bufio.NewReader(nc)}
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for j := range requests {
				body := fmt.Sprintf("c%d r%d", i, j)
				if _, err := io.WriteString(nc, post("/fast/echo", body)); err != nil {
					errs <- err
					return
				}
				resp, err := http.ReadResponse(c.br, nil)
				if err != nil {
					errs <- err
					return
				}
				got, _ := io.ReadAll(resp.Body)
				if string(got) != body {
					errs <- fmt.Errorf("client %d request %d: %q", i, j, got)
					return
				}
				time.Sleep(time.Duration(rng.IntN(int(3 * parkAfterTest))))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := r.s.Served(); got != clients*requests {
		t.Errorf("served %d, want %d", got, clients*requests)
	}
	// Not vacuous: connections did park between requests.
	if n := r.s.parkSeq.Load(); n < clients {
		t.Errorf("%d parkings in %d requests: the pauses did not reach the parking", n, clients*requests)
	}
	t.Logf("%d parkings in %d requests", r.s.parkSeq.Load(), clients*requests)
}

// BenchmarkGCIdleConns is what 2,000 kept-alive connections, idle after
// one request each, add to a garbage collection (runtime.GC, the process's
// whole cycle: the clients' ends are in it too, the same in both) and to
// the heap and the goroutine stacks, with and without parking:
//
//	go test ./engine/fastlane -run '^$' -bench GCIdleConns -benchtime 20x -cpu 1
func BenchmarkGCIdleConns(b *testing.B) {
	const conns = 2000
	for _, park := range []time.Duration{0, parkAfterTest} {
		b.Run(map[bool]string{true: "parked", false: "goroutines"}[park > 0], func(b *testing.B) {
			srv := &http.Server{Handler: handler(&fakeEngine{}), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
			s := New(srv, Config{Fast: func(m, p string) bool { return true }, ParkAfter: park})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = s.Serve(ln) }()
			b.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), waitMax)
				defer cancel()
				_ = s.Shutdown(ctx)
			})
			gc := func() time.Duration { // the fastest of a few, with the heap settled
				best := time.Hour
				for range 5 {
					t0 := time.Now()
					runtime.GC()
					best = min(best, time.Since(t0))
				}
				return best
			}
			base := gc()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			var cs []net.Conn
			for range conns {
				nc, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				defer nc.Close()
				if _, err := io.WriteString(nc, post("/fast/echo", "x")); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				cs = append(cs, nc)
			}
			deadline := time.Now().Add(waitMax)
			for park > 0 && s.Parked() < conns && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if park > 0 && s.Parked() < conns {
				b.Fatalf("%d of %d parked", s.Parked(), conns)
			}
			runtime.GC()
			runtime.ReadMemStats(&m1)
			b.ResetTimer()
			for b.Loop() {
				runtime.GC()
			}
			b.StopTimer()
			per := func(a, z uint64) float64 { return (float64(z) - float64(a)) / conns }
			b.ReportMetric((float64(gc())-float64(base))/float64(time.Microsecond)/conns, "µs-gc/conn")
			b.ReportMetric(per(m0.HeapAlloc, m1.HeapAlloc), "heap-B/conn")
			b.ReportMetric(per(m0.StackInuse, m1.StackInuse), "stack-B/conn")
			runtime.KeepAlive(cs)
		})
	}
}

// failingRaw is a descriptor whose every wait fails.
type failingRaw struct{ syscall.RawConn }

func (failingRaw) Read(func(uintptr) bool) error { return errors.New("the set failed") }

// When the set fails, run hands every connection still parked to wake
// (they would wait forever otherwise) and reports the failure.
func TestParkerFailureWakesAll(t *testing.T) {
	a, b := &conn{}, &conn{}
	p := &parker{rc: failingRaw{}, conns: map[uint64]*conn{1: a, 2: b}}
	var woken []*conn
	broken := false
	wake := func(c *conn) {
		if !broken {
			t.Errorf("woken before broken was called: one could park again meanwhile")
		}
		woken = append(woken, c)
	}
	if err := p.run(wake, func() { broken = true }); err == nil {
		t.Fatal("run: nil error after the set failed")
	}
	if len(woken) != 2 || p.parked() != 0 {
		t.Fatalf("woken %d of 2, %d left in the table", len(woken), p.parked())
	}
}
