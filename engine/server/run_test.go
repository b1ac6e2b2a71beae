package server

import (
	"bytes"
	"net"
	"strings"
	"testing"

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
	for _, l := range []string{"try:", "  curl -s http://127.0.0.1:1/v1/models/echo/infer", "status page: http://127.0.0.1:1/", ""} {
		if u, ok := fidelity.ServingURL(l); ok {
			t.Errorf("ServingURL(%q) = %q: not a ready line", l, u)
		}
	}
}

func TestDialable(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:80": "127.0.0.1:80",
		"0.0.0.0:80":   "127.0.0.1:80",
		"[::]:80":      "[::1]:80",
		"[::1]:80":     "[::1]:80",
		"10.1.2.3:80":  "10.1.2.3:80",
	} {
		a, err := net.ResolveTCPAddr("tcp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := dialable(a); got != want {
			t.Errorf("dialable(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestReadyHintNamesTheTenantsKey: with tenants, the printed curl line
// sends the first tenant's key from the variable its config names.
func TestReadyHintNamesTheTenantsKey(t *testing.T) {
	f := config.Default()
	f.Tenants = []config.Tenant{{APIKeyEnv: "ALICE_KEY"}}
	f.Tenants[0].Name = "alice"
	var buf bytes.Buffer
	printReady(&buf, f, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9000})
	if !strings.Contains(buf.String(), `-H "Authorization: Bearer $ALICE_KEY"`) {
		t.Errorf("hint %q does not send $ALICE_KEY", buf.String())
	}
}
