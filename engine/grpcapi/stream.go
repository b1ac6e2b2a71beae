package grpcapi

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/batchd/batchd/engine/grpcapi/oippb"
	"github.com/batchd/batchd/engine/httpapi"
)

// modelStreamInfer serves Triton's ModelStreamInfer: every request read
// from the stream runs as ModelInfer would, at most StreamInFlightMax at
// once (past that, the stream is not read until one is answered), and
// each reply is sent as soon as it is in, so replies come in the order
// they finish, each with its request's id. A request that fails is
// answered with error_message (its REST code, then the message) and an
// infer_response naming its model and id; the stream goes on. The
// stream's caller is authenticated once, from its metadata. When the
// client cancels the stream, the requests still in the engine are
// withdrawn; when the server stops, the stream takes no more requests,
// answers those it took, and ends with Unavailable.
//
// Two goroutines a stream, none a request: one reads and submits
// (httpapi's OIPSubmit), the handler's own sends the replies, which the
// engine hands over (OIPSubmit's done) through a queue that cannot fill.
// Without a goroutine a request (each had waited in Do) a stream request
// takes 0.82x the server CPU on the development VM (RESULTS.md); the GPU
// host, where the streams' target is, is not measured yet.
func (s *Server) modelStreamInfer(st oippb.ModelStreamInferServer) error {
	ctx := st.Context()
	c, cerr := s.caller(ctx)
	if cerr != nil {
		err := statusOf(cerr)
		s.api.GRPCResponse(streamMethod, status.Code(err).String())
		return err
	}
	sm := newStream(s, c, s.cfg.StreamInFlightMax)
	defer close(sm.quit)
	go sm.read(ctx, st)
	return sm.send(ctx, st)
}

const streamMethod = "ModelStreamInfer"

// stream is one ModelStreamInfer call's requests in flight. A request
// holds a slot from its read until its reply is sent; replies wait in
// out, which has room for one a slot, so the engine's goroutine that
// hands a reply over never waits.
type stream struct {
	s       *Server
	c       httpapi.Caller
	free    chan int         // slots not held
	out     chan streamReply // replies not sent yet
	quit    chan struct{}    // closed when the handler returns
	recvEnd chan error       // the reader's last Recv error (io.EOF: the client is done)

	mu     sync.Mutex
	taken  int64              // requests taken, each answered once
	closed bool               // no more are taken
	gone   bool               // the client went: what is taken is withdrawn
	calls  []*httpapi.OIPCall // by slot: the call to withdraw if the client goes
}

// streamReply is a request answered: its call's outcome to take, or the
// refusal of its input (cerr).
type streamReply struct {
	slot int
	ic   *inferCall
	call *httpapi.OIPCall
	cerr *httpapi.CallError
}

func newStream(s *Server, c httpapi.Caller, slots int) *stream {
	sm := &stream{s: s, c: c, free: make(chan int, slots), out: make(chan streamReply, slots),
		quit: make(chan struct{}), recvEnd: make(chan error, 1), calls: make([]*httpapi.OIPCall, slots)}
	for i := range slots {
		sm.free <- i
	}
	return sm
}

// read takes the stream's requests, each once a slot is free, until the
// client is done or the stream closes.
func (sm *stream) read(ctx context.Context, st oippb.ModelStreamInferServer) {
	for {
		var slot int
		select {
		case slot = <-sm.free:
		case <-sm.quit:
			return
		}
		req, err := st.Recv()
		if err != nil {
			sm.recvEnd <- err
			return
		}
		sm.mu.Lock()
		if sm.closed {
			// The server stops: a request read now is not taken, and
			// its client sees the stream end without its reply.
			sm.mu.Unlock()
			return
		}
		sm.taken++
		sm.mu.Unlock()
		sm.submit(ctx, slot, req)
	}
}

// submit runs one request in slot.
func (sm *stream) submit(ctx context.Context, slot int, req *oippb.ModelInferRequest) {
	ic, cerr := sm.s.prepare(ctx, sm.c, req)
	if cerr != nil {
		sm.queue(streamReply{slot: slot, ic: &inferCall{req: req}, cerr: cerr})
		return
	}
	p := &ic // one allocation, not the struct copied at every hand-over
	call := sm.s.api.OIPSubmit(sm.c, ic.m, ic.in, ic.timeout, func(call *httpapi.OIPCall) {
		sm.queue(streamReply{slot: slot, ic: p, call: call})
	})
	sm.mu.Lock()
	gone := sm.gone
	if !gone {
		sm.calls[slot] = call // perhaps answered already: withdrawing it then does nothing
	}
	sm.mu.Unlock()
	if gone {
		call.Cancel(ctx)
	}
}

// queue hands an answered request to the sender. It runs on the engine's
// goroutine that hands all replies over, so it does no more than that:
// the outcome and the response are the sender's work.
func (sm *stream) queue(r streamReply) {
	select {
	case sm.out <- r:
	default:
		panic("grpcapi: a stream's replies outnumber its slots")
	}
}

// message is r's reply on the stream, and its code for the metrics.
func (sm *stream) message(ctx context.Context, r streamReply) (*oippb.ModelStreamInferResponse, codes.Code) {
	var resp *oippb.ModelInferResponse
	cerr := r.cerr
	if r.call != nil {
		var version string
		var outs []string
		if version, outs, cerr = r.call.Outcome(ctx); cerr == nil {
			resp, cerr = r.ic.response(version, outs)
		}
	}
	if cerr != nil {
		req := r.ic.req
		return &oippb.ModelStreamInferResponse{
			ErrorMessage:  cerr.Code + ": " + cerr.Message,
			InferResponse: &oippb.ModelInferResponse{ModelName: req.GetModelName(), ModelVersion: req.GetModelVersion(), Id: req.GetId()},
		}, codeOf(cerr.Status)
	}
	return &oippb.ModelStreamInferResponse{InferResponse: resp}, codes.OK
}

// send sends the replies as they come, and ends the stream: when the
// client is done and every request taken is answered; when the server
// stops and the same holds; or when the client goes, once its requests
// are withdrawn (or answered, unsent), each counted in the metrics.
func (sm *stream) send(ctx context.Context, st oippb.ModelStreamInferServer) error {
	var (
		sent    int64
		sendErr error
		eof     bool  // the client is done sending
		gone    error // the client went: the stream's end
	)
	recvEnd, stopping, ctxDone := sm.recvEnd, sm.s.stopping, ctx.Done()
	for {
		if eof || stopping == nil || gone != nil {
			sm.mu.Lock()
			all := sent == sm.taken
			sm.mu.Unlock()
			switch {
			case all && gone != nil:
				return gone
			case all && eof:
				return sendErr
			case all:
				return status.Error(codes.Unavailable, "server stopping: reconnect")
			}
		}
		select {
		case r := <-sm.out:
			msg, code := sm.message(ctx, r)
			if sendErr == nil && gone == nil {
				sendErr = st.Send(msg)
			}
			sent++
			sm.mu.Lock()
			sm.calls[r.slot] = nil
			sm.mu.Unlock()
			sm.free <- r.slot
			sm.s.api.GRPCResponse(streamMethod, code.String())
		case err := <-recvEnd:
			recvEnd = nil
			if err == io.EOF {
				sm.close()
				eof = true
				continue
			}
			// The stream broke: its context ends with it, and this
			// one says so now to the withdrawn requests' outcomes.
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			cancel()
			gone, ctxDone = err, nil
			sm.withdraw(ctx)
		case <-stopping:
			stopping = nil
			sm.close()
		case <-ctxDone:
			gone, ctxDone = status.FromContextError(ctx.Err()).Err(), nil
			sm.withdraw(ctx)
		}
	}
}

// close takes no more requests.
func (sm *stream) close() {
	sm.mu.Lock()
	sm.closed = true
	sm.mu.Unlock()
}

// withdraw takes no more requests, and withdraws those in the engine.
func (sm *stream) withdraw(ctx context.Context) {
	sm.mu.Lock()
	sm.closed, sm.gone = true, true
	calls := make([]*httpapi.OIPCall, 0, len(sm.calls))
	for _, call := range sm.calls {
		if call != nil {
			calls = append(calls, call)
		}
	}
	sm.mu.Unlock()
	for _, call := range calls {
		call.Cancel(ctx)
	}
}
