package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/grpcapi/oippb"
)

// The load over the Open Inference Protocol's gRPC service: each request
// is one ModelInfer (one element, raw contents, as Triton's clients send)
// or, with GRPCStream, one request on a ModelStreamInfer stream shared by
// many requests in flight and matched to its reply by id.

// grpcStreams is how many ModelStreamInfer streams the generator spreads
// its requests over (round robin); each carries many in flight.
const grpcStreams = 4

// grpcLoad is the gRPC side of a run: the connections (Config.GRPCConns),
// and the streams on them.
type grpcLoad struct {
	cfg     Config
	ccs     []*grpc.ClientConn
	clis    []oippb.GRPCInferenceServiceClient
	ctx     context.Context // the calls' parent: the API key; cancelled by close
	cancel  context.CancelFunc
	streams []*streamMux
	next    atomic.Uint64
	ids     atomic.Uint64
}

func newGRPCLoad(cfg Config) (*grpcLoad, error) {
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.APIKey != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cfg.APIKey)
	}
	l := &grpcLoad{cfg: cfg, ctx: ctx, cancel: cancel}
	for range max(cfg.GRPCConns, 1) {
		// Each its own connection: grpc.NewClient shares nothing
		// between clients.
		cc, err := grpc.NewClient(cfg.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			l.close()
			return nil, fmt.Errorf("load: grpc: %w", err)
		}
		l.ccs = append(l.ccs, cc)
		l.clis = append(l.clis, oippb.NewGRPCInferenceServiceClient(cc))
		if !cfg.GRPCStream {
			continue
		}
		for range grpcStreams {
			st, err := oippb.ModelStreamInfer(ctx, cc)
			if err != nil {
				l.close()
				return nil, fmt.Errorf("load: grpc stream: %w", err)
			}
			m := &streamMux{st: st, pending: map[string]chan *oippb.ModelStreamInferResponse{}, done: make(chan struct{})}
			go m.recvLoop()
			l.streams = append(l.streams, m)
		}
	}
	return l, nil
}

// close ends the streams and the connection, and waits for the streams'
// receivers.
func (l *grpcLoad) close() {
	for _, m := range l.streams {
		m.sendMu.Lock()
		_ = m.st.CloseSend()
		m.sendMu.Unlock()
	}
	l.cancel()
	for _, m := range l.streams {
		<-m.done
	}
	for _, cc := range l.ccs {
		_ = cc.Close()
	}
}

// streamMux is one stream: requests sent under sendMu, replies matched to
// their waiters by id by one receiver.
type streamMux struct {
	st      oippb.ModelStreamInferClient
	sendMu  sync.Mutex
	mu      sync.Mutex
	pending map[string]chan *oippb.ModelStreamInferResponse
	err     error         // why the stream ended; set before done closes
	done    chan struct{} // closed when the receiver has ended
}

func (m *streamMux) recvLoop() {
	defer close(m.done)
	for {
		r, err := m.st.Recv()
		m.mu.Lock()
		if err != nil {
			m.err = err
			for id, ch := range m.pending {
				close(ch)
				delete(m.pending, id)
			}
			m.mu.Unlock()
			return
		}
		id := r.GetInferResponse().GetId()
		ch := m.pending[id]
		delete(m.pending, id)
		m.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// do sends req on the stream and waits for its reply or ctx.
func (m *streamMux) do(ctx context.Context, req *oippb.ModelInferRequest) (*oippb.ModelStreamInferResponse, error) {
	ch := make(chan *oippb.ModelStreamInferResponse, 1)
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return nil, m.err
	}
	m.pending[req.Id] = ch
	m.mu.Unlock()
	m.sendMu.Lock()
	err := m.st.Send(req)
	m.sendMu.Unlock()
	if err == nil {
		select {
		case r, ok := <-ch:
			if ok {
				return r, nil
			}
			<-m.done
			return nil, m.err
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	m.mu.Lock()
	delete(m.pending, req.Id)
	m.mu.Unlock()
	return nil, err
}

// oneGRPC sends one request intended for time intended, and records it.
func (g *generator) oneGRPC(intended time.Time) {
	l := g.grpc
	n := g.seq.Add(1)
	input := makeInput(n, g.cfg.InputLen)
	req := &oippb.ModelInferRequest{
		ModelName:        g.cfg.Model,
		ModelVersion:     g.cfg.Version,
		Inputs:           []*oippb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{append([]byte{byte(len(input)), byte(len(input) >> 8), byte(len(input) >> 16), byte(len(input) >> 24)}, input...)},
	}
	if g.cfg.TimeoutMs > 0 {
		req.Parameters = map[string]*oippb.InferParameter{"timeout": {ParameterChoice: &oippb.InferParameter_Int64Param{Int64Param: int64(g.cfg.TimeoutMs) * 1000}}}
	}
	r := result{intended: intended, sent: time.Now()}
	ctx, cancel := context.WithDeadline(l.ctx, r.sent.Add(g.cfg.Timeout))
	defer cancel()
	var resp *oippb.ModelInferResponse
	var err error
	if l.streams != nil {
		req.Id = "r" + fmt.Sprint(l.ids.Add(1))
		m := l.streams[l.next.Add(1)%uint64(len(l.streams))]
		var sr *oippb.ModelStreamInferResponse
		if sr, err = m.do(ctx, req); err == nil {
			if sr.ErrorMessage != "" {
				r.done, r.status = time.Now(), restStatusOf(sr.ErrorMessage)
				g.rec.record(r)
				return
			}
			resp = sr.InferResponse
		}
	} else {
		resp, err = l.clis[l.next.Add(1)%uint64(len(l.clis))].ModelInfer(ctx, req)
	}
	r.done = time.Now()
	if err != nil {
		switch status.Code(err) {
		case codes.Canceled, codes.DeadlineExceeded, codes.Unknown:
			r.errClass, r.err = classifyGRPC(err), err
		default:
			r.status = httpStatusOf(status.Code(err))
		}
		g.rec.record(r)
		return
	}
	r.status = http.StatusOK
	if g.cfg.Check {
		r.wrong = len(resp.RawOutputContents) != 1 || len(resp.RawOutputContents[0]) < 4 ||
			string(resp.RawOutputContents[0][4:]) != actors.EmulatedOutput(resp.ModelName, resp.ModelVersion, input)
	}
	g.rec.record(r)
}

// httpStatusOf is a gRPC code as REST's status, for the report: the
// reverse of engine/grpcapi's table.
func httpStatusOf(c codes.Code) int {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// restStatusOf is a stream reply's error_message ("code: message", the
// REST code first) as REST's status, for the report.
func restStatusOf(msg string) int {
	code, _, _ := strings.Cut(msg, ":")
	switch code {
	case "bad_request", "invalid":
		return http.StatusBadRequest
	case "unauthorized":
		return http.StatusUnauthorized
	case "forbidden":
		return http.StatusForbidden
	case "unknown_model":
		return http.StatusNotFound
	case "rate_limited", "quota":
		return http.StatusTooManyRequests
	case "queue_full", "overloaded", "no_device", "draining", "cancelled":
		return http.StatusServiceUnavailable
	case "deadline":
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// classifyGRPC names a call that got no answer.
func classifyGRPC(err error) string {
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		return "timeout"
	case codes.Canceled:
		return "cancelled"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "other"
}
