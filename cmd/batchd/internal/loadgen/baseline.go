package loadgen

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/batchd/batchd/actors"
)

// BaselineVersion is the version the baseline handler says it served.
const BaselineVersion = "v1"

// Baseline is the yardstick of the engine-overhead target: a plain net/http
// handler for POST /v1/models/{model}/infer that does the least any server
// must (read and decode the body, encode the answer) and answers at once,
// with the emulated backend's output so the generator's check passes. Load
// against it measures what the generator and net/http cost on their own.
func Baseline() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/models/{model}/infer", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Input string `json:"input"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, responseMaxBytes)).Decode(&in); err != nil {
			http.Error(w, `{"error":{"code":"bad_request","message":"bad JSON"}}`, http.StatusBadRequest)
			return
		}
		model := r.PathValue("model")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Output  string `json:"output"`
			Model   string `json:"model"`
			Version string `json:"version"`
		}{actors.EmulatedOutput(model, BaselineVersion, in.Input), model, BaselineVersion})
	})
	return mux
}
