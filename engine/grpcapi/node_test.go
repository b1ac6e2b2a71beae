package grpcapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/engine/server"
)

// TestNodeClient runs a client no one here wrote, Google's
// @grpc/grpc-js with @grpc/proto-loader loading the published proto
// file, against a batchd server (engine/server, the emulated backend) on
// 127.0.0.1: live, ready, metadata, infer with raw and with contents, two
// errors, and a stream of 50 requests, one of them refused.
func TestNodeClient(t *testing.T) {
	mods := enginetest.NodeModules(t, "testdata/node", filepath.Join("@grpc", "proto-loader", "package.json"))
	f, err := config.Load("test.yaml", []byte("devices:\n  count: 2\n  latency: 5ms\npolicy:\n  slo: 5s\n"))
	if err != nil {
		t.Fatal(err)
	}
	f.HTTP.Addr = "127.0.0.1:0"
	f.GRPC.Addr = "127.0.0.1:0"
	f.Jobs.Dir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := server.New(ctx, f, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background()) }()
	defer func() {
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	cmd := exec.CommandContext(ctx, "node", "client.js", s.GRPCAddr().String(), "../../oippb")
	cmd.Dir = "testdata/node"
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	var got struct {
		Live     bool `json:"live"`
		Ready    bool `json:"ready"`
		Server   string
		Metadata struct {
			Versions []string
			Input    string
			Output   string
		}
		ModelReady bool `json:"model_ready"`
		InferRaw   struct {
			ID      string
			Version string
			Outputs []string
		} `json:"infer_raw"`
		InferContents    []string `json:"infer_contents"`
		UnknownModelCode int      `json:"unknown_model_code"`
		DatatypeCode     int      `json:"datatype_code"`
		Stream           struct {
			Got    map[string]string
			Errors []struct{ ID, Error string }
			Err    string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node client printed %s: %v", out, err)
	}
	want := func(in string) string { return actors.EmulatedOutput("echo", "v1", in) }
	if !got.Live || !got.Ready || got.Server != "batchd" || !got.ModelReady ||
		!reflect.DeepEqual(got.Metadata.Versions, []string{"v1"}) || got.Metadata.Input != "BYTES" || got.Metadata.Output != "output" {
		t.Errorf("health and metadata: %s", out)
	}
	if got.InferRaw.ID != "raw-1" || got.InferRaw.Version != "v1" || !reflect.DeepEqual(got.InferRaw.Outputs, []string{want("a"), want("bé")}) {
		t.Errorf("raw infer: %+v", got.InferRaw)
	}
	if !reflect.DeepEqual(got.InferContents, []string{want("c")}) {
		t.Errorf("contents infer: %v", got.InferContents)
	}
	if got.UnknownModelCode != 5 || got.DatatypeCode != 3 {
		t.Errorf("unknown model: code %d (want 5, NOT_FOUND); FP32 input: code %d (want 3, INVALID_ARGUMENT)", got.UnknownModelCode, got.DatatypeCode)
	}
	if got.Stream.Err != "" || len(got.Stream.Got) != 49 || len(got.Stream.Errors) != 1 || got.Stream.Errors[0].ID != "r3" {
		t.Fatalf("stream: %d replies, errors %v, stream error %q; want 49, r3's", len(got.Stream.Got), got.Stream.Errors, got.Stream.Err)
	}
	for i := range 50 {
		id := fmt.Sprint("r", i)
		if i != 3 && got.Stream.Got[id] != want(fmt.Sprint("s", i)) {
			t.Errorf("stream %s: %q, want %q", id, got.Stream.Got[id], want(fmt.Sprint("s", i)))
		}
	}
}
