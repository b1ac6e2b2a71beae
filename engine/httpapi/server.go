package httpapi

import (
	"net/http"
	"time"
)

// Server timeouts set by NewServer.
const (
	// ReadHeaderTimeout bounds reading a request's headers: a client that
	// trickles them (slowloris) is cut off.
	ReadHeaderTimeout = 5 * time.Second
	// IdleTimeout bounds how long a kept-alive connection waits for its
	// next request.
	IdleTimeout = 120 * time.Second
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
)

// NewServer returns an http.Server for h on addr with the timeouts batchd
// needs: ReadHeaderTimeout and IdleTimeout, and a cap on header size.
//
// ReadTimeout and WriteTimeout are left at zero on purpose: they would run
// from the start of the request and so cut off a synchronous request that
// waits longer than them for its reply (net/http even cancels the
// request's context when the read deadline passes while it waits). The
// Handler from New sets both per request instead: the body must arrive
// within Config.BodyReadTimeout, and the response be written within the
// longest wait the request may have (BodyReadTimeout + TimeoutMax +
// ReplyGrace + 10 s). With another handler, set them yourself.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}
