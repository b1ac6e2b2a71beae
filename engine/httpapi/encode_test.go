package httpapi

import (
	"encoding/json"
	"math"
	"testing"
)

// checkAppend fails t unless appendInferResponse of r is what json.Marshal writes.
func checkAppend(t *testing.T, r *inferResponse) {
	t.Helper()
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := appendInferResponse(nil, r); string(got) != string(want) {
		t.Errorf("appendInferResponse\n got %s\nwant %s", got, want)
	}
}

func TestAppendInferResponse(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "<b>&amp;</b>", "tab\tnl\ncr\r", "\x00\x01\x1f\x7f", "\b\f", "é ü 漢字", "\u2028\u2029", "\xff\xfe bad utf-8"} {
		checkAppend(t, &inferResponse{ID: s, Output: s, Model: s, Version: s})
	}
	for _, f := range []float64{0, 1, 0.001, 123.456, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 1.5e300, -0.5, -1e-9, math.SmallestNonzeroFloat64, math.MaxFloat64} {
		checkAppend(t, &inferResponse{LatencyMs: f, QueueMs: -f, ComputeMs: f / 3})
	}
	checkAppend(t, &inferResponse{BatchSize: math.MaxInt, Attempts: math.MinInt})
}

// FuzzAppendInferResponse: the hand-written encoding is json.Marshal's,
// byte for byte, whatever the strings and numbers.
// go test ./engine/httpapi -run '^$' -fuzz FuzzAppendInferResponse
func FuzzAppendInferResponse(f *testing.F) {
	f.Add("id-1", "out<>&\"\\\n\xff", "m", "v1", 100.123, 0.000_000_5, 1e21, 100, 1)
	f.Fuzz(func(t *testing.T, id, out, model, version string, lat, queue, compute float64, size, attempts int) {
		for _, x := range []float64{lat, queue, compute} {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Skip("json.Marshal refuses it; durations never are")
			}
		}
		checkAppend(t, &inferResponse{ID: id, Output: out, Model: model, Version: version, LatencyMs: lat, QueueMs: queue, ComputeMs: compute, BatchSize: size, Attempts: attempts})
	})
}
