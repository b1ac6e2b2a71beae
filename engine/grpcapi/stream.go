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
// A goroutine a request, each waiting in Do, cost the H200 host about a
// fifth of the stream's CPU a request.
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

type streamReply struct {
	slot int
	msg  *oippb.ModelStreamInferResponse
	code codes.Code
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
		sm.reply(slot, req, nil, cerr)
		return
	}
	call := sm.s.api.OIPSubmit(sm.c, ic.m, ic.in, ic.timeout, func(version string, outs []string, cerr *httpapi.CallError) {
		var resp *oippb.ModelInferResponse
		if cerr == nil {
			resp, cerr = ic.response(version, outs)
		}
		sm.reply(slot, req, resp, cerr)
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

// reply queues a request's reply (resp, or cerr's error message).
func (sm *stream) reply(slot int, req *oippb.ModelInferRequest, resp *oippb.ModelInferResponse, cerr *httpapi.CallError) {
	r := streamReply{slot: slot, msg: &oippb.ModelStreamInferResponse{InferResponse: resp}, code: codes.OK}
	if cerr != nil {
		r.code = codeOf(cerr.Status)
		r.msg.ErrorMessage = cerr.Code + ": " + cerr.Message
		r.msg.InferResponse = &oippb.ModelInferResponse{ModelName: req.GetModelName(), ModelVersion: req.GetModelVersion(), Id: req.GetId()}
	}
	select {
	case sm.out <- r:
	default:
		panic("grpcapi: a stream's replies outnumber its slots")
	}
}

// send sends the replies as they come, and ends the stream: when the
// client is done and every request taken is answered; when the server
// stops and the same holds; or at once when the client goes, its
// requests withdrawn.
func (sm *stream) send(ctx context.Context, st oippb.ModelStreamInferServer) error {
	var (
		sent    int64
		sendErr error
		eof     bool // the client is done sending
	)
	recvEnd, stopping := sm.recvEnd, sm.s.stopping
	for {
		if eof || stopping == nil {
			sm.mu.Lock()
			all := sent == sm.taken
			sm.mu.Unlock()
			switch {
			case all && eof:
				return sendErr
			case all:
				return status.Error(codes.Unavailable, "server stopping: reconnect")
			}
		}
		select {
		case r := <-sm.out:
			if sendErr == nil {
				sendErr = st.Send(r.msg)
			}
			sent++
			sm.mu.Lock()
			sm.calls[r.slot] = nil
			sm.mu.Unlock()
			sm.free <- r.slot
			sm.s.api.GRPCResponse(streamMethod, r.code.String())
		case err := <-recvEnd:
			recvEnd = nil
			if err != io.EOF {
				sm.withdraw(ctx)
				return err
			}
			sm.close()
			eof = true
		case <-stopping:
			stopping = nil
			sm.close()
		case <-ctx.Done():
			sm.withdraw(ctx)
			return status.FromContextError(ctx.Err()).Err()
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
