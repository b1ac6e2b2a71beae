// Package workerproc runs a device's batches in a worker process: any
// program, in any language, that speaks batchd's worker protocol over its
// stdin and stdout (PROTOCOL.md beside this file; python/batchd_worker.py
// is a one-file Python side of it). An operator with a model serves it by
// naming a command in the serve config (devices.backend: worker,
// devices.worker.cmd), without writing Go.
//
// Backend is one more engine.Backend: one process per device, one batch at
// a time, framed (a 4-byte length, a type, the fields) and binary-safe,
// after a versioned handshake. Per-item errors and whole-batch errors come
// back as such; a worker that exits, writes what the protocol does not
// allow (a bad frame, a wrong count or batch id) or does not answer before
// the batch's context ends is a device fault: Run returns an error
// wrapping engine.ErrDeviceFault, so the device actor re-queues the batch
// elsewhere and restarts the device with its own backoff and quarantine,
// and the backend kills the process group and starts a new process
// (at once after a fault, with a doubling backoff after failures in a row,
// a bounded number of times unasked). The worker's stderr goes to the log
// line by line, each prefixed with the device's name, cut at a bounded
// length and rate.
//
// Why pipes and not a Unix socket: no path to create, secure and clean up,
// no connect race at start, and the worker's death is an end of file on
// the very pipe batchd reads, at once. A worker's own prints would corrupt
// the protocol on stdout, so the Python helper moves them to stderr.
//
// Imported by: engine/config (the defaults of devices.worker and the
// mapping onto Config), engine/server (the worker backend). It imports
// engine.
package workerproc
