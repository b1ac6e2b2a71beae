package loadgen

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/engine/grpcapi"
	"github.com/batchd/batchd/engine/httpapi"
)

// emulated answers as the emulated backend does, at once.
type emulated struct{ start time.Time }

func (e emulated) Now() time.Duration { return time.Since(e.start) }

func (e emulated) Do(_ context.Context, req actors.Request) (actors.Reply, error) {
	return actors.Reply{Outcome: actors.Completed, Version: "v1", Output: actors.EmulatedOutput(req.Model, "v1", req.Input)}, nil
}

// TestGRPCLoad: the open loop over gRPC, unary and streamed, gets every
// request answered with its own output (Check on).
func TestGRPCLoad(t *testing.T) {
	h, err := httpapi.New(enginetest.Door(emulated{time.Now()}), httpapi.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := grpcapi.New(h, grpcapi.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: inner}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-served
	}()
	// An HTTP server at the run's URL: a gRPC run opens nothing there.
	web := httptest.NewUnstartedServer(http.NotFoundHandler())
	httpLn := &countingListener{Listener: web.Listener}
	web.Listener = httpLn
	web.Start()
	defer web.Close()
	for _, conns := range []int{1, 3} {
		for _, stream := range []bool{false, true} {
			cfg := DefaultConfig()
			cfg.URL = web.URL
			cfg.GRPC, cfg.GRPCStream, cfg.GRPCConns = ln.Addr().String(), stream, conns
			cfg.Rate, cfg.Duration, cfg.Interval, cfg.Arrival = 400, 500*time.Millisecond, 100*time.Millisecond, Fixed
			before := ln.accepted.Load()
			rep, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if c := rep.Requests; c.Sent < 150 || c.OK != c.Sent || c.WrongOutput != 0 {
				t.Errorf("stream %v, %d connections: %+v, want every request answered right", stream, conns, c)
			}
			if n := ln.accepted.Load() - before; n != int64(conns) {
				t.Errorf("stream %v: %d connections to the server, want %d", stream, n, conns)
			}
			if n := httpLn.accepted.Load(); n != 0 || rep.ConnectionsOpened != 0 {
				t.Errorf("stream %v: %d HTTP connections accepted, %d reported opened, by a gRPC run", stream, n, rep.ConnectionsOpened)
			}
		}
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}
