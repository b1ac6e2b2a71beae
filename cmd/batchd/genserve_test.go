package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/engine/openai"
)

// genServeYAML serves generation of model "tiny" on one device whose
// steps take 5 ms, with outputs of exactly 1,000 tokens (so max_tokens
// ends every stream, and a stream left alone would run 5 s), behind an
// API key.
const genServeYAML = `
devices: {count: 1, latency: 1ms}
tenants:
  - {name: alice, api_key: sk-alice-key}
http:
  metrics: {open: true}
generation:
  enabled: true
  models: [tiny]
  block_tokens: 16
  blocks_per_device: 512
  cost: {base: 5ms, per_token: 0s, per_kv_token: 0s}
  output_len: {median: 1000, sigma: 0, max: 2000}
`

// genOutLen is genServeYAML's output_len.
var genOutLen = actors.Lognormal{Median: 1000, Sigma: 0, Max: 2000}

// TestServeGeneration runs the official openai npm client
// (engine/openai/testdata/node/serve.js) against batchd serve with
// generation on: every text it streams is the emulated generator's for
// its prompt, a stop sequence cuts it, an unknown model is a 404 and a
// wrong key a 401 in the client's own error classes, and a client that
// goes away mid-stream has its sequence's KV blocks freed (the gauge back
// to 0 within 2 s, where the stream alone would run 5 s).
func TestServeGeneration(t *testing.T) {
	dir := filepath.Join("..", "..", "engine", "openai", "testdata", "node")
	mods := enginetest.NodeModules(t, dir, filepath.Join("openai", "package.json"))
	base, stop := startServe(t, genServeYAML, io.Discard)

	want := func(prompt string, maxTokens int) string {
		return actors.EmulatedGenOutput("tiny", "v1", prompt, genOutLen, maxTokens)
	}
	stopOut := want("stop here", 50)
	stopSeq := stopOut[10:12]
	args, _ := json.Marshal(map[string]string{"stop": stopSeq})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "serve.js", base, "sk-alice-key", string(args))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, stderr.String())
	}
	var got struct {
		Models     []string
		Completion struct {
			Text, Finish string
			Usage        map[string]int
		}
		ChatStream, CompletionStream, StopStream struct {
			Text, Finish string
			Usage        map[string]int
			Chunks       int
		}
		NotFound, BadKey map[string]any
		Disconnect       struct {
			FirstChunk, Aborted bool
			KVDuring            *float64
			FreedMs             *float64
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	chatPrompt := openai.ChatPrompt([]string{"user"}, []string{"hi"})
	for _, c := range []struct {
		name, text, finish, want string
	}{
		{"completion", got.Completion.Text, got.Completion.Finish, want("hello", 20)},
		{"chat stream", got.ChatStream.Text, got.ChatStream.Finish, want(chatPrompt, 30)},
		{"completion stream", got.CompletionStream.Text, got.CompletionStream.Finish, want("stream me", 50)},
	} {
		if c.text != c.want || c.finish != "length" {
			t.Errorf("%s: %q (finish %s), want %q (length)", c.name, c.text, c.finish, c.want)
		}
	}
	if u := got.ChatStream.Usage; u["prompt_tokens"] != len(chatPrompt) || u["completion_tokens"] != 30 {
		t.Errorf("chat stream usage %v, want %d prompt and 30 completion tokens", u, len(chatPrompt))
	}
	if wantStop := stopOut[:strings.Index(stopOut, stopSeq)]; got.StopStream.Text != wantStop || got.StopStream.Finish != "stop" {
		t.Errorf("stop %q: %q (finish %s), want %q (stop)", stopSeq, got.StopStream.Text, got.StopStream.Finish, wantStop)
	}
	if !reflect.DeepEqual(got.Models, []string{"tiny"}) {
		t.Errorf("models %v", got.Models)
	}
	if got.NotFound["status"] != 404.0 || got.NotFound["notFoundError"] != true || got.NotFound["code"] != "model_not_found" {
		t.Errorf("unknown model: %v", got.NotFound)
	}
	if got.BadKey["status"] != 401.0 || got.BadKey["authenticationError"] != true {
		t.Errorf("wrong key: %v", got.BadKey)
	}
	d := got.Disconnect
	if !d.FirstChunk || !d.Aborted || d.KVDuring == nil || *d.KVDuring <= 0 || d.FreedMs == nil {
		t.Errorf("disconnect: %+v: want a first chunk, KV blocks held while it streamed, the abort, and the blocks freed within 2 s", d)
	}
	// /metrics: the request histograms and token counters of the streams.
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for series, want := range map[string]string{
		`batchd_gen_ttft_seconds_count{model="tiny"}`:                                    "> 0",
		`batchd_gen_tpot_seconds_count{model="tiny"}`:                                    "> 0",
		`batchd_gen_e2e_seconds_count{model="tiny"}`:                                     "> 0",
		`batchd_gen_requests_total{model="tiny",outcome="cancelled",reason="cancelled"}`: "> 0",
		`batchd_gen_requests_total{model="tiny",outcome="completed",reason="none"}`:      "> 0",
		`batchd_gen_generated_tokens_total{model="tiny"}`:                                "> 0",
		`batchd_gen_prompt_tokens_total{model="tiny"}`:                                   "> 0",
		`batchd_gen_kv_blocks{model="tiny"}`:                                             "512",
		`batchd_gen_kv_blocks_used{model="tiny"}`:                                        "0",
		`batchd_gen_sequences_waiting{model="tiny"}`:                                     "0",
		`batchd_gen_preemptions_total{model="tiny"}`:                                     "0",
	} {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
		switch {
		case m == nil:
			t.Errorf("/metrics lacks %s", series)
		case want == "> 0" && (string(m[1]) == "0" || strings.HasPrefix(string(m[1]), "-")):
			t.Errorf("/metrics: %s %s, want more than 0", series, m[1])
		case want != "> 0" && string(m[1]) != want:
			t.Errorf("/metrics: %s %s, want %s", series, m[1], want)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
}
