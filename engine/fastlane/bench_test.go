package fastlane

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// batcher stands for the engine: it answers the requests handed to it in
// batches, on one goroutine, as the engine's reply goroutine does.
type batcher struct {
	in chan func()
}

func newBatcher(b *testing.B) *batcher {
	bt := &batcher{in: make(chan func(), 4096)}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case f := <-bt.in:
				f()
				for n := 1; n < 100; n++ { // what else is queued: one batch
					select {
					case f := <-bt.in:
						f()
						continue
					default:
					}
					break
				}
			case <-stop:
				return
			}
		}
	}()
	b.Cleanup(func() { close(stop); <-done })
	return bt
}

// benchHandler waits for the batcher: through Await in the lane, on a
// channel under net/http (as engine.Do waits, and httpapi without the
// lane).
func benchHandler(bt *batcher) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if a, ok := w.(interface {
			Await(func(func()), func() bool) bool
		}); ok {
			a.Await(func(done func()) { bt.in <- done }, func() bool { return false })
		} else {
			ch := make(chan struct{}, 1)
			bt.in <- func() { ch <- struct{}{} }
			select {
			case <-ch:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
}

// BenchmarkServe is one request's round trip on a kept-alive loopback
// connection, client included, through the lane or net/http alone, to a
// handler that waits for a batcher goroutine: the lane's saving over
// net/http for a handler that waits.
func BenchmarkServe(b *testing.B) {
	for _, lane := range []bool{true, false} {
		name := map[bool]string{true: "lane", false: "net_http"}[lane]
		b.Run(name, func(b *testing.B) {
			bt := newBatcher(b)
			srv := &http.Server{Handler: benchHandler(bt), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			var s interface{ Shutdown(context.Context) error } = srv
			if lane {
				fl := New(srv, Config{Fast: func(m, p string) bool { return true }})
				go func() { _ = fl.Serve(ln) }()
				s = fl
			} else {
				go func() { _ = srv.Serve(ln) }()
			}
			b.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), waitMax)
				defer cancel()
				_ = s.Shutdown(ctx)
			})
			const body = `{"input": "hello"}`
			req := "POST /v1/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body
			var mu sync.Mutex
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				nc, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Error(err)
					return
				}
				defer nc.Close()
				br := bufio.NewReader(nc)
				for pb.Next() {
					if _, err := io.WriteString(nc, req); err != nil {
						b.Error(err)
						return
					}
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						b.Error(err)
						return
					}
					got, _ := io.ReadAll(resp.Body)
					if resp.StatusCode != 200 || !strings.Contains(string(got), "hello") {
						mu.Lock()
						b.Errorf("%d %q", resp.StatusCode, got)
						mu.Unlock()
						return
					}
				}
			})
		})
	}
}

// BenchmarkParseHead is the lane's reading of a typical client's infer
// request head (a Python client's fields).
func BenchmarkParseHead(b *testing.B) {
	h := []byte("POST /v2/models/bytenet/infer HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: python-requests/2.31.0\r\n" +
		"Accept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\nContent-Type: application/json\r\n" +
		"Content-Length: 92\r\n\r\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := parseHead(h, 64<<10); !ok {
			b.Fatal("not read")
		}
	}
}
