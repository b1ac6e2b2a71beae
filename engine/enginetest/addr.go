package enginetest

import (
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
)

// ClosedAddr is a loopback address ("127.0.0.1:PORT") that nobody listens
// on now, for tests of what a client sees when nothing answers. Its port
// is below the kernel's ephemeral range (from 32768 on Linux): a port
// taken with ":0" and closed is one the kernel may pick as the source port
// of the very connection that dials it, and a TCP connection to itself
// then opens (a simultaneous open) instead of being refused.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	for range 50 {
		addr := "127.0.0.1:" + strconv.Itoa(20000+rand.IntN(12000))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // in use: someone may listen there
		}
		ln.Close()
		return addr
	}
	t.Fatal("no closed loopback port below 32000")
	return ""
}
