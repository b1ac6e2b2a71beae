package upstream

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// oipStandIn is an Open Inference Protocol server written for the tests:
// it answers an infer call with "out:" + each input (binary tensor data
// when asked, JSON otherwise), unless its hook takes the call to
// misbehave.
type oipStandIn struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
	auth  []string
	// hook, when it returns true, has answered the call itself.
	hook func(w http.ResponseWriter, r *http.Request, inputs []string) bool
}

func newOIPStandIn(t testing.TB, hook func(w http.ResponseWriter, r *http.Request, inputs []string) bool) *oipStandIn {
	t.Helper()
	s := &oipStandIn{hook: hook}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /", s.infer)
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

type standInInfer struct {
	Inputs []struct {
		Name       string   `json:"name"`
		Datatype   string   `json:"datatype"`
		Shape      []int64  `json:"shape"`
		Data       []string `json:"data"`
		Parameters struct {
			BinaryDataSize *int `json:"binary_data_size"`
		} `json:"parameters"`
	} `json:"inputs"`
	Outputs []struct {
		Name       string `json:"name"`
		Parameters struct {
			BinaryData bool `json:"binary_data"`
		} `json:"parameters"`
	} `json:"outputs"`
}

func (s *oipStandIn) infer(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.paths = append(s.paths, r.URL.Path)
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	header, bin := body, []byte(nil)
	if v := r.Header.Get(headerInferLen); v != "" {
		n, _ := strconv.Atoi(v)
		header, bin = body[:n], body[n:]
	}
	var req standInInfer
	if err := json.Unmarshal(header, &req); err != nil || len(req.Inputs) != 1 || len(req.Outputs) != 1 {
		http.Error(w, fmt.Sprintf(`{"error": "bad request: %v"}`, err), http.StatusBadRequest)
		return
	}
	in := req.Inputs[0]
	inputs := in.Data
	if in.Parameters.BinaryDataSize != nil {
		for b := bin; len(b) >= 4; {
			l := binary.LittleEndian.Uint32(b)
			inputs = append(inputs, string(b[4:4+l]))
			b = b[4+l:]
		}
	}
	if in.Name != "input" || in.Datatype != "BYTES" || len(in.Shape) != 1 || int(in.Shape[0]) != len(inputs) {
		http.Error(w, `{"error": "want one BYTES tensor named input of shape [n]"}`, http.StatusBadRequest)
		return
	}
	if s.hook != nil && s.hook(w, r, inputs) {
		return
	}
	writeOIPAnswer(w, req.Outputs[0].Name, inputs, len(inputs), req.Outputs[0].Parameters.BinaryData)
}

// writeOIPAnswer answers "out:" + each input, with shape [n].
func writeOIPAnswer(w http.ResponseWriter, name string, inputs []string, n int, bin bool) {
	outs := make([]string, len(inputs))
	for i, in := range inputs {
		outs[i] = "out:" + in
	}
	o := map[string]any{"name": name, "datatype": "BYTES", "shape": []int{n}}
	if !bin {
		o["data"] = outs
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"model_name": "m", "outputs": []any{o}})
		return
	}
	var data bytes.Buffer
	for _, s := range outs {
		data.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(s))))
		data.WriteString(s)
	}
	o["parameters"] = map[string]any{"binary_data_size": data.Len()}
	h, _ := json.Marshal(map[string]any{"model_name": "m", "outputs": []any{o}})
	w.Header().Set(headerInferLen, strconv.Itoa(len(h)))
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(append(h, data.Bytes()...))
}

// wantOuts checks outs are "out:" + each input.
func wantOuts(t *testing.T, inputs, outs []string) {
	t.Helper()
	if len(outs) != len(inputs) {
		t.Fatalf("%d outputs for %d inputs", len(outs), len(inputs))
	}
	for i := range inputs {
		if outs[i] != "out:"+inputs[i] {
			t.Errorf("output %d: %q, want %q", i, outs[i], "out:"+inputs[i])
		}
	}
}

func hasAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
