package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/fidelity"
)

// TestParseServing: the URL is read from the very line `batchd serve`
// prints, so a change to that line breaks this test, not `make fidelity`.
func TestParseServing(t *testing.T) {
	f, err := config.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	printReady(&buf, f, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 41234})
	first, _, _ := strings.Cut(buf.String(), "\n")
	if u, ok := fidelity.ServingURL(first); !ok || u != "http://127.0.0.1:41234" {
		t.Errorf("ServingURL(%q) = %q, %v", first, u, ok)
	}
	for _, l := range []string{"try:", "  curl -s http://127.0.0.1:1/v1/models/echo/infer", ""} {
		if u, ok := fidelity.ServingURL(l); ok {
			t.Errorf("ServingURL(%q) = %q: not a ready line", l, u)
		}
	}
}

func TestFidelityUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--net-delay", "soon"}, "--net-delay"},
		{[]string{"--warmup", "10s", "--duration", "10s"}, "--warmup"},
		{[]string{"--rate", "0"}, "--rate 0"},
		{[]string{"--duration", "1h"}, "at most 10m0s"},
		{[]string{"--target", "-1"}, "--target"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		_, err := parseFidelity(c.args, io.Discard)
		if err == nil || !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
	o, err := parseFidelity([]string{"--net-delay", "300us"}, io.Discard)
	if err != nil || o.cfg.NetDelay != 300*time.Microsecond || o.cfg.RateRPS != 800 || o.cfg.Devices != 4 {
		t.Errorf("defaults and --net-delay: %+v, %v", o, err)
	}
	if o, _ := parseFidelity(nil, io.Discard); o.cfg.NetDelay >= 0 {
		t.Errorf("--net-delay auto became %v", o.cfg.NetDelay)
	}
}
