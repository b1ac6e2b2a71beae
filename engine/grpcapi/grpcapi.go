package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/batchd/batchd/engine/grpcapi/oippb"
	"github.com/batchd/batchd/engine/httpapi"
)

// OIP is the protocol as the REST adapter runs it (*httpapi.Handler):
// authentication, the registry, readiness, the infer path and the
// response counter, shared so that gRPC and REST answer alike.
type OIP interface {
	Authenticate(authorization string) (httpapi.Caller, *httpapi.CallError)
	ResolveModel(c httpapi.Caller, model, version string) (httpapi.OIPModel, *httpapi.CallError)
	Ready(ctx context.Context, model string) bool
	OIPInfer(ctx context.Context, c httpapi.Caller, m httpapi.OIPModel, in httpapi.OIPInput, timeout time.Duration) (string, []string, *httpapi.CallError)
	OIPSubmit(c httpapi.Caller, m httpapi.OIPModel, in httpapi.OIPInput, timeout time.Duration, done func(*httpapi.OIPCall)) *httpapi.OIPCall
	GRPCResponse(method, code string)
}

var _ OIP = (*httpapi.Handler)(nil)

// Config bounds the gRPC server. Start from DefaultConfig.
type Config struct {
	// MsgMaxBytes bounds a received message (grpc.MaxRecvMsgSize): more is
	// ResourceExhausted, unread. Default 1 MiB, REST's body bound.
	MsgMaxBytes int
	// StreamInFlightMax bounds the requests of one ModelStreamInfer stream
	// in the engine at once: past it the server reads no more of the
	// stream until one is answered (HTTP/2 flow control then holds the
	// client). Default 128.
	StreamInFlightMax int
	// ConnStreamsMax bounds the concurrent calls (streams) of one
	// connection (grpc.MaxConcurrentStreams). Default 1,024.
	ConnStreamsMax uint32
	// Logger gets the server's own logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns 1 MiB messages, 128 requests in flight per
// stream and 1,024 calls per connection.
func DefaultConfig() Config {
	return Config{MsgMaxBytes: 1 << 20, StreamInFlightMax: 128, ConnStreamsMax: 1024}
}

// Validate reports the first unusable setting.
func (c Config) Validate() error {
	if c.MsgMaxBytes < 1 || c.StreamInFlightMax < 1 || c.ConnStreamsMax < 1 {
		return fmt.Errorf("grpcapi config: MsgMaxBytes %d, StreamInFlightMax %d, ConnStreamsMax %d: must be positive",
			c.MsgMaxBytes, c.StreamInFlightMax, c.ConnStreamsMax)
	}
	return nil
}

// Server is the Open Inference Protocol's gRPC service over an OIP. Make
// it with New, serve with Serve, stop with Shutdown.
type Server struct {
	oippb.UnimplementedGRPCInferenceServiceServer

	api      OIP
	cfg      Config
	srv      *grpc.Server
	stopOnce sync.Once
	stopping chan struct{} // closed when Shutdown begins
}

// New returns the gRPC server of api.
func New(api OIP, cfg Config) (*Server, error) {
	if api == nil {
		return nil, errors.New("grpcapi: no OIP")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{api: api, cfg: cfg, stopping: make(chan struct{})}
	s.srv = grpc.NewServer(
		grpc.MaxRecvMsgSize(cfg.MsgMaxBytes),
		grpc.MaxConcurrentStreams(cfg.ConnStreamsMax),
		// A client may ping every 10 s while it waits on a stream;
		// more often is a misbehaving client, and its connection ends.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.UnaryInterceptor(s.countUnary),
	)
	desc := oippb.StreamingServiceDesc(s.modelStreamInfer)
	s.srv.RegisterService(&desc, s)
	return s, nil
}

// Serve serves gRPC on ln until Shutdown; it returns nil after a
// Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown stops the server gracefully within ctx: streams stop taking
// requests and end (Unavailable) once theirs are answered, new calls are
// refused, and the calls in progress finish (GracefulStop); when ctx ends
// first, the rest are cut off (Stop) and ctx's error returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopping) })
	done := make(chan struct{})
	go func() {
		s.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.srv.Stop()
		<-done
		return ctx.Err()
	}
}

// countUnary counts every unary response in batchd_grpc_responses_total.
func (s *Server) countUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	s.api.GRPCResponse(methodName(info.FullMethod), status.Code(err).String())
	return resp, err
}

// methodName is the RPC's name in a full method path.
func methodName(full string) string {
	return full[strings.LastIndexByte(full, '/')+1:]
}

// statusOf is a refusal as gRPC says it: the REST status mapped to its
// code (the package doc's table), the message, and as details the REST
// code (ErrorInfo's reason, upper-cased) and a 429's or 503's retry hint
// (RetryInfo).
func statusOf(e *httpapi.CallError) error {
	st := status.New(codeOf(e.Status), e.Message)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: strings.ToUpper(e.Code), Domain: errorDomain}}
	if e.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	if d, err := st.WithDetails(details...); err == nil {
		st = d
	}
	return st.Err()
}

// errorDomain is ErrorInfo's domain: batchd's error codes.
const errorDomain = "batchd"

// codeOf maps a REST status to its gRPC code.
func codeOf(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case statusClientClosed:
		return codes.Canceled
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusInternalServerError:
		return codes.Internal
	}
	return codes.Unknown
}

// statusClientClosed is REST's 499: the client went away.
const statusClientClosed = 499

// authorization is the call's authorization metadata ("" for none).
func authorization(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// caller authenticates the call.
func (s *Server) caller(ctx context.Context) (httpapi.Caller, *httpapi.CallError) {
	return s.api.Authenticate(authorization(ctx))
}

// ServerLive answers true: the process answers, so it is live.
func (s *Server) ServerLive(context.Context, *oippb.ServerLiveRequest) (*oippb.ServerLiveResponse, error) {
	return &oippb.ServerLiveResponse{Live: true}, nil
}

// ServerReady answers what GET /v2/health/ready does (as a field: the
// call itself succeeds).
func (s *Server) ServerReady(ctx context.Context, _ *oippb.ServerReadyRequest) (*oippb.ServerReadyResponse, error) {
	return &oippb.ServerReadyResponse{Ready: s.api.Ready(ctx, "")}, nil
}

// ModelReady answers what GET /v2/models/{m}[/versions/{v}]/ready does:
// authenticated, an unknown model NotFound.
func (s *Server) ModelReady(ctx context.Context, req *oippb.ModelReadyRequest) (*oippb.ModelReadyResponse, error) {
	c, cerr := s.caller(ctx)
	if cerr != nil {
		return nil, statusOf(cerr)
	}
	m, cerr := s.api.ResolveModel(c, req.GetName(), req.GetVersion())
	if cerr != nil {
		return nil, statusOf(cerr)
	}
	return &oippb.ModelReadyResponse{Ready: s.api.Ready(ctx, m.Name())}, nil
}

// ServerMetadata names the server. The REST binary tensor data extension
// is not listed: gRPC carries raw tensors in the protocol itself.
func (s *Server) ServerMetadata(context.Context, *oippb.ServerMetadataRequest) (*oippb.ServerMetadataResponse, error) {
	return &oippb.ServerMetadataResponse{Name: "batchd", Version: "1", Extensions: []string{}}, nil
}

// ModelMetadata answers what GET /v2/models/{m}[/versions/{v}] does: one
// BYTES input "input" and one BYTES output "output", of any length.
func (s *Server) ModelMetadata(ctx context.Context, req *oippb.ModelMetadataRequest) (*oippb.ModelMetadataResponse, error) {
	c, cerr := s.caller(ctx)
	if cerr != nil {
		return nil, statusOf(cerr)
	}
	m, cerr := s.api.ResolveModel(c, req.GetName(), req.GetVersion())
	if cerr != nil {
		return nil, statusOf(cerr)
	}
	return &oippb.ModelMetadataResponse{
		Name:     m.Name(),
		Versions: m.Versions(),
		Platform: "batchd",
		Inputs:   []*oippb.ModelMetadataResponse_TensorMetadata{{Name: "input", Datatype: "BYTES", Shape: []int64{-1}}},
		Outputs:  []*oippb.ModelMetadataResponse_TensorMetadata{{Name: outputName, Datatype: "BYTES", Shape: []int64{-1}}},
	}, nil
}

// ModelInfer runs one infer request: POST /v2/models/{m}/infer's path.
func (s *Server) ModelInfer(ctx context.Context, req *oippb.ModelInferRequest) (*oippb.ModelInferResponse, error) {
	c, cerr := s.caller(ctx)
	if cerr != nil {
		return nil, statusOf(cerr)
	}
	resp, cerr := s.infer(ctx, c, req)
	if cerr != nil {
		return nil, statusOf(cerr)
	}
	return resp, nil
}
