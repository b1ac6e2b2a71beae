package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// Conn is how batchd reaches an upstream: its address, credentials and
// connection pool. Both backends share it.
type Conn struct {
	// URL is the upstream's base: http://host:port, or https://, with an
	// optional path prefix. For Fanout it is a template (see
	// FanoutConfig.URL).
	URL string
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token string
	// CAFile, for https, is a PEM file of the certificate authorities to
	// trust in place of the system's.
	CAFile string
	// ConnsMax is the idle keep-alive connections kept to the upstream
	// (at least the slots or the concurrency, so that none is redialled
	// under load).
	ConnsMax int
	// DialTimeout bounds a connection's set-up (TCP and TLS).
	DialTimeout time.Duration
}

// newTransport returns the one http.Transport of an upstream.
func newTransport(c Conn) (*http.Transport, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, fmt.Errorf("url %q: %w", c.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("url %q: want http://host:port or https://host:port", c.URL)
	}
	if c.ConnsMax < 1 {
		return nil, fmt.Errorf("ConnsMax %d: must be at least 1", c.ConnsMax)
	}
	if c.DialTimeout <= 0 {
		return nil, fmt.Errorf("DialTimeout %v: must be positive", c.DialTimeout)
	}
	var tlsCfg *tls.Config
	if c.CAFile != "" {
		if u.Scheme != "https" {
			return nil, fmt.Errorf("ca_file %q with url %q: the CA is for https", c.CAFile, c.URL)
		}
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %q: no PEM certificate in it", c.CAFile)
		}
		tlsCfg = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	d := &net.Dialer{Timeout: c.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:               nil, // an upstream is reached directly, whatever HTTP_PROXY says
		DialContext:         d.DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: c.DialTimeout,
		ForceAttemptHTTP2:   tlsCfg != nil || u.Scheme == "https",
		MaxIdleConns:        c.ConnsMax,
		MaxIdleConnsPerHost: c.ConnsMax,
		IdleConnTimeout:     90 * time.Second,
		// Compressed replies would cost CPU on both sides for a hop that is
		// usually local.
		DisableCompression: true,
	}, nil
}

// readBounded reads r to its end, failing past max bytes.
func readBounded(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("response body over %d bytes (response_max_bytes)", max)
	}
	return b, nil
}

// snippet is the start of an error body, for a message.
func snippet(b []byte) string {
	const n = 200
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// refused reports whether err is a refused connection: nothing listens
// there (yet, or any more), so the call never reached the upstream and is
// safe to repeat.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// replayable lets the Transport send req again, once, on a fresh
// connection when a kept-alive one turns out to have been closed by the
// upstream (its idle timeout racing our reuse): without it such a POST
// fails, and a batch would be a device fault for a connection nobody
// needed. An infer call computes a function of its inputs, so a repeat is
// harmless. The key is present but empty, so it is not sent.
func replayable(req *http.Request) { req.Header["Idempotency-Key"] = nil }
