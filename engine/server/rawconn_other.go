//go:build !linux

package server

import "net"

// rawTCP returns c: raw reads and writes are Linux's only (rawconn_linux.go).
func rawTCP(c net.Conn) net.Conn { return c }
