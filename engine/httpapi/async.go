package httpapi

import (
	"context"
	"sync"
	"time"
)

// Async request states, as GET /v1/requests/{id} reports them.
//
// queued and running are an approximation: the engine reports nothing
// between accepting a request and answering it (the batcher does not tell
// the front door when a batch is dispatched). An async request is queued
// from its 202 until its goroutine hands it to the engine, and running from
// then until the reply: "running" means "in the engine", which includes
// its wait in the batcher's queue. The reply's queue_ms and compute_ms then
// say how the time was really spent.
const (
	statusQueued    = "queued"
	statusRunning   = "running"
	statusCompleted = "completed"
	statusFailed    = "failed"
	statusCancelled = "cancelled"
	statusExpired   = "expired"
)

// asyncEntry is one async request. Its result fields are written once,
// under the store's lock, when it finishes.
type asyncEntry struct {
	id     string
	tenant string
	model  string
	status string
	// cancel ends the context of the goroutine serving the request (set
	// while it is pending), so Shutdown can cut off what the engine does
	// not answer in time.
	cancel context.CancelFunc
	result *inferResponse
	err    *apiError
	// doneAt is when it finished, on the engine clock.
	doneAt time.Duration
}

// asyncStore holds async requests: pending ones (at most inFlightMax) and
// finished ones (at most resultsMax, none older than retention). It sweeps
// on every insert, finish and lookup, so it needs no goroutine of its own
// and its map never holds more than inFlightMax+resultsMax entries.
type asyncStore struct {
	inFlightMax, resultsMax int
	retention               time.Duration

	// wg counts the goroutines serving pending requests. It is added to
	// under mu, in add, which also checks closed: once close has returned,
	// nothing is added, so Shutdown's Wait is sound.
	wg sync.WaitGroup

	mu      sync.Mutex
	entries map[string]*asyncEntry
	pending int
	// done lists finished ids in the order they finished, from head on:
	// the sweep drops from the front, the oldest first.
	done   []string
	head   int
	closed bool
}

func newAsyncStore(inFlightMax, resultsMax int, retention time.Duration) *asyncStore {
	return &asyncStore{
		inFlightMax: inFlightMax,
		resultsMax:  resultsMax,
		retention:   retention,
		entries:     make(map[string]*asyncEntry),
	}
}

// errAsyncFull and errAsyncClosed are the store's refusals; the handler
// turns them into 503s.
var (
	errAsyncFull   = &apiError{code: codeOverloaded, msg: "too many async requests in flight"}
	errAsyncClosed = &apiError{code: codeDraining, msg: "shutting down: not accepting async requests"}
)

// add registers a pending request, unless the store is closed or full. On
// success the caller must start the request's goroutine, which calls
// finish and then s.wg.Done.
func (s *asyncStore) add(e *asyncEntry, now time.Duration) *apiError {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	switch {
	case s.closed:
		return errAsyncClosed
	case s.pending >= s.inFlightMax:
		return errAsyncFull
	}
	e.status = statusQueued
	s.entries[e.id] = e
	s.pending++
	s.wg.Add(1)
	return nil
}

// start marks a pending request as handed to the engine.
func (s *asyncStore) start(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[id]; e != nil && e.status == statusQueued {
		e.status = statusRunning
	}
}

// finish records a request's result and starts its retention.
func (s *asyncStore) finish(id, status string, res *inferResponse, err *apiError, now time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[id]
	if e == nil || e.cancel == nil {
		return // not pending: cannot happen, the goroutine finishes once
	}
	e.status, e.result, e.err, e.doneAt, e.cancel = status, res, err, now, nil
	s.pending--
	s.done = append(s.done, id)
	s.sweep(now)
}

// get returns a snapshot of the request, if tenant made it and it is still
// kept. Another tenant's request is reported as absent, so ids do not leak.
func (s *asyncStore) get(id, tenant string, now time.Duration) (asyncEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	e := s.entries[id]
	if e == nil || e.tenant != tenant {
		return asyncEntry{}, false
	}
	snap := *e
	snap.cancel = nil
	return snap, true
}

// sweep drops finished requests past their retention or beyond resultsMax,
// oldest first. Called with mu held.
func (s *asyncStore) sweep(now time.Duration) {
	for s.head < len(s.done) {
		id := s.done[s.head]
		e := s.entries[id]
		kept := len(s.done) - s.head
		if kept <= s.resultsMax && now-e.doneAt < s.retention {
			break
		}
		delete(s.entries, id)
		s.done[s.head] = ""
		s.head++
	}
	// Reclaim the dropped prefix once it is most of the slice, so the
	// slice stays within twice resultsMax.
	if s.head > 64 && s.head*2 >= len(s.done) {
		n := copy(s.done, s.done[s.head:])
		clear(s.done[n:])
		s.done = s.done[:n]
		s.head = 0
	}
}

// close refuses further requests; those pending run on.
func (s *asyncStore) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

// cancelPending ends the contexts of all pending requests.
func (s *asyncStore) cancelPending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.entries {
		if e.cancel != nil {
			e.cancel()
			n++
		}
	}
	return n
}

// size is the number of entries held, for tests of the bounds.
func (s *asyncStore) size() (entries, pending int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries), s.pending
}
