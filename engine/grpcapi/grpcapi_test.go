package grpcapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/engine/grpcapi"
	"github.com/batchd/batchd/engine/grpcapi/oippb"
	"github.com/batchd/batchd/engine/httpapi"
)

// fakeEngine answers Do with fn (default: "out:" + input, completed),
// counting the calls in flight and the most there ever were.
type fakeEngine struct {
	start time.Time
	fn    func(ctx context.Context, req actors.Request) (actors.Reply, error)

	mu        sync.Mutex
	inFlight  int
	maxFlight int
	reqs      []actors.Request
	changed   chan struct{} // a value after every change of inFlight
}

func newFake() *fakeEngine {
	return &fakeEngine{start: time.Now(), changed: make(chan struct{}, 1<<12)}
}

func (f *fakeEngine) Now() time.Duration { return time.Since(f.start) }

func (f *fakeEngine) Do(ctx context.Context, req actors.Request) (actors.Reply, error) {
	f.mu.Lock()
	f.inFlight++
	f.maxFlight = max(f.maxFlight, f.inFlight)
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	f.changed <- struct{}{}
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
		f.changed <- struct{}{}
	}()
	if f.fn != nil {
		return f.fn(ctx, req)
	}
	return actors.Reply{Outcome: actors.Completed, Output: "out:" + req.Input, Version: "v1"}, nil
}

// waitInFlight waits until exactly n calls are in flight.
func (f *fakeEngine) waitInFlight(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		got := f.inFlight
		f.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-f.changed:
		case <-timeout:
			t.Fatalf("in flight: %d, want %d", got, n)
		}
	}
}

// rig is a gRPC server over a real httpapi.Handler over the fake, and a
// client connected to it on 127.0.0.1.
type rig struct {
	fake *fakeEngine
	h    *httpapi.Handler
	srv  *grpcapi.Server
	cc   *grpc.ClientConn
	cli  oippb.GRPCInferenceServiceClient
}

func newRig(t *testing.T, fake *fakeEngine, hcfg httpapi.Config, gcfg grpcapi.Config) *rig {
	t.Helper()
	h, err := httpapi.New(enginetest.Door(fake), hcfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := grpcapi.New(h, gcfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &rig{fake: fake, h: h, srv: srv, cc: cc, cli: oippb.NewGRPCInferenceServiceClient(cc)}
}

// registry is a config with model "echo" (v1, v2) and "other".
func registry() httpapi.Config {
	c := httpapi.DefaultConfig()
	c.Models = []actors.ModelConfig{
		{Name: "echo", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}, {Name: "v2"}}},
		{Name: "other", Versions: []actors.VersionConfig{{Name: "v1", Weight: 1}}},
	}
	return c
}

func bytesInput(elems ...string) *oippb.ModelInferRequest_InferInputTensor {
	c := &oippb.InferTensorContents{}
	for _, e := range elems {
		c.BytesContents = append(c.BytesContents, []byte(e))
	}
	return &oippb.ModelInferRequest_InferInputTensor{Name: "input", Datatype: "BYTES", Shape: []int64{int64(len(elems))}, Contents: c}
}

func rawOf(elems ...string) []byte {
	var b []byte
	for _, e := range elems {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRPCs calls every unary RPC and checks its answer.
func TestRPCs(t *testing.T) {
	r := newRig(t, newFake(), registry(), grpcapi.DefaultConfig())
	ctx := ctxT(t)
	if live, err := r.cli.ServerLive(ctx, &oippb.ServerLiveRequest{}); err != nil || !live.Live {
		t.Errorf("ServerLive: %v, %v", live, err)
	}
	if ready, err := r.cli.ServerReady(ctx, &oippb.ServerReadyRequest{}); err != nil || !ready.Ready {
		t.Errorf("ServerReady: %v, %v", ready, err)
	}
	if ready, err := r.cli.ModelReady(ctx, &oippb.ModelReadyRequest{Name: "echo"}); err != nil || !ready.Ready {
		t.Errorf("ModelReady: %v, %v", ready, err)
	}
	if _, err := r.cli.ModelReady(ctx, &oippb.ModelReadyRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("ModelReady(nope): %v, want NotFound", err)
	}
	md, err := r.cli.ServerMetadata(ctx, &oippb.ServerMetadataRequest{})
	if err != nil || md.Name != "batchd" {
		t.Errorf("ServerMetadata: %v, %v", md, err)
	}
	mm, err := r.cli.ModelMetadata(ctx, &oippb.ModelMetadataRequest{Name: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if mm.Name != "echo" || strings.Join(mm.Versions, ",") != "v1,v2" || len(mm.Inputs) != 1 || mm.Inputs[0].Datatype != "BYTES" ||
		mm.Inputs[0].Name != "input" || len(mm.Outputs) != 1 || mm.Outputs[0].Name != "output" {
		t.Errorf("ModelMetadata: %v", mm)
	}
	if _, err := r.cli.ModelMetadata(ctx, &oippb.ModelMetadataRequest{Name: "echo", Version: "v9"}); status.Code(err) != codes.NotFound {
		t.Errorf("ModelMetadata(echo v9): %v, want NotFound", err)
	}

	// Contents in, contents out.
	resp, err := r.cli.ModelInfer(ctx, &oippb.ModelInferRequest{ModelName: "echo", ModelVersion: "v1", Id: "req-1", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput("a", "bé")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Id != "req-1" || resp.ModelName != "echo" || resp.ModelVersion != "v1" || len(resp.Outputs) != 1 || len(resp.RawOutputContents) != 0 {
		t.Fatalf("ModelInfer: %v", resp)
	}
	o := resp.Outputs[0]
	if o.Name != "output" || o.Datatype != "BYTES" || len(o.Shape) != 1 || o.Shape[0] != 2 ||
		string(o.Contents.BytesContents[0]) != "out:a" || string(o.Contents.BytesContents[1]) != "out:bé" {
		t.Errorf("ModelInfer output: %v", o)
	}

	// Raw in (Triton's clients' default), raw out.
	in := &oippb.ModelInferRequest_InferInputTensor{Name: "input", Datatype: "BYTES", Shape: []int64{1, 3}}
	resp, err = r.cli.ModelInfer(ctx, &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{rawOf("x", "", "zz")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.RawOutputContents) != 1 || string(resp.RawOutputContents[0]) != string(rawOf("out:x", "out:", "out:zz")) || resp.Outputs[0].Contents != nil {
		t.Errorf("raw ModelInfer: %v", resp)
	}

	// Raw in, but the output asked for as contents (binary_data false).
	out := &oippb.ModelInferRequest_InferRequestedOutputTensor{Name: "output", Parameters: map[string]*oippb.InferParameter{
		"binary_data": {ParameterChoice: &oippb.InferParameter_BoolParam{BoolParam: false}}}}
	resp, err = r.cli.ModelInfer(ctx, &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{in},
		Outputs: []*oippb.ModelInferRequest_InferRequestedOutputTensor{out}, RawInputContents: [][]byte{rawOf("x", "y", "z")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.RawOutputContents) != 0 || len(resp.Outputs[0].Contents.GetBytesContents()) != 3 {
		t.Errorf("raw in, contents asked: %v", resp)
	}
}

// TestProtoVerbatim: the published file is the protocol's, byte for byte
// (the SHA-256 of specification/protocol/open_inference_grpc.proto at
// kserve/open-inference-protocol d49cc23f).
func TestProtoVerbatim(t *testing.T) {
	b, err := os.ReadFile("oippb/open_inference_grpc.proto")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != "0f715460d60b014a23e06ac8e768cfa3d8336221cdb66bd7aeeab6dc27620b0f" {
		t.Errorf("open_inference_grpc.proto has SHA-256 %s: it is not the published file any more", got)
	}
}

func detailsOf(err error) (reason string, retry time.Duration) {
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.Reason
		case *errdetails.RetryInfo:
			retry = d.RetryDelay.AsDuration()
		}
	}
	return reason, retry
}

// TestErrorCodes: every engine answer and every refusal of the handler
// maps to REST's code's gRPC code, with REST's code as ErrorInfo and the
// retry hint as RetryInfo.
func TestErrorCodes(t *testing.T) {
	fake := newFake()
	answers := map[string]func() (actors.Reply, error){}
	rejected := func(r actors.Reason, retry time.Duration) func() (actors.Reply, error) {
		return func() (actors.Reply, error) {
			return actors.Reply{Outcome: actors.Rejected, Reason: r, RetryAfter: retry}, nil
		}
	}
	answers["invalid"] = rejected(actors.ReasonInvalid, 0)
	answers["unknown"] = rejected(actors.ReasonUnknownModel, 0)
	answers["rate"] = rejected(actors.ReasonRateLimited, 3*time.Second)
	answers["quota"] = rejected(actors.ReasonQuota, 0)
	answers["queue_full"] = rejected(actors.ReasonQueueFull, 0)
	answers["overloaded"] = rejected(actors.ReasonOverloaded, 0)
	answers["no_device"] = rejected(actors.ReasonNoDevice, 0)
	answers["draining"] = rejected(actors.ReasonDraining, 0)
	answers["expired"] = func() (actors.Reply, error) {
		return actors.Reply{Outcome: actors.Expired, Reason: actors.ReasonDeadline}, nil
	}
	answers["failed"] = func() (actors.Reply, error) {
		return actors.Reply{Outcome: actors.Failed, Reason: actors.ReasonBackend, Err: "boom"}, nil
	}
	answers["inflight"] = func() (actors.Reply, error) { return actors.Reply{}, engine.ErrInFlightMax }
	answers["closed"] = func() (actors.Reply, error) { return actors.Reply{}, engine.ErrClosed }
	fake.fn = func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		if a := answers[req.Input]; a != nil {
			return a()
		}
		return actors.Reply{Outcome: actors.Completed, Output: req.Input}, nil
	}
	r := newRig(t, fake, registry(), grpcapi.DefaultConfig())
	ctx := ctxT(t)
	infer := func(req *oippb.ModelInferRequest) error {
		_, err := r.cli.ModelInfer(ctx, req)
		return err
	}
	one := func(input string) *oippb.ModelInferRequest {
		return &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput(input)}}
	}
	cases := []struct {
		name   string
		req    *oippb.ModelInferRequest
		code   codes.Code
		reason string
		retry  time.Duration
	}{
		{"engine invalid", one("invalid"), codes.InvalidArgument, "INVALID", 0},
		{"engine unknown model", one("unknown"), codes.NotFound, "UNKNOWN_MODEL", 0},
		{"rate limited", one("rate"), codes.ResourceExhausted, "RATE_LIMITED", 3 * time.Second},
		{"quota", one("quota"), codes.ResourceExhausted, "QUOTA", time.Second},
		{"queue full", one("queue_full"), codes.Unavailable, "QUEUE_FULL", time.Second},
		{"overloaded", one("overloaded"), codes.Unavailable, "OVERLOADED", time.Second},
		{"no device", one("no_device"), codes.Unavailable, "NO_DEVICE", time.Second},
		{"draining", one("draining"), codes.Unavailable, "DRAINING", time.Second},
		{"expired", one("expired"), codes.DeadlineExceeded, "DEADLINE", 0},
		{"backend failed", one("failed"), codes.Internal, "BACKEND", 0},
		{"engine in-flight bound", one("inflight"), codes.Unavailable, "OVERLOADED", time.Second},
		{"engine closed", one("closed"), codes.Unavailable, "DRAINING", time.Second},
		{"unknown model", &oippb.ModelInferRequest{ModelName: "nope", Inputs: one("x").Inputs}, codes.NotFound, "UNKNOWN_MODEL", 0},
		{"unknown version", &oippb.ModelInferRequest{ModelName: "echo", ModelVersion: "v9", Inputs: one("x").Inputs}, codes.NotFound, "UNKNOWN_MODEL", 0},
		{"no input", &oippb.ModelInferRequest{ModelName: "echo"}, codes.InvalidArgument, "BAD_REQUEST", 0},
		{"two inputs", &oippb.ModelInferRequest{ModelName: "echo", Inputs: append(one("x").Inputs, bytesInput("y"))}, codes.InvalidArgument, "BAD_REQUEST", 0},
		{"datatype", &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1}}}}, codes.InvalidArgument, "BAD_REQUEST", 0},
		{"shape", &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "BYTES", Shape: []int64{2}, Contents: one("x").Inputs[0].Contents}}}, codes.InvalidArgument, "BAD_REQUEST", 0},
		{"invalid UTF-8", &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput("\xff")}}, codes.InvalidArgument, "BAD_REQUEST", 0},
		{"raw short", &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "BYTES", Shape: []int64{1}}}, RawInputContents: [][]byte{{5, 0, 0, 0, 'a'}}}, codes.InvalidArgument, "BAD_REQUEST", 0},
		{"raw and contents", &oippb.ModelInferRequest{ModelName: "echo", Inputs: one("x").Inputs, RawInputContents: [][]byte{rawOf("x")}}, codes.InvalidArgument, "BAD_REQUEST", 0},
		{"other output", &oippb.ModelInferRequest{ModelName: "echo", Inputs: one("x").Inputs, Outputs: []*oippb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}}, codes.InvalidArgument, "BAD_REQUEST", 0},
		{"input too long", one(strings.Repeat("a", 64<<10+1)), codes.InvalidArgument, "BAD_REQUEST", 0},
	}
	for _, c := range cases {
		err := infer(c.req)
		reason, retry := detailsOf(err)
		if status.Code(err) != c.code || reason != c.reason || retry != c.retry {
			t.Errorf("%s: %v (reason %q, retry %v), want %v, %q, %v", c.name, err, reason, retry, c.code, c.reason, c.retry)
		}
	}
	// A failed element fails the request, naming it, as REST does.
	err := infer(&oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput("ok", "quota")}})
	if status.Code(err) != codes.ResourceExhausted || !strings.HasPrefix(status.Convert(err).Message(), "data[1]: ") {
		t.Errorf("second element refused: %v", err)
	}
}

// TestAuth: with API keys, a call without a key or with an unknown one is
// Unauthenticated, a key used on a model it may not use PermissionDenied,
// and a good key's requests are its tenant's.
func TestAuth(t *testing.T) {
	cfg := registry()
	cfg.APIKeys = []httpapi.APIKey{{Key: "key-a", Tenant: "alice"}, {Key: "key-b", Tenant: "bob", Models: []string{"other"}}}
	r := newRig(t, newFake(), cfg, grpcapi.DefaultConfig())
	ctx := ctxT(t)
	req := &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput("x")}}
	with := func(auth string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	if _, err := r.cli.ModelInfer(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no key: %v, want Unauthenticated", err)
	}
	if _, err := r.cli.ModelInfer(with("Bearer wrong"), req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("unknown key: %v, want Unauthenticated", err)
	}
	if _, err := r.cli.ModelMetadata(ctx, &oippb.ModelMetadataRequest{Name: "echo"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("metadata without a key: %v, want Unauthenticated", err)
	}
	if _, err := r.cli.ModelInfer(with("Bearer key-b"), req); status.Code(err) != codes.PermissionDenied {
		t.Errorf("bob on echo: %v, want PermissionDenied", err)
	}
	if _, err := r.cli.ModelInfer(with("Bearer key-a"), req); err != nil {
		t.Fatalf("alice: %v", err)
	}
	st, err := oippb.ModelStreamInfer(ctx, r.cc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("stream without a key: %v, want Unauthenticated", err)
	}
	r.fake.mu.Lock()
	defer r.fake.mu.Unlock()
	if len(r.fake.reqs) != 1 || r.fake.reqs[0].Tenant != "alice" {
		t.Errorf("engine requests %+v, want one of tenant alice", r.fake.reqs)
	}
}

// TestDeadline: the call's deadline is the request's, capped at
// TimeoutMax as REST caps timeout_ms; one the engine does not meet is
// DeadlineExceeded.
func TestDeadline(t *testing.T) {
	fake := newFake()
	fake.fn = func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		if req.Input != "hang" {
			return actors.Reply{Outcome: actors.Completed, Output: req.Input}, nil
		}
		<-ctx.Done()
		return actors.Reply{}, ctx.Err()
	}
	cfg := registry()
	cfg.TimeoutMax = 2 * time.Second
	r := newRig(t, fake, cfg, grpcapi.DefaultConfig())
	call := func(input string, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := r.cli.ModelInfer(ctx, &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput(input)}})
		return err
	}
	start := fake.Now()
	if err := call("hang", 100*time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("hung request: %v, want DeadlineExceeded", err)
	}
	if err := call("fast", time.Hour); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.reqs) != 2 {
		t.Fatalf("%d requests", len(fake.reqs))
	}
	// The call's 100 ms, not TimeoutMax: the server's deadline is the
	// client's plus the transit (gRPC sends what is left), so it is
	// bounded from the call's start with a margin far below the 2 s cap.
	// (The clock after the call is no bound: the client gives up first.)
	if d := fake.reqs[0].Deadline; d <= start || d > start+time.Second {
		t.Errorf("100 ms call started at %v: request deadline %v, want within the call's 100 ms (plus transit)", start, d)
	}
	// The hour is capped at TimeoutMax (2 s) from arrival.
	if d := fake.reqs[1].Deadline; d <= 0 || d > fake.Now()+2*time.Second || d < 2*time.Second {
		t.Errorf("hour-long call: request deadline %v, want its arrival + 2 s (clock %v)", d, fake.Now())
	}
}

// TestStream: many requests in flight on one stream, answered out of
// order, each reply matched to its request by id; a failed request is an
// error_message and the stream goes on.
func TestStream(t *testing.T) {
	const n = 300
	fake := newFake()
	release := make(chan struct{})
	fake.fn = func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		if req.Input == "bad" {
			return actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonQuota}, nil
		}
		<-release
		return actors.Reply{Outcome: actors.Completed, Output: "out:" + req.Input, Version: "v1"}, nil
	}
	r := newRig(t, fake, registry(), grpcapi.DefaultConfig())
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the rig's: a failed test must not leave calls hanging
	ctx := ctxT(t)
	st, err := oippb.ModelStreamInfer(ctx, r.cc)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range n {
			in := fmt.Sprint("in-", i)
			if i == 7 {
				in = "bad"
			}
			if err := st.Send(&oippb.ModelInferRequest{ModelName: "echo", Id: fmt.Sprint("id-", i), Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput(in)}}); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
		_ = st.CloseSend()
	}()
	// The refused one comes back first: the others wait for release.
	first, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if first.InferResponse.GetId() != "id-7" || !strings.HasPrefix(first.ErrorMessage, "quota: ") {
		t.Errorf("first reply %v, want id-7's quota error", first)
	}
	free()
	seen := map[string]bool{"id-7": true}
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		id := m.InferResponse.GetId()
		var i int
		if _, err := fmt.Sscanf(id, "id-%d", &i); err != nil || seen[id] || m.ErrorMessage != "" {
			t.Fatalf("reply %v: unknown, repeated or failed id", m)
		}
		seen[id] = true
		if got := string(m.InferResponse.Outputs[0].Contents.BytesContents[0]); got != fmt.Sprint("out:in-", i) {
			t.Errorf("%s: output %q, want out:in-%d", id, got, i)
		}
	}
	if len(seen) != n {
		t.Errorf("%d replies, want %d", len(seen), n)
	}
}

// openStream opens a stream that ends when cancel is called.
func (r *rig) openStream(t *testing.T) (oippb.ModelStreamInferClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := oippb.ModelStreamInfer(ctx, r.cc)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return st, cancel
}

// TestStreamInFlightBound: a stream has at most StreamInFlightMax
// requests in the engine; the rest wait unread, and all are answered.
func TestStreamInFlightBound(t *testing.T) {
	const n, bound = 200, 16
	fake := newFake()
	release := make(chan struct{})
	fake.fn = func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		<-release
		return actors.Reply{Outcome: actors.Completed, Output: req.Input}, nil
	}
	gcfg := grpcapi.DefaultConfig()
	gcfg.StreamInFlightMax = bound
	r := newRig(t, fake, registry(), gcfg)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the rig's: a failed test must not leave calls hanging
	st, err := oippb.ModelStreamInfer(ctxT(t), r.cc)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range n {
			if err := st.Send(&oippb.ModelInferRequest{ModelName: "echo", Id: fmt.Sprint(i), Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput("x")}}); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
		_ = st.CloseSend()
	}()
	fake.waitInFlight(t, bound)
	// The server has all 200 requests to read, and 16 in the engine: a
	// 17th would be in within microseconds; 100 ms of nothing new shows
	// that the stream is not read past its bound (a check of an absence,
	// not a sleep to hide a race).
	quiet := time.After(100 * time.Millisecond)
	for done := false; !done; {
		select {
		case <-fake.changed:
		case <-quiet:
			done = true
		}
	}
	free()
	got := 0
	for {
		if _, err := st.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got++
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if got != n || fake.maxFlight != bound {
		t.Errorf("%d replies (want %d), at most %d in the engine at once (want %d)", got, n, fake.maxFlight, bound)
	}
}

// TestStreamCancel: a client that cancels its stream withdraws its
// requests from the engine.
func TestStreamCancel(t *testing.T) {
	const n = 10
	fake := newFake()
	fake.fn = func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		<-ctx.Done() // only a withdrawal ends these
		return actors.Reply{}, ctx.Err()
	}
	r := newRig(t, fake, registry(), grpcapi.DefaultConfig())
	st, cancel := r.openStream(t)
	defer cancel()
	for range n {
		if err := st.Send(&oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	fake.waitInFlight(t, n)
	cancel()
	fake.waitInFlight(t, 0)
}

// TestStreamTensors: a stream's request of several elements is answered
// once, with every element's output in order, or with the first failed
// element's error; a cancelled stream withdraws every element.
func TestStreamTensors(t *testing.T) {
	fake := newFake()
	fake.fn = func(ctx context.Context, req actors.Request) (actors.Reply, error) {
		switch req.Input {
		case "bad":
			return actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonQuota}, nil
		case "hold":
			<-ctx.Done() // only a withdrawal ends these
			return actors.Reply{}, ctx.Err()
		}
		return actors.Reply{Outcome: actors.Completed, Output: "out:" + req.Input, Version: "v1"}, nil
	}
	r := newRig(t, fake, registry(), grpcapi.DefaultConfig())
	st, cancel := r.openStream(t)
	defer cancel()
	send := func(id string, elems ...string) {
		t.Helper()
		if err := st.Send(&oippb.ModelInferRequest{ModelName: "echo", Id: id, Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput(elems...)}}); err != nil {
			t.Fatal(err)
		}
	}
	send("three", "a", "b", "c")
	send("failed", "a", "bad", "c")
	got := map[string]*oippb.ModelStreamInferResponse{}
	for range 2 {
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got[m.InferResponse.GetId()] = m
	}
	if m := got["three"]; m == nil || m.ErrorMessage != "" {
		t.Errorf("three elements: %v", m)
	} else if outs := m.InferResponse.Outputs[0].Contents.BytesContents; len(outs) != 3 || string(outs[0]) != "out:a" || string(outs[1]) != "out:b" || string(outs[2]) != "out:c" {
		t.Errorf("three elements: outputs %q", outs)
	}
	if m := got["failed"]; m == nil || !strings.HasPrefix(m.ErrorMessage, "quota: data[1]: ") {
		t.Errorf("second element refused: %v, want its quota error naming data[1]", m)
	}
	send("held", "hold", "hold", "hold")
	send("held too", "hold")
	fake.waitInFlight(t, 4)
	cancel()
	fake.waitInFlight(t, 0)
	// Every element withdrawn is counted, as REST counts a request
	// whose client went away, and each request's response once.
	want := []string{
		`batchd_requests_total{model="echo",outcome="cancelled",reason="cancelled",tenant="default"} 4`,
		`batchd_grpc_responses_total{code="Canceled",method="ModelStreamInfer"} 2`,
	}
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		rec := httptest.NewRecorder()
		r.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		missing := ""
		for _, w := range want {
			if !strings.Contains(rec.Body.String(), w) {
				missing = w
			}
		}
		if missing == "" {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("/metrics lacks %s:\n%s", missing, rec.Body.String())
		}
	}
}

// TestMessageSize: a message over MsgMaxBytes is ResourceExhausted.
func TestMessageSize(t *testing.T) {
	gcfg := grpcapi.DefaultConfig()
	gcfg.MsgMaxBytes = 1 << 10
	r := newRig(t, newFake(), registry(), gcfg)
	ctx := ctxT(t)
	small := &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput(strings.Repeat("a", 900))}}
	if _, err := r.cli.ModelInfer(ctx, small); err != nil {
		t.Fatalf("900 bytes: %v", err)
	}
	big := &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput(strings.Repeat("a", 1100))}}
	if _, err := r.cli.ModelInfer(ctx, big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("1,100 bytes over a 1 KiB bound: %v, want ResourceExhausted", err)
	}
}

// TestMetrics: gRPC requests count in REST's series and in
// batchd_grpc_responses_total.
func TestMetrics(t *testing.T) {
	r := newRig(t, newFake(), registry(), grpcapi.DefaultConfig())
	ctx := ctxT(t)
	if _, err := r.cli.ModelInfer(ctx, &oippb.ModelInferRequest{ModelName: "echo", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput("a", "b")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cli.ModelInfer(ctx, &oippb.ModelInferRequest{ModelName: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`batchd_grpc_responses_total{code="OK",method="ModelInfer"} 1`,
		`batchd_grpc_responses_total{code="NotFound",method="ModelInfer"} 1`,
		`batchd_requests_total{model="echo",outcome="completed",reason="none",tenant="default"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestShutdownEndsStreams: Shutdown ends an open stream with Unavailable
// once its requests are answered, and returns.
func TestShutdownEndsStreams(t *testing.T) {
	r := newRig(t, newFake(), registry(), grpcapi.DefaultConfig())
	st, err := oippb.ModelStreamInfer(ctxT(t), r.cc)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&oippb.ModelInferRequest{ModelName: "echo", Id: "a", Inputs: []*oippb.ModelInferRequest_InferInputTensor{bytesInput("x")}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.InferResponse.GetId() != "a" {
		t.Fatalf("reply %v, %v", m, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an open stream: %v", err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("stream after shutdown: %v, want Unavailable", err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("shutdown used up its bound")
	}
}
