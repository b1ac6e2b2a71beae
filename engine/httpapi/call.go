package httpapi

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/actors"
)

// engineCall is requests in the engine together without a goroutine
// waiting: the engine's callbacks only keep each answer and the last one
// calls done; the answers are settled (mapped to the API's and counted
// in /metrics) afterwards, on the caller's goroutine, not on the
// engine's one goroutine that hands every reply over. The fast lane's
// wait (awaitCall) and a gRPC stream's request (OIPCall) are this.
type engineCall struct {
	h     *Handler
	reqs  []actors.Request
	start time.Duration
	ids   []uint64
	raw   []rawResult
	left  atomic.Int64 // requests not answered yet
	done  func()
	// one request's, the common case, without allocations of their own
	req1 [1]actors.Request
	id1  [1]uint64
	raw1 [1]rawResult
}

// rawResult is a request's answer as the engine gave it, or the cause
// withdraw gave when it withdrew the request.
type rawResult struct {
	rep       actors.Reply
	err       error
	withdrawn bool
}

// submit hands reqs to the engine; done is called once all are answered,
// unless withdraw takes the last answer.
func (c *engineCall) submit(reqs []actors.Request, done func()) {
	c.reqs, c.done, c.ids, c.raw = reqs, done, c.id1[:], c.raw1[:]
	if n := len(reqs); n > 1 {
		c.ids, c.raw = make([]uint64, n), make([]rawResult, n)
	}
	c.left.Store(int64(len(reqs)))
	for i := range reqs {
		c.ids[i] = c.h.eng.Submit(reqs[i], func(rep actors.Reply, err error) {
			c.raw[i] = rawResult{rep: rep, err: err}
			if c.answered() {
				c.done()
			}
		})
	}
}

// withdraw withdraws the requests still in the engine, their answer
// cause; it reports whether it took the last answer (done is then not
// called). An answered request is not withdrawn.
func (c *engineCall) withdraw(cause error) bool {
	last := false
	for i, id := range c.ids {
		if c.h.eng.Cancel(id) {
			c.raw[i] = rawResult{err: cause, withdrawn: true}
			last = c.answered()
		}
	}
	return last
}

// answered counts one answer in, and reports whether it was the last.
func (c *engineCall) answered() bool {
	left := c.left.Add(-1)
	if left < 0 {
		panic("httpapi: a request answered twice")
	}
	return left == 0
}

// settle fills out with the requests' results, settled on ctx (which
// tells a client's going from an engine failure); a withdrawn request
// settles as its client's going even when ctx has not ended.
func (c *engineCall) settle(ctx context.Context, out []doResult) {
	for i, r := range c.raw {
		rctx := ctx
		if r.withdrawn && ctx.Err() == nil {
			rctx = goneCtx
		}
		out[i].rep, out[i].err = c.h.settle(rctx, c.reqs[i], r.rep, r.err, c.start)
	}
}

// goneCtx is the context of a request whose client went.
var goneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()
