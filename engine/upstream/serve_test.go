package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// standInServeEnv, when set (to a listen address), makes the test binary
// serve a stand-in OIP upstream instead of running tests, until SIGTERM:
// the measurements of a front batchd against an upstream that fails on
// purpose run it as a process (go test -c -o bin/upstream.test
// ./engine/upstream; BATCHD_OIP_STANDIN=127.0.0.1:18096 bin/upstream.test).
// BATCHD_OIP_STANDIN_FAIL is the fraction of batches answered 500 (drawn
// at random) and BATCHD_OIP_STANDIN_LATENCY each batch's time; the outputs
// are the emulated backend's (actors.EmulatedOutput), so `batchd load`
// checks them.
const standInServeEnv = "BATCHD_OIP_STANDIN"

// singleServeEnv is standInServeEnv's single-input API: each call's raw
// body is one input, answered after BATCHD_SINGLE_STANDIN_LATENCY with
// the emulated backend's output for /predict/{model}/{version}; it prints
// the calls and the most in flight at once on SIGTERM.
const singleServeEnv = "BATCHD_SINGLE_STANDIN"

func TestMain(m *testing.M) {
	if addr := os.Getenv(singleServeEnv); addr != "" {
		if err := serveSingle(addr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if addr := os.Getenv(standInServeEnv); addr != "" {
		if err := serveStandIn(addr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func serveStandIn(addr string) error {
	fail, _ := strconv.ParseFloat(os.Getenv(standInServeEnv+"_FAIL"), 64)
	latency, _ := time.ParseDuration(os.Getenv(standInServeEnv + "_LATENCY"))
	var batches, failed, items atomic.Int64
	s := &oipStandIn{hook: func(w http.ResponseWriter, r *http.Request, inputs []string) bool {
		batches.Add(1)
		if latency > 0 {
			time.Sleep(latency)
		}
		if rand.Float64() < fail {
			failed.Add(1)
			http.Error(w, `{"error": "injected"}`, http.StatusInternalServerError)
			return true
		}
		items.Add(int64(len(inputs)))
		outs := make([]string, len(inputs))
		model, version := r.PathValue("model"), r.PathValue("version")
		for i, in := range inputs {
			outs[i] = actors.EmulatedOutput(model, version, in)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"model_name": model, "outputs": []any{map[string]any{
			"name": "output", "datatype": "BYTES", "shape": []int{len(inputs)}, "data": outs}}})
		return true
	}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /v2/models/{model}/versions/{version}/infer", s.infer)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	err := srv.ListenAndServe()
	fmt.Printf("stand-in: %d batches, %d answered 500, %d items answered\n", batches.Load(), failed.Load(), items.Load())
	if err == http.ErrServerClosed {
		return nil
	}
	return err
}

func serveSingle(addr string) error {
	latency, _ := time.ParseDuration(os.Getenv(singleServeEnv + "_LATENCY"))
	var calls, inFlight, maxSeen, busyNs atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict/{model}/{version}", func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		t0 := time.Now()
		defer func() { busyNs.Add(int64(time.Since(t0))) }()
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxSeen.Load(); n > m && !maxSeen.CompareAndSwap(m, n); m = maxSeen.Load() {
		}
		in, err := readBounded(r.Body, 1<<20)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(latency)
		_, _ = w.Write([]byte(actors.EmulatedOutput(r.PathValue("model"), r.PathValue("version"), string(in))))
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	start := time.Now()
	err := srv.ListenAndServe()
	mean := time.Duration(0)
	if c := calls.Load(); c > 0 {
		mean = time.Duration(busyNs.Load() / c)
	}
	fmt.Printf("single stand-in: %d calls in %.1fs, at most %d in flight, %v a call on average\n", calls.Load(), time.Since(start).Seconds(), maxSeen.Load(), mean)
	if err == http.ErrServerClosed {
		return nil
	}
	return err
}
