package grpcapi

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/batchd/batchd/engine/grpcapi/oippb"
	"github.com/batchd/batchd/engine/httpapi"
)

// outputName is the one output tensor of every model batchd serves.
const outputName = "output"

// timeoutParam is Triton's per-request timeout parameter, in
// microseconds (an int64_param).
const timeoutParam = "timeout"

func badRequest(format string, args ...any) *httpapi.CallError {
	return &httpapi.CallError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf(format, args...)}
}

// infer runs one ModelInferRequest for c (unary or a stream's).
func (s *Server) infer(ctx context.Context, c httpapi.Caller, req *oippb.ModelInferRequest) (*oippb.ModelInferResponse, *httpapi.CallError) {
	m, cerr := s.api.ResolveModel(c, req.GetModelName(), req.GetModelVersion())
	if cerr != nil {
		return nil, cerr
	}
	in, raw, cerr := input(req)
	if cerr != nil {
		return nil, cerr
	}
	rawOut, cerr := rawOutput(req, raw)
	if cerr != nil {
		return nil, cerr
	}
	timeout, cerr := timeoutOf(ctx, req)
	if cerr != nil {
		return nil, cerr
	}
	version, outs, cerr := s.api.OIPInfer(ctx, c, m, in, timeout)
	if cerr != nil {
		return nil, cerr
	}
	t := &oippb.ModelInferResponse_InferOutputTensor{Name: outputName, Datatype: "BYTES", Shape: []int64{int64(len(outs))}}
	resp := &oippb.ModelInferResponse{ModelName: m.Name(), ModelVersion: version, Id: req.GetId(), Outputs: []*oippb.ModelInferResponse_InferOutputTensor{t}}
	if !rawOut {
		t.Contents = &oippb.InferTensorContents{BytesContents: make([][]byte, len(outs))}
		for i, o := range outs {
			t.Contents.BytesContents[i] = []byte(o)
		}
		return resp, nil
	}
	size := 0
	for _, o := range outs {
		if uint64(len(o)) > math.MaxUint32 {
			return nil, &httpapi.CallError{Status: http.StatusInternalServerError, Code: "internal", Message: "an output of 4 GiB or more has no binary length"}
		}
		size += 4 + len(o)
	}
	b := make([]byte, 0, size)
	for _, o := range outs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(o)))
		b = append(b, o...)
	}
	resp.RawOutputContents = [][]byte{b}
	return resp, nil
}

// input is the request's one input tensor, and whether it came as raw
// contents.
func input(req *oippb.ModelInferRequest) (httpapi.OIPInput, bool, *httpapi.CallError) {
	ins := req.GetInputs()
	if len(ins) != 1 {
		return httpapi.OIPInput{}, false, badRequest("inputs: %d tensors, want exactly 1", len(ins))
	}
	t := ins[0]
	in := httpapi.OIPInput{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: t.GetShape(), Elements: t.GetContents().GetBytesContents()}
	raw := req.GetRawInputContents()
	switch {
	case len(raw) == 0:
		return in, false, nil
	case len(raw) != 1:
		return httpapi.OIPInput{}, false, badRequest("raw_input_contents: %d entries for 1 input", len(raw))
	}
	in.Raw, in.HasRaw = raw[0], true
	return in, true, nil
}

// rawOutput reports whether the reply's output goes as raw contents: as
// the input came, unless the requested output's binary_data parameter
// (Triton's) says otherwise. An outputs list may name "output" alone.
func rawOutput(req *oippb.ModelInferRequest, rawIn bool) (bool, *httpapi.CallError) {
	outs := req.GetOutputs()
	if len(outs) > 1 {
		return false, badRequest("outputs: %d requested; the model has one output, %q", len(outs), outputName)
	}
	raw := rawIn
	for _, o := range outs {
		if o.GetName() != outputName {
			return false, badRequest("outputs: no output %q; the model has one output, %q", truncate(o.GetName()), outputName)
		}
		if p, ok := o.GetParameters()["binary_data"]; ok {
			b, ok := p.GetParameterChoice().(*oippb.InferParameter_BoolParam)
			if !ok {
				return false, badRequest("outputs: parameter binary_data must be a bool")
			}
			raw = b.BoolParam
		}
	}
	return raw, nil
}

// timeoutOf is the request's timeout: what is left of the call's
// deadline, or its timeout parameter (Triton's, in microseconds) if
// shorter; zero when neither is set (the SLO applies). OIPInfer caps it
// at TimeoutMax, as REST caps timeout_ms.
func timeoutOf(ctx context.Context, req *oippb.ModelInferRequest) (time.Duration, *httpapi.CallError) {
	var t time.Duration
	if p, ok := req.GetParameters()[timeoutParam]; ok {
		us, ok := p.GetParameterChoice().(*oippb.InferParameter_Int64Param)
		if !ok || us.Int64Param <= 0 {
			return 0, badRequest("parameter timeout: want a positive int64, in microseconds")
		}
		t = time.Duration(min(us.Int64Param, math.MaxInt64/int64(time.Microsecond))) * time.Microsecond
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return 0, &httpapi.CallError{Status: http.StatusGatewayTimeout, Code: "deadline", Message: "deadline passed on arrival"}
		}
		if t == 0 || left < t {
			t = left
		}
	}
	return t, nil
}

// truncate shortens client text quoted back in an error message.
func truncate(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

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
func (s *Server) modelStreamInfer(st oippb.ModelStreamInferServer) error {
	const method = "ModelStreamInfer"
	ctx := st.Context()
	c, cerr := s.caller(ctx)
	if cerr != nil {
		err := statusOf(cerr)
		s.api.GRPCResponse(method, status.Code(err).String())
		return err
	}
	slots := make(chan struct{}, s.cfg.StreamInFlightMax)
	done := make(chan struct{}) // closed when the handler returns
	defer close(done)
	type recvd struct {
		req *oippb.ModelInferRequest
		err error
	}
	reqs := make(chan recvd)
	go func() {
		for {
			select {
			case slots <- struct{}{}:
			case <-done:
				return
			}
			req, err := st.Recv()
			select {
			case reqs <- recvd{req, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	defer wg.Wait() // no Send after the handler returns
	var sendMu sync.Mutex
	var sendErr error
	for {
		var r recvd
		select {
		case r = <-reqs:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.stopping:
			wg.Wait()
			return status.Error(codes.Unavailable, "server stopping: reconnect")
		}
		if r.err == io.EOF {
			wg.Wait()
			sendMu.Lock()
			defer sendMu.Unlock()
			return sendErr
		}
		if r.err != nil {
			return r.err
		}
		wg.Add(1)
		go func(req *oippb.ModelInferRequest) {
			defer wg.Done()
			defer func() { <-slots }()
			resp, cerr := s.infer(ctx, c, req)
			out := &oippb.ModelStreamInferResponse{InferResponse: resp}
			code := codes.OK
			if cerr != nil {
				code = codeOf(cerr.Status)
				out.ErrorMessage = cerr.Code + ": " + cerr.Message
				out.InferResponse = &oippb.ModelInferResponse{ModelName: req.GetModelName(), ModelVersion: req.GetModelVersion(), Id: req.GetId()}
			}
			sendMu.Lock()
			if sendErr == nil {
				sendErr = st.Send(out)
			}
			sendMu.Unlock()
			s.api.GRPCResponse(method, code.String())
		}(r.req)
	}
}
