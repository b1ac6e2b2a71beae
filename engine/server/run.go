package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/config"
)

// Run runs a node of f until ctx ends (`batchd serve`: SIGTERM or SIGINT),
// then shuts it down gracefully within http.shutdown_timeout. Once
// requests can be sent it tells a person on stdout where the server is and
// how to call it, and listening, when not nil, the bound address.
func Run(ctx context.Context, f *config.File, opts Options, stdout io.Writer, listening func(net.Addr)) error {
	srv, err := New(ctx, f, opts)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	printReady(stdout, f, srv.Addr())
	if listening != nil {
		listening(srv.Addr())
	}
	select {
	case err := <-served:
		return err // serving failed, and the server has stopped itself
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), f.HTTP.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	return errors.Join(<-served, err)
}

// printReady tells a person where the server is and how to call it. Its
// first line is the one engine/fidelity's ServingURL reads.
func printReady(w io.Writer, f *config.File, addr net.Addr) {
	base := "http://" + dialable(addr)
	model := "echo"
	if len(f.Models) > 0 {
		model = f.Models[0].Name
	}
	// With tenants, the hint sends the first one's key: from the variable
	// the file names, else a placeholder (a key written in the file is not
	// echoed to the terminal).
	auth := ""
	if len(f.Tenants) > 0 {
		key := "YOUR_API_KEY"
		if env := f.Tenants[0].APIKeyEnv; env != "" {
			key = "$" + env
		}
		auth = ` -H "Authorization: Bearer ` + key + `"`
	}
	fmt.Fprintf(w, "batchd serving on %s (%s runtime, %d %s devices, batches of up to %d)\n",
		base, engine.RuntimeName, f.Devices.Count, f.Devices.Backend, f.Policy.BatchMax)
	fmt.Fprintf(w, "try:\n  curl -s%s %s/v1/models/%s/infer -d '{\"input\": \"hello\"}'\n", auth, base, model)
	fmt.Fprintf(w, "status page: %s/\n", base)
}

// dialable turns a listen address into one a client can dial: an
// unspecified host (":8080", "0.0.0.0:8080") becomes loopback.
func dialable(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if ip != nil && ip.To4() == nil {
			host = "::1"
		} else {
			host = "127.0.0.1"
		}
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}
