package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"net/http/httptest"

	"github.com/batchd/batchd/engine/enginetest"
)

// TestNodeClient runs the official openai npm client (testdata/node's
// lockfile) against the handler: models, a completion, a chat, a chat
// stream with a stop sequence and usage, a completion stream, and two
// errors the client must map to its own error classes.
func TestNodeClient(t *testing.T) {
	mods := enginetest.NodeModules(t, "testdata/node", filepath.Join("openai", "package.json"))
	srv := httptest.NewServer(New(&fakeGen{script: "Hello, world!"}, Config{}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.js", srv.URL)
	cmd.Dir = "testdata/node"
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(`{
		"models": ["tiny"],
		"completion": {"text": "Hello", "finish": "length", "usage": {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}, "object": "text_completion"},
		"chat": {"content": "Hello, world!", "role": "assistant", "finish": "stop"},
		"chatStream": {"text": "Hello, ", "usage": {"prompt_tokens": 36, "completion_tokens": 12, "total_tokens": 48}, "finish": "stop", "chunks": 10, "role": "assistant"},
		"completionStream": "Hel",
		"notFound": {"status": 404, "code": "model_not_found", "type": "invalid_request_error", "param": "model", "notFoundError": true},
		"badRequest": {"status": 400, "param": "n", "badRequestError": true}
	}`), &want); err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		if !reflect.DeepEqual(got[k], w) {
			t.Errorf("%s: the client saw %v, want %v", k, got[k], w)
		}
	}
}
