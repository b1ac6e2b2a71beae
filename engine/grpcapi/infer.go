package grpcapi

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"time"

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

// infer runs one ModelInferRequest for c (unary).
func (s *Server) infer(ctx context.Context, c httpapi.Caller, req *oippb.ModelInferRequest) (*oippb.ModelInferResponse, *httpapi.CallError) {
	ic, cerr := s.prepare(ctx, c, req)
	if cerr != nil {
		return nil, cerr
	}
	version, outs, cerr := s.api.OIPInfer(ctx, c, ic.m, ic.in, ic.timeout)
	if cerr != nil {
		return nil, cerr
	}
	return ic.response(version, outs)
}

// inferCall is a ModelInferRequest resolved and checked, to submit.
type inferCall struct {
	req     *oippb.ModelInferRequest
	m       httpapi.OIPModel
	in      httpapi.OIPInput
	rawOut  bool // the outputs go as raw contents
	timeout time.Duration
}

// prepare resolves req's model for c and reads its input, outputs and
// timeout (ctx's deadline).
func (s *Server) prepare(ctx context.Context, c httpapi.Caller, req *oippb.ModelInferRequest) (inferCall, *httpapi.CallError) {
	m, cerr := s.api.ResolveModel(c, req.GetModelName(), req.GetModelVersion())
	if cerr != nil {
		return inferCall{}, cerr
	}
	in, raw, cerr := input(req)
	if cerr != nil {
		return inferCall{}, cerr
	}
	rawOut, cerr := rawOutput(req, raw)
	if cerr != nil {
		return inferCall{}, cerr
	}
	timeout, cerr := timeoutOf(ctx, req)
	if cerr != nil {
		return inferCall{}, cerr
	}
	return inferCall{req: req, m: m, in: in, rawOut: rawOut, timeout: timeout}, nil
}

// response is the call's answer for the outputs its elements got.
func (ic inferCall) response(version string, outs []string) (*oippb.ModelInferResponse, *httpapi.CallError) {
	t := &oippb.ModelInferResponse_InferOutputTensor{Name: outputName, Datatype: "BYTES", Shape: []int64{int64(len(outs))}}
	resp := &oippb.ModelInferResponse{ModelName: ic.m.Name(), ModelVersion: version, Id: ic.req.GetId(), Outputs: []*oippb.ModelInferResponse_InferOutputTensor{t}}
	if !ic.rawOut {
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
