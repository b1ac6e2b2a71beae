package rawtcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// rawPair is an accepted connection made raw (as Wrap makes them) and the client's plain end.
func rawPair(t *testing.T) (*rawConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := Wrap(c).(*rawConn); ok == raceBuild {
		t.Fatalf("Wrap gave %T under the race detector %v", Wrap(c), raceBuild)
	}
	rc, err := newRawConn(c.(*net.TCPConn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close(); client.Close() })
	return rc, client
}

func TestRawConnRoundTrip(t *testing.T) {
	rc, client := rawPair(t)
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := io.ReadAtLeast(rc, buf, 4)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("read %q, %v; want ping", buf[:n], err)
	}
	if n, err := rc.Write([]byte("pong")); n != 4 || err != nil {
		t.Fatalf("write %d, %v", n, err)
	}
	if _, err := io.ReadFull(client, buf[:4]); err != nil || string(buf[:4]) != "pong" {
		t.Fatalf("client read %q, %v", buf[:4], err)
	}
	// The peer's close is io.EOF, as for a TCPConn.
	client.Close()
	if n, err := rc.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v; want 0, io.EOF", n, err)
	}
}

// A write larger than the socket's buffers waits in the poller for the
// peer to read, and every byte arrives, in order.
func TestRawConnLargeWrite(t *testing.T) {
	rc, client := rawPair(t)
	want := make([]byte, 16<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(want))))
		got <- b
	}()
	if n, err := rc.Write(want); n != len(want) || err != nil {
		t.Fatalf("write %d of %d, %v", n, len(want), err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("read %d bytes, not the %d written", len(b), len(want))
	}
}

// A read deadline ends a read as a TCPConn's does: a net.Error whose
// Timeout is true, of operation "read" (net/http looks at both).
func TestRawConnReadDeadline(t *testing.T) {
	rc, _ := rawPair(t)
	if err := rc.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := rc.Read(make([]byte, 8))
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" || !oe.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %#v; want a read OpError that timed out", err)
	}
	// A deadline in the past is how net/http stops its background read.
	if err := rc.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with a past deadline: %v", err)
	}
}

// Closing the connection ends a read waiting in the poller with
// net.ErrClosed.
func TestRawConnCloseEndsRead(t *testing.T) {
	rc, _ := rawPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := rc.Read(make([]byte, 8))
		done <- err
	}()
	// The read may not have begun waiting yet; Close ends it either way:
	// before, the read finds the descriptor closed.
	rc.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read across Close: %v; want net.ErrClosed", err)
	}
	if _, err := rc.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v; want net.ErrClosed", err)
	}
}

// A write to a peer that reset the connection is an error, not a hang.
func TestRawConnWriteAfterReset(t *testing.T) {
	rc, client := rawPair(t)
	client.(*net.TCPConn).SetLinger(0) // close with a reset
	client.Close()
	var err error
	for range 100 {
		if _, err = rc.Write(make([]byte, 1<<16)); err != nil {
			break
		}
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("writes to a reset peer: %v; want a write OpError", err)
	}
}
