//go:build !linux

package rawtcp

import "net"

// Wrap returns c: raw reads and writes are Linux's only (conn_linux.go).
func Wrap(c net.Conn) net.Conn { return c }
