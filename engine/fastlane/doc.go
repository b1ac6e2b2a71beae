// Package fastlane serves the plainest HTTP/1.1 requests of a hot route
// itself, on one goroutine a connection, and hands every other request's
// connection to net/http, which serves it from then on as if it had
// accepted it.
//
// Why: on a GPU host the front end, not the GPU, limits batchd, and
// net/http spends more on a request whose handler waits than on one that
// answers at once. While the handler waits for its batch, net/http's
// connection reads in a goroutine of its own to see the client go (a
// goroutine started, parked and woken a request, a read that finds
// nothing, a handful of runtime timers set and reset as deadlines, a
// condition variable), and the handler's goroutine parks and wakes too.
// The lane's connection waits for the reply in that read itself: the
// engine's callback ends it with a deadline in the past (Await). It also
// reads the request and writes the response in one system call each,
// with no per-request goroutine, buffered writer, or deadline that does
// not need to change.
//
// What the lane serves: a request Config.Fast names (method and path),
// whose head is HTTP/1.1 of the plain shape parseHead reads (a path
// without query or escapes, one Host, one Content-Length of at most
// Config.BodyMaxBytes, no Transfer-Encoding, Expect or Upgrade, a
// Connection of keep-alive or close at most) and fits in
// Config.HeadMaxBytes. Anything else, and everything after it on its
// connection, is net/http's: the lane gives it the connection with the
// bytes it read (a listener net/http serves), so that a malformed or
// unusual request is read and answered by net/http exactly as before.
//
// The handler is the http.Server's own, called with the lane's
// ResponseWriter: the whole response is written once it returns (no
// Flusher), with a Date, a Content-Length and a Content-Type if the
// handler set none, as net/http writes them. http.ResponseController's
// SetWriteDeadline bounds the write (set on the connection only when the
// one set leaves less than half the time asked for); SetReadDeadline
// does nothing, the body being read before the handler runs, within the
// server's ReadHeaderTimeout. A handler that waits for a reply calls the
// writer's Await(submit, cancel) instead of blocking (engine/httpapi
// does): submit hands the request over with a done to call once; when
// the client goes meanwhile (its connection ends), cancel withdraws it.
// The request's context ends when its connection does, not when the
// client goes: Await is how a lane request sees that.
//
// Bounds and stopping: a new connection's first head must arrive within
// the server's ReadHeaderTimeout (as net/http has it), a later one within
// ReadHeaderTimeout of its first byte, after at most IdleTimeout between
// requests; a panic in the handler closes the connection and is logged. Shutdown stops as http.Server.Shutdown does: idle connections
// close, a busy one closes once its response is written (with
// Connection: close), and net/http's connections stop by its own
// Shutdown.
//
// Parking (Config.ParkAfter, Linux): a kept-alive connection that has
// waited that long for its next request gives up its goroutine and read
// buffer, and its socket waits in an epoll set of the lane's own until
// the client sends; then it is served on a new goroutine (see parker). An
// idle goroutine's stack is scanned at every garbage collection, which
// with thousands of idle connections doubled the collector's work.
//
// Imported by: engine/server (the HTTP listener). It imports only the
// standard library.
package fastlane
