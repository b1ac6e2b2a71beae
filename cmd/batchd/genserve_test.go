package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors/gen"
	"github.com/batchd/batchd/cudabridge"
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
var genOutLen = gen.Lognormal{Median: 1000, Sigma: 0, Max: 2000}

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
		return gen.EmulatedOutput("tiny", "v1", prompt, genOutLen, maxTokens)
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

// genServeBytenetYAML serves generation on bytenet's CPU generator, under
// the network's own name.
const genServeBytenetYAML = `
devices: {count: 1, latency: 1ms}
generation:
  enabled: true
  backend: bytenet
  models: [bytenet]
  block_tokens: 16
  blocks_per_device: 512
`

// TestServeGenerationBytenet: batch serve with generation.backend bytenet
// answers POST /v1/completions with the bytenet generator's text: a greedy
// completion is cudabridge's reference generation for its prompt, a
// sampled one with a seed is the reference's under that temperature and
// seed (so the same across requests, and not the greedy text), and a
// stream is the same text as the answer in one piece. The requests run at
// once, so steps mix greedy and sampled sequences.
func TestServeGenerationBytenet(t *testing.T) {
	base, stop := startServe(t, genServeBytenetYAML, io.Discard)
	w := cudabridge.NewWeights(cudabridge.WeightSeed)
	const n = 48
	type call struct {
		prompt string
		temp   float64
		seed   int64
		stream bool
	}
	calls := []call{
		{"The quick brown fox", 0, 0, false},
		{"The quick brown fox", 0, 0, true},
		{"The quick brown fox", 0.9, 77, false},
		{"The quick brown fox", 0.9, 77, true},
		{"The quick brown fox", 0.9, 77, false},
		{"hello", 1.3, -5, false},
		{"hello", 0, 12, true},
	}
	texts := make([]string, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { texts[i], errs[i] = bytenetComplete(base, c.prompt, n, c.temp, c.seed, c.stream) })
	}
	wg.Wait()
	for i, c := range calls {
		want := w.Generate(c.prompt, n, cudabridge.Sampling{Temperature: c.temp, Seed: uint64(c.seed)}, 0)
		if errs[i] != nil || texts[i] != want {
			t.Errorf("%+v: %q, %v; want the reference %q", c, texts[i], errs[i], want)
		}
	}
	if texts[2] != texts[4] || texts[2] == texts[0] {
		t.Errorf("seed 77: %q then %q; greedy %q: want the same twice, not the greedy text", texts[2], texts[4], texts[0])
	}
	if texts[0] != texts[1] || texts[2] != texts[3] {
		t.Errorf("streamed %q and %q, in one piece %q and %q", texts[1], texts[3], texts[0], texts[2])
	}
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// bytenetComplete posts a completion of n tokens and returns its text,
// collected from the SSE chunks when stream is set; it wants finish
// reason "length".
func bytenetComplete(base, prompt string, n int, temp float64, seed int64, stream bool) (string, error) {
	body, _ := json.Marshal(map[string]any{"model": "bytenet", "prompt": prompt, "max_tokens": n,
		"temperature": temp, "seed": seed, "stream": stream})
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s (%v)", resp.StatusCode, raw, err)
	}
	type choices struct {
		Choices []struct {
			Text   string  `json:"text"`
			Finish *string `json:"finish_reason"`
		} `json:"choices"`
	}
	var text, finish strings.Builder
	parse := func(b []byte) error {
		var c choices
		if err := json.Unmarshal(b, &c); err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
			if ch.Finish != nil {
				finish.WriteString(*ch.Finish)
			}
		}
		return nil
	}
	if !stream {
		err = parse(raw)
	} else {
		for line := range strings.Lines(string(raw)) {
			data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			if err = parse([]byte(data)); err != nil {
				break
			}
		}
	}
	if err == nil && finish.String() != "length" {
		err = fmt.Errorf("finish %q, want length", finish.String())
	}
	return text.String(), err
}

// A tenant whose API key is restricted to some models (tenants[].models)
// is restricted to them on the generation routes too: 403 for another
// generation model, 200 for its own, and /v1/models lists its own only;
// an unrestricted key gets both. Deliberate break: the server's
// Authenticate without the key's models (`Models: c.Models()` left out)
// serves small to bob (200).
func TestServeGenerationKeyModels(t *testing.T) {
	const cfg = `
devices: {count: 1, latency: 1ms}
tenants:
  - {name: alice, api_key: sk-alice-key}
  - {name: bob, api_key: sk-bob-key, models: [tiny]}
generation:
  enabled: true
  models: [tiny, small]
  block_tokens: 16
  blocks_per_device: 512
  cost: {base: 1ms, per_token: 0s, per_kv_token: 0s}
  output_len: {median: 4, sigma: 0, max: 8}
`
	base, stop := startServe(t, cfg, io.Discard)
	defer stop()
	do := func(key, method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		key, model string
		status     int
	}{{"sk-bob-key", "tiny", 200}, {"sk-bob-key", "small", 403}, {"sk-alice-key", "small", 200}} {
		if st, body := do(c.key, http.MethodPost, "/v1/completions", `{"model":"`+c.model+`","prompt":"hi","max_tokens":4}`); st != c.status {
			t.Errorf("%s, model %s: %d %s, want %d", c.key, c.model, st, body, c.status)
		}
	}
	for key, want := range map[string][]string{"sk-bob-key": {"tiny"}, "sk-alice-key": {"small", "tiny"}} {
		_, body := do(key, http.MethodGet, "/v1/models", "")
		var list struct{ Data []struct{ ID string } }
		if err := json.Unmarshal([]byte(body), &list); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range list.Data {
			ids = append(ids, d.ID)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, want) {
			t.Errorf("%s: /v1/models %v, want %v", key, ids, want)
		}
	}
}
