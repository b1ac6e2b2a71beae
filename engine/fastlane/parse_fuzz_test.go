package fastlane

import (
	"bufio"
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// FuzzParseHead: a head the lane reads, net/http reads the same: its
// method, path, Host, Content-Length, Connection: close and every other
// field. What the lane refuses goes to net/http, so only its yes is held
// to account.
func FuzzParseHead(f *testing.F) {
	for _, seed := range []string{
		"POST /v1/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n",
		"POST /a HTTP/1.1\r\nhost: h:80\r\ncontent-length: 0\r\nX-A:  b \r\nConnection: close\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\nAuthorization: Bearer k\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: [::1]:8080\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nX: \x80\xff\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: \r\nContent-Length: 1\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		i := bytes.Index(b, crlf2)
		if i < 0 {
			return
		}
		b = b[:i+len(crlf2)]
		h, ok := parseHead(b, 1<<20)
		if !ok {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			t.Fatalf("the lane reads %q, net/http refuses it: %v", b, err)
		}
		if req.Method != h.method || req.URL.Path != h.target || req.RequestURI != h.target || req.Host != h.host ||
			req.ContentLength != int64(h.contentLength) || req.Close != h.close {
			t.Fatalf("%q: lane %s %s host %q length %d close %v; net/http %s %s host %q length %d close %v",
				b, h.method, h.target, h.host, h.contentLength, h.close, req.Method, req.URL.Path, req.Host, req.ContentLength, req.Close)
		}
		for k, vs := range req.Header {
			if k == "Host" {
				continue
			}
			if !slices.Equal(vs, h.header[k]) {
				t.Fatalf("%q: field %s: lane %q, net/http %q", b, k, h.header[k], vs)
			}
		}
		for k := range h.header {
			if _, ok := req.Header[k]; !ok && !strings.EqualFold(k, "Host") {
				t.Fatalf("%q: field %s the lane has, net/http has not", b, k)
			}
		}
	})
}
