// Package jobs makes batchd's async and batch submissions durable: a job
// (one async infer, or a batch of up to Config.ItemsMax inputs) is written
// and synced to an embedded store before the client hears 202, its items
// are fed to the engine from the store a bounded window at a time, and each
// item's result is written as it finishes. A job survives a crash (SIGKILL)
// of the server: on Open every item left running is queued again with an
// attempt counted, and finished results stay readable until retention
// drops them.
//
// Imported by: engine/httpapi (the /v1 async, batch and requests routes),
// engine/httpapi/metrics (the runner's Stats, for the batchd_job_* series),
// engine/config (its defaults), engine/server (opens the store, starts and
// stops the runner; and tests). It imports actors for the request and
// reply types, engine for the front door it feeds (engine.FrontDoor), and
// go.etcd.io/bbolt; never a runtime adapter.
//
// # The store
//
// Store is one bbolt file: pure Go, ACID transactions, every commit
// fsynced (NoSync is never set), maintained by etcd. Buckets:
//
//	meta    format version (2), sequence, counters (jobs and items held)
//	jobs    job id -> CRC-32C + job record (JSON): tenant, model, counts,
//	        status
//	items   job id -> sub-bucket: item index (uint32 big-endian, so a
//	        cursor walks input order) -> status byte + CRC-32C + item
//	        (JSON)
//	staging job id -> nothing, for a submission written in parts (Begin)
//	        and not yet committed: Open drops what a crash left
//	idem    tenant NUL idempotency key -> job id
//	active  sequence (uint64 big-endian) + job id, for unfinished jobs in
//	        submission order: what the runner feeds
//	done    finish time (unix ns, big-endian) + job id, for finished jobs
//	        oldest first: what the retention sweep drops
//
// A submission is one transaction, shared with the submissions that
// arrive within 2 ms of it (bbolt's Batch): an async infer is a job of
// one item, and one fsync each would cap them at the disk's sync rate.
//
// Everything is bounded: items per job (ItemsMax), jobs held (JobsMax),
// items held (ItemsStoredMax), finished jobs kept (RetainMax, and none
// older than RetainAge; a background sweep every SweepEvery). A submission
// over a bound is refused (ErrTooManyItems, ErrFull) and changes nothing.
// A corrupt, truncated or empty (0-byte) file is a start-up error naming
// the file (ErrCorrupt), never a silent loss: Open checks the whole file
// (bbolt's Tx.Check) and turns a bbolt panic into an error. bbolt checks
// its pages' structure, not the bytes of the records in them: each record
// carries a CRC-32C of its key and bytes, checked whenever it is read. A
// damaged record costs only its item (failed, code "corrupt") or its job
// (given up), logged at error level with the job's id; the other jobs run
// on. A file of format 1 (no checksums) is refused (ErrFormat).
//
// # Delivery semantics
//
// Execution is at least once: an item that was running when the server
// died is run again (inference is side-effect free, so that is safe), and
// Item.Attempts counts every run started, interrupted ones included; past
// Config.AttemptMax interrupted runs the item fails rather than crash the
// server for ever. The visible result is exactly once: an item's result is
// written once, in the same transaction that moves it out of running, and
// never rewritten; a reply that arrives for an item no longer running (a
// superseded run) is dropped. A retried submission with the same
// Idempotency-Key and the same body (BodyHash) returns the original job;
// with a different body it is refused (ErrConflict).
//
// # The runner
//
// Runner feeds the store's queued items to the engine through
// engine.FrontDoor's Submit, with no goroutine per item (one loop
// goroutine submits, and the engine's answers come back to it on a
// channel as big as the window), oldest job first and round robin between jobs, with at most WindowJob
// items of one job and WindowTotal of all jobs in the engine at once: a
// 10,000-item job waits in the store, not in the batcher's queues, and
// goes through the same per-tenant fairness as everyone (its requests
// carry the job's tenant). Items that admission refuses for load (queue
// full, overloaded, rate limited, quota, no device, draining) or that miss
// the batcher's SLO are retried with backoff up to RetryMax times, not
// failed: a job is patient. Results are written in group commits (at most
// FlushItems per transaction, or after FlushEvery), so 10,000 items do not
// cost 10,000 fsyncs; a result is visible only once committed. Cancel
// marks the queued items cancelled in the store and withdraws the job's
// items in flight from the engine.
package jobs
