package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeGen generates script one byte a token (the byte-level models'
// tokens), then its end of sequence; a prompt is as many tokens as bytes.
// fail, when set, is returned after failAfter tokens.
type fakeGen struct {
	script    string
	fail      error
	failAfter int
	mu        sync.Mutex
	reqs      []Request
	cancelled int // sequences that ended because their ctx did
	block     chan struct{}
}

func (g *fakeGen) Models() []string { return []string{"tiny"} }

func (g *fakeGen) Generate(ctx context.Context, req Request, emit func(string) error) (Result, error) {
	g.mu.Lock()
	g.reqs = append(g.reqs, req)
	g.mu.Unlock()
	res := Result{PromptTokens: len(req.Prompt), Finish: FinishStop}
	for i := 0; ; i++ {
		if g.fail != nil && i == g.failAfter {
			return res, g.fail
		}
		if i == len(g.script) {
			return res, nil
		}
		if i == req.MaxTokens {
			res.Finish = FinishLength
			return res, nil
		}
		if g.block != nil && i == 2 {
			select {
			case <-g.block:
			case <-ctx.Done():
				g.mu.Lock()
				g.cancelled++
				g.mu.Unlock()
				return res, ctx.Err()
			}
		}
		if err := emit(g.script[i : i+1]); err != nil {
			return res, err
		}
	}
}

func post(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return w
}

// events reads a stream's "data:" payloads, [DONE] included.
func events(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "data: ") {
			out = append(out, strings.TrimPrefix(l, "data: "))
		} else if l != "" {
			t.Fatalf("stream line %q: want data: lines and blank lines", l)
		}
	}
	return out
}

// TestCompletions: the text, finish reason and usage of a completion, with
// max_tokens cutting it (length) or not (stop); several prompts are
// choices in order.
func TestCompletions(t *testing.T) {
	h := New(&fakeGen{script: "Hello, world!"}, Config{})
	for _, c := range []struct {
		body, text, finish string
		tokens             int
	}{
		{`{"model":"tiny","prompt":"hi","max_tokens":100}`, "Hello, world!", "stop", 13},
		{`{"model":"tiny","prompt":"hi","max_tokens":5}`, "Hello", "length", 5},
		{`{"model":"tiny","prompt":"hi"}`, "Hello, world!", "stop", 13}, // default max_tokens 16
	} {
		w := post(t, h, "/v1/completions", c.body)
		var r struct {
			Object  string
			Choices []struct {
				Text         string
				Index        int
				FinishReason string `json:"finish_reason"`
			}
			Usage usage
		}
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &r) != nil {
			t.Fatalf("%s: %d %s", c.body, w.Code, w.Body)
		}
		if r.Object != "text_completion" || len(r.Choices) != 1 || r.Choices[0].Text != c.text || r.Choices[0].FinishReason != c.finish {
			t.Errorf("%s: %+v, want %q finished %s", c.body, r, c.text, c.finish)
		}
		if r.Usage != (usage{PromptTokens: 2, CompletionTokens: c.tokens, TotalTokens: 2 + c.tokens}) {
			t.Errorf("%s: usage %+v", c.body, r.Usage)
		}
	}
	w := post(t, h, "/v1/completions", `{"model":"tiny","prompt":["a","bb","ccc"],"max_tokens":3}`)
	var r struct {
		Choices []struct {
			Text  string
			Index int
		}
		Usage usage
	}
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || len(r.Choices) != 3 || r.Usage.PromptTokens != 6 || r.Usage.CompletionTokens != 9 {
		t.Fatalf("three prompts: %s", w.Body)
	}
	for i, c := range r.Choices {
		if c.Index != i || c.Text != "Hel" {
			t.Errorf("choice %d: %+v", i, c)
		}
	}
}

// TestStopSequences: the text ends before the first stop sequence reached,
// wherever the tokens split it, and the stream never shows a part of it.
func TestStopSequences(t *testing.T) {
	g := &fakeGen{script: "one, two; three"}
	h := New(g, Config{})
	for _, c := range []struct{ stop, text string }{
		{`"two"`, "one, "},
		{`[";", ","]`, "one"},
		{`"o; t"`, "one, tw"},
		{`"xyz"`, "one, two; three"},
		{`"ee"`, "one, two; thr"},
	} {
		w := post(t, h, "/v1/completions", `{"model":"tiny","prompt":"p","max_tokens":100,"stop":`+c.stop+`}`)
		var r struct {
			Choices []struct {
				Text         string
				FinishReason string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || r.Choices[0].Text != c.text || r.Choices[0].FinishReason != "stop" {
			t.Errorf("stop %s: %s, want %q", c.stop, w.Body, c.text)
		}
		w = post(t, h, "/v1/completions", `{"model":"tiny","prompt":"p","max_tokens":100,"stream":true,"stop":`+c.stop+`}`)
		var streamed strings.Builder
		for _, ev := range events(t, w.Body.String()) {
			var ch struct{ Choices []struct{ Text string } }
			if ev != "[DONE]" && json.Unmarshal([]byte(ev), &ch) == nil && len(ch.Choices) > 0 {
				streamed.WriteString(ch.Choices[0].Text)
			}
		}
		if streamed.String() != c.text {
			t.Errorf("stop %s streamed %q, want %q", c.stop, streamed.String(), c.text)
		}
	}
}

// TestStream: a chat stream opens with the assistant's role, carries one
// token a chunk, ends with the finish reason, the usage chunk when asked
// for, then [DONE]; the chunks share the id.
func TestStream(t *testing.T) {
	h := New(&fakeGen{script: "abc"}, Config{})
	w := post(t, h, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`)
	if w.Code != 200 || w.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %q", w.Code, w.Header().Get("Content-Type"))
	}
	evs := events(t, w.Body.String())
	if len(evs) != 7 || evs[6] != "[DONE]" {
		t.Fatalf("events %q: want role, 3 tokens, finish, usage, [DONE]", evs)
	}
	type chunk struct {
		ID, Object string
		Choices    []struct {
			Delta struct {
				Role    string
				Content *string
			}
			FinishReason *string `json:"finish_reason"`
		}
		Usage *usage
	}
	var cs []chunk
	for _, ev := range evs[:6] {
		var c chunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "chat.completion.chunk" || (len(cs) > 0 && c.ID != cs[0].ID) {
			t.Errorf("chunk %s", ev)
		}
		cs = append(cs, c)
	}
	if cs[0].Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk %+v: want the assistant's role", cs[0])
	}
	var text string
	for _, c := range cs[1:4] {
		text += *c.Choices[0].Delta.Content
	}
	if text != "abc" || cs[4].Choices[0].FinishReason == nil || *cs[4].Choices[0].FinishReason != "stop" {
		t.Errorf("text %q, finish chunk %+v", text, cs[4])
	}
	if len(cs[5].Choices) != 0 || cs[5].Usage == nil || cs[5].Usage.CompletionTokens != 3 {
		t.Errorf("usage chunk %+v", cs[5])
	}
}

// TestChatPrompt: a chat becomes one prompt, role by role.
func TestChatPrompt(t *testing.T) {
	g := &fakeGen{script: "ok"}
	h := New(g, Config{})
	w := post(t, h, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],"max_tokens":7,"temperature":0.5,"seed":3}`)
	var r struct {
		Object  string
		Choices []struct {
			Message struct{ Role, Content string }
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || r.Object != "chat.completion" || r.Choices[0].Message.Content != "ok" || r.Choices[0].Message.Role != "assistant" {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	got := g.reqs[0]
	if got.Prompt != "system: be brief\nuser: hi there\nassistant:" || got.MaxTokens != 7 || got.Temperature != 0.5 || got.Seed != 3 {
		t.Errorf("request %+v", got)
	}
}

// TestErrors: bad requests are refused in OpenAI's shape with the right
// status, param and code; nothing reaches the generator.
func TestErrors(t *testing.T) {
	g := &fakeGen{script: "x"}
	h := New(g, Config{MaxTokensLimit: 100})
	for _, c := range []struct {
		path, body   string
		status       int
		param, code  string
		errorMessage string
	}{
		{"/v1/completions", `{"model":"nope","prompt":"p"}`, 404, "model", "model_not_found", "does not exist"},
		{"/v1/completions", `{"prompt":"p"}`, 400, "model", "", "required"},
		{"/v1/completions", `{"model":"tiny"}`, 400, "prompt", "", "required"},
		{"/v1/completions", `{"model":"tiny","prompt":[1,2,3]}`, 400, "prompt", "", "token-id"},
		{"/v1/completions", `{"model":"tiny","prompt":"p","n":2}`, 400, "n", "", "only 1"},
		{"/v1/completions", `{"model":"tiny","prompt":"p","max_tokens":101}`, 400, "max_tokens", "", "1 to 100"},
		{"/v1/completions", `{"model":"tiny","prompt":"p","stop":["a","b","c","d","e"]}`, 400, "stop", "", "at most 4"},
		{"/v1/completions", `{"model":"tiny","prompt":"p","temperature":3}`, 400, "temperature", "", "0 to 2"},
		{"/v1/completions", `{"model":"tiny","prompt":"p","logprobs":5}`, 400, "logprobs", "", "not served"},
		{"/v1/completions", `{"model":"tiny","prompt":"p","echo":true}`, 400, "echo", "", "not served"},
		{"/v1/completions", `{"model":`, 400, "", "", "not a valid JSON"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[]}`, 400, "messages", "", "1 to"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"tool","content":"x"}]}`, 400, "messages[0].role", "", "role"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "messages[0].content", "", "only text"},
	} {
		w := post(t, h, c.path, c.body)
		var r struct {
			Error struct {
				Message, Type string
				Param, Code   *string
			}
		}
		if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || w.Code != c.status || !strings.Contains(r.Error.Message, c.errorMessage) || r.Error.Type != "invalid_request_error" {
			t.Errorf("%s %s: %d %s; want %d, %q", c.path, c.body, w.Code, w.Body, c.status, c.errorMessage)
			continue
		}
		if (c.param == "") != (r.Error.Param == nil) || (r.Error.Param != nil && *r.Error.Param != c.param) || (c.code == "") != (r.Error.Code == nil) || (r.Error.Code != nil && *r.Error.Code != c.code) {
			t.Errorf("%s %s: param %v code %v, want %q %q", c.path, c.body, r.Error.Param, r.Error.Code, c.param, c.code)
		}
	}
	if len(g.reqs) != 0 {
		t.Errorf("%d bad requests reached the generator", len(g.reqs))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/completions", nil))
	if w.Code != 405 || w.Header().Get("Allow") != "POST" {
		t.Errorf("GET /v1/completions: %d, Allow %q", w.Code, w.Header().Get("Allow"))
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	if !strings.Contains(w.Body.String(), `"id":"tiny"`) || !strings.Contains(w.Body.String(), `"object":"list"`) {
		t.Errorf("GET /v1/models: %s", w.Body)
	}
}

// TestGeneratorErrors: a refusal before the first token is answered with
// its own status (and Retry-After), also for a stream; one after tokens
// were streamed is an error event, with no [DONE].
func TestGeneratorErrors(t *testing.T) {
	over := &Error{Status: 503, Type: "server_error", Code: "overloaded", Message: "busy", RetryAfter: 1500 * time.Millisecond}
	h := New(&fakeGen{script: "abc", fail: over}, Config{})
	for _, stream := range []string{"false", "true"} {
		w := post(t, h, "/v1/completions", `{"model":"tiny","prompt":"p","stream":`+stream+`}`)
		if w.Code != 503 || w.Header().Get("Retry-After") != "2" || !strings.Contains(w.Body.String(), `"code":"overloaded"`) {
			t.Errorf("stream %s: %d %q %s", stream, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	h = New(&fakeGen{script: "abc", fail: over, failAfter: 2}, Config{})
	w := post(t, h, "/v1/completions", `{"model":"tiny","prompt":"p","stream":true}`)
	evs := events(t, w.Body.String())
	if w.Code != 200 || len(evs) != 3 || !strings.Contains(evs[2], `"error"`) {
		t.Errorf("an error after two tokens: %d %q: want two chunks and an error event", w.Code, evs)
	}
	h = New(&fakeGen{script: "abc", fail: context.DeadlineExceeded, failAfter: 1}, Config{})
	if w := post(t, h, "/v1/completions", `{"model":"tiny","prompt":"p"}`); w.Code != 500 || !strings.Contains(w.Body.String(), `"type":"server_error"`) {
		t.Errorf("an unknown error: %d %s", w.Code, w.Body)
	}
}

// TestClientGone: a client that disconnects cancels its sequence.
func TestClientGone(t *testing.T) {
	g := &fakeGen{script: "abcdef", block: make(chan struct{})}
	srv := httptest.NewServer(New(g, Config{}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"model":"tiny","prompt":"p","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the first token's chunk is out
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		n := g.cancelled
		g.mu.Unlock()
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the sequence of a client that went away was not cancelled")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded
	}
}

// twoModels is fakeGen serving two models.
type twoModels struct{ *fakeGen }

func (twoModels) Models() []string { return []string{"small", "tiny"} }

// A key restricted to some models is refused any other with 403, before
// the model is looked up (an unknown model is 403 too, not 404: the key
// learns nothing of the others), on both routes, and /v1/models lists
// only its models; the tenant reaches the generator. Deliberate break:
// model() without the mayUse check serves small to the key (200).
func TestKeyModelRestriction(t *testing.T) {
	g := &fakeGen{script: "hello"}
	h := New(twoModels{g}, Config{Authenticate: func(r *http.Request) (Caller, *Error) {
		if r.Header.Get("Authorization") == "Bearer narrow" {
			return Caller{Tenant: "acme", Models: []string{"tiny"}}, nil
		}
		return Caller{Tenant: "open"}, nil
	}})
	do := func(key, method, path, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+key)
		h.ServeHTTP(w, r)
		return w
	}
	for _, c := range []struct {
		key, path, model string
		status           int
	}{
		{"narrow", "/v1/completions", "tiny", 200},
		{"narrow", "/v1/completions", "small", 403},
		{"narrow", "/v1/chat/completions", "small", 403},
		{"narrow", "/v1/completions", "nope", 403},
		{"open", "/v1/completions", "small", 200},
		{"open", "/v1/completions", "nope", 404},
	} {
		body := `{"model":"` + c.model + `","prompt":"hi"}`
		if strings.Contains(c.path, "chat") {
			body = `{"model":"` + c.model + `","messages":[{"role":"user","content":"hi"}]}`
		}
		w := do(c.key, http.MethodPost, c.path, body)
		if w.Code != c.status || c.status == 403 && !strings.Contains(w.Body.String(), `"code":"forbidden"`) {
			t.Errorf("key %s, %s %s: %d %s, want %d", c.key, c.path, c.model, w.Code, w.Body, c.status)
		}
	}
	if g.reqs[0].Tenant != "acme" {
		t.Errorf("tenant %q, want acme", g.reqs[0].Tenant)
	}
	for key, want := range map[string]string{"narrow": `["tiny"]`, "open": `["small","tiny"]`} {
		var list struct{ Data []struct{ ID string } }
		w := do(key, http.MethodGet, "/v1/models", "")
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range list.Data {
			ids = append(ids, d.ID)
		}
		if got, _ := json.Marshal(ids); string(got) != want {
			t.Errorf("key %s: /v1/models %s, want %s", key, got, want)
		}
	}
}
