// Package rawtcp gives a server's accepted TCP connections reads and
// writes that are raw system calls (syscall.RawSyscall), made inside the
// connection's syscall.RawConn: they wait in the runtime's network poller
// as net.TCPConn's do, with its deadlines and Close, but the runtime is not
// told of them. A call it is told of, after an idle spell, wakes its
// monitor thread (sysmon) from its deep sleep, which then ticks every 20
// µs for a while: once a request for a server between requests, about a
// quarter of its CPU (RESULTS.md). The socket is non-blocking, so neither
// call can block a thread.
//
// Linux only; elsewhere, and under the race detector, Wrap returns the
// connection as it is.
//
// Imported by: engine/server (the HTTP and gRPC listeners; and
// engine/generate's stream figures test). It imports only the standard
// library.
package rawtcp
