//go:build linux

package loadgen

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestStampConn: a read through withStamps returns the data and learns a
// receive time between the write and the read; with no data, a read ends
// at the connection's deadline as a timeout; the peer's close is EOF.
func TestStampConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := withStamps(nc)
	defer c.Close()
	if _, ok := c.(*stampConn); !ok {
		t.Fatalf("withStamps gave %T: a loopback TCP socket should take SO_TIMESTAMPNS", c)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}

	// exchange writes on the peer and reads here; it returns the receive
	// time the read carried, if any, and the times around it.
	exchange := func(i int) (at time.Time, ok bool, before, after time.Time) {
		n0 := stamps(c)
		before = time.Now()
		if _, err := peer.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		n, err := c.Read(buf)
		after = time.Now()
		if err != nil || string(buf[:n]) != "hello" {
			t.Fatalf("read %d: %q, %v", i, buf[:n], err)
		}
		at, ok = receivedSince(c, n0)
		if _, again := receivedSince(c, stamps(c)); again {
			t.Fatalf("read %d: a receive time with no read since", i)
		}
		return at, ok, before, after
	}
	// The kernel turns receive timestamps on for the whole system in a
	// deferred work item once the first socket asks, so the first reads
	// may carry none (the generator then counts those to their read).
	// Bounded: 30 s or 100,000 exchanges (5 s was once too short for the
	// kernel's work item on a loaded machine under -race).
	first := -1
	for i, start := 0, time.Now(); i < 100_000 && time.Since(start) < 30*time.Second; i++ {
		if _, ok, _, _ := exchange(i); ok {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatal("no read carried a receive time")
	}
	for i := range 3 {
		at, ok, before, after := exchange(first + 1 + i)
		if !ok {
			t.Fatalf("read %d after the first stamped one carried no receive time", i)
		}
		// Wall clock on both sides; the kernel's clock is the same one,
		// to within its tick of a microsecond.
		if at.Before(before.Add(-time.Microsecond)) || at.After(after) {
			t.Errorf("read %d: received at %v, not between the write (%v) and the read (%v)", i, at, before, after)
		}
	}

	if err := c.SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := c.Read(make([]byte, 4)); !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	if _, err := c.Read(make([]byte, 4)); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
}
