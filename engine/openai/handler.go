package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Finish says why a sequence ended, as finish_reason does.
type Finish string

// The finish reasons.
const (
	// FinishStop: the model's end of sequence, or a stop sequence.
	FinishStop Finish = "stop"
	// FinishLength: max_tokens were generated.
	FinishLength Finish = "length"
)

// Request is one sequence to generate.
type Request struct {
	Model  string
	Prompt string
	// MaxTokens bounds the tokens generated.
	MaxTokens int
	// Stop are the stop sequences; the handler applies them (a generator
	// need not look at them: the handler ends the sequence through emit).
	Stop []string
	// Temperature 0 is greedy decoding; above it, sampling from Seed.
	Temperature float64
	Seed        int64
	// User is the client's end-user tag; Tenant who the request is
	// accounted to.
	User, Tenant string
}

// Result is how a sequence ended.
type Result struct {
	// PromptTokens is the prompt's length in the model's tokens.
	PromptTokens int
	Finish       Finish
}

// Generator is a generation engine, as the handler uses it.
type Generator interface {
	// Models are the generation models served, for GET /v1/models and to
	// refuse others (404 model_not_found).
	Models() []string
	// Generate decodes one sequence of req, calling emit with each
	// token's text in order as it is made, until the sequence ends (its
	// end of sequence: FinishStop; req.MaxTokens tokens: FinishLength),
	// emit returns an error (Generate then returns that error at once), or
	// ctx ends (the sequence is cancelled and what it held freed). An
	// *Error says how to answer the client (overload, a prompt too long);
	// any other error is a 500.
	Generate(ctx context.Context, req Request, emit func(text string) error) (Result, error)
}

// Error is an error in OpenAI's shape, with its HTTP status.
type Error struct {
	Status                     int
	Type, Code, Param, Message string
	// RetryAfter, when positive, is sent as Retry-After (429, 503).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message) }

// Config configures a Handler.
type Config struct {
	// MaxTokensLimit bounds max_tokens. Default 4096.
	MaxTokensLimit int
	// CompletionMaxTokens is max_tokens of a completion that names none
	// (OpenAI's 16); a chat's is MaxTokensLimit. Default 16.
	CompletionMaxTokens int
	// BodyMaxBytes bounds a request body; more is 413. Default 1 MiB.
	BodyMaxBytes int64
	// Authenticate returns the request's caller (its tenant, and the
	// models its key may use), or an error to answer with (401). Nil:
	// every request is tenant "default", any model.
	Authenticate func(r *http.Request) (Caller, *Error)
	// Now is the clock of the "created" fields. Default time.Now.
	Now func() time.Time
	// Logger gets the 500s' causes. Nil discards them.
	Logger *slog.Logger
}

// Handler serves the OpenAI-compatible routes over a Generator.
type Handler struct {
	gen Generator
	cfg Config
	mux *http.ServeMux
}

// New returns the handler of gen's models.
func New(gen Generator, cfg Config) *Handler {
	if cfg.MaxTokensLimit <= 0 {
		cfg.MaxTokensLimit = 4096
	}
	if cfg.CompletionMaxTokens <= 0 {
		cfg.CompletionMaxTokens = 16
	}
	if cfg.BodyMaxBytes <= 0 {
		cfg.BodyMaxBytes = 1 << 20
	}
	if cfg.Authenticate == nil {
		cfg.Authenticate = func(*http.Request) (Caller, *Error) { return Caller{Tenant: "default"}, nil }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{gen: gen, cfg: cfg, mux: http.NewServeMux()}
	h.mux.HandleFunc("/v1/models", h.method(http.MethodGet, h.models))
	h.mux.HandleFunc("/v1/completions", h.method(http.MethodPost, h.completions))
	h.mux.HandleFunc("/v1/chat/completions", h.method(http.MethodPost, h.chat))
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// method wraps fn so that another method is a 405 and the request is
// authenticated first.
func (h *Handler) method(m string, fn func(http.ResponseWriter, *http.Request, Caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m {
			w.Header().Set("Allow", m)
			writeError(w, &Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Message: r.Method + " not allowed; use " + m})
			return
		}
		c, e := h.cfg.Authenticate(r)
		if e != nil {
			writeError(w, e)
			return
		}
		fn(w, r, c)
	}
}

// writeError answers e in OpenAI's shape.
func writeError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	writeJSON(w, e.Status, errorBody(e))
}

func errorBody(e *Error) any {
	var param, code any
	if e.Param != "" {
		param = e.Param
	}
	if e.Code != "" {
		code = e.Code
	}
	return map[string]any{"error": map[string]any{"message": e.Message, "type": e.Type, "param": param, "code": code}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// models is GET /v1/models: the models served that the caller may use.
func (h *Handler) models(w http.ResponseWriter, _ *http.Request, c Caller) {
	created := h.cfg.Now().Unix()
	data := []map[string]any{}
	for _, m := range h.gen.Models() {
		if c.mayUse(m) {
			data = append(data, map[string]any{"id": m, "object": "model", "created": created, "owned_by": "batchd"})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// decode reads r's JSON body into v, bounded.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request, v any) *Error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.BodyMaxBytes))
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Message: fmt.Sprintf("body over %d bytes", h.cfg.BodyMaxBytes)}
		}
		return invalid("", "reading the body: %v", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return invalid("", "the body is not a valid JSON request: %v", err)
	}
	return nil
}

// Caller is who a request comes from: the tenant it is accounted to, and
// the models its API key may use (empty: any).
type Caller struct {
	Tenant string
	Models []string
}

func (c Caller) mayUse(model string) bool {
	return len(c.Models) == 0 || slices.Contains(c.Models, model)
}

// model checks that c may use name and that it is served: 403 before
// 404, so a key restricted to some models learns nothing of the others.
func (h *Handler) model(c Caller, name string) *Error {
	if name == "" {
		return invalid("model", "model: required")
	}
	if !c.mayUse(name) {
		return &Error{Status: http.StatusForbidden, Type: "invalid_request_error", Param: "model", Code: "forbidden",
			Message: fmt.Sprintf("this API key may not use the model %q", truncate(name))}
	}
	if !slices.Contains(h.gen.Models(), name) {
		return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("the model %q does not exist", truncate(name))}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// completions is POST /v1/completions.
func (h *Handler) completions(w http.ResponseWriter, r *http.Request, c Caller) {
	var body completionRequest
	if e := h.decode(w, r, &body); e != nil {
		writeError(w, e)
		return
	}
	req := Request{Model: body.Model, Tenant: c.Tenant}
	prompts, e := stringOrList(body.Prompt, "prompt")
	switch {
	case e != nil:
		e.Message += " (token-id prompts are not served)"
	case len(prompts) == 0:
		e = invalid("prompt", "prompt: required")
	case len(prompts) > PromptsMax:
		e = invalid("prompt", "%d prompts: at most %d", len(prompts), PromptsMax)
	case body.Echo:
		e = invalid("echo", "echo is not served")
	case body.Suffix != "":
		e = invalid("suffix", "suffix is not served")
	case body.BestOf != nil && *body.BestOf != 1:
		e = invalid("best_of", "best_of %d: only 1 is served", *body.BestOf)
	}
	if e == nil {
		e = body.params(&req)
	}
	if e == nil {
		req.MaxTokens, e = maxTokens(body.MaxTokens, "max_tokens", h.cfg.CompletionMaxTokens, h.cfg.MaxTokensLimit)
	}
	if e == nil {
		e = h.model(c, body.Model)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	reqs := make([]Request, len(prompts))
	for i, p := range prompts {
		reqs[i] = req
		reqs[i].Prompt = p
	}
	h.run(w, r, reqs, body.Stream, body.StreamOptions != nil && body.StreamOptions.IncludeUsage, completionShape{})
}

// chat is POST /v1/chat/completions.
func (h *Handler) chat(w http.ResponseWriter, r *http.Request, c Caller) {
	var body chatRequest
	if e := h.decode(w, r, &body); e != nil {
		writeError(w, e)
		return
	}
	req := Request{Model: body.Model, Tenant: c.Tenant}
	e := body.params(&req)
	if e == nil && (len(body.Messages) == 0 || len(body.Messages) > MessagesMax) {
		e = invalid("messages", "%d messages: want 1 to %d", len(body.Messages), MessagesMax)
	}
	roles, contents := make([]string, len(body.Messages)), make([]string, len(body.Messages))
	for i, m := range body.Messages {
		if e != nil {
			break
		}
		switch m.Role {
		case "system", "developer", "user", "assistant":
		default:
			e = invalid(fmt.Sprintf("messages[%d].role", i), "role %q: want system, developer, user or assistant", truncate(m.Role))
			continue
		}
		roles[i] = m.Role
		contents[i], e = chatText(m.Content, i)
	}
	if e == nil {
		limit := body.MaxCompletionTokens
		if limit == nil {
			limit = body.MaxTokens
		}
		req.MaxTokens, e = maxTokens(limit, "max_completion_tokens", h.cfg.MaxTokensLimit, h.cfg.MaxTokensLimit)
	}
	if e == nil {
		e = h.model(c, body.Model)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	req.Prompt = ChatPrompt(roles, contents)
	h.run(w, r, []Request{req}, body.Stream, body.StreamOptions != nil && body.StreamOptions.IncludeUsage, chatShape{})
}

// errStopped ends a sequence whose text reached a stop sequence.
var errStopped = errors.New("openai: stop sequence")

// choice is one sequence's outcome.
type choice struct {
	text   strings.Builder
	tokens int
	res    Result
	err    error
	opened bool // its stream's role chunk is out (chat)
}

// run generates every request (one choice each) and answers: one JSON
// body, or a stream of chunks. A stream's headers go out with its first
// chunk, so a request refused before any token (overload, a prompt too
// long) is answered with its own status.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, reqs []Request, stream, usage bool, shape responseShape) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	id := shape.idPrefix() + randomID()
	created := h.cfg.Now().Unix()
	model := reqs[0].Model
	var (
		mu      sync.Mutex // guards the writes to w and started
		started bool
		werr    error
	)
	send := func(v any) error {
		if werr != nil {
			return werr
		}
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
		}
		b, _ := json.Marshal(v)
		if _, werr = fmt.Fprintf(w, "data: %s\n\n", b); werr == nil {
			werr = http.NewResponseController(w).Flush()
		}
		return werr
	}
	// open sends choice i's role chunk, once, before its first text.
	open := func(c *choice, i int) error {
		if c.opened || !shape.roleChunk() {
			return nil
		}
		c.opened = true
		return send(shape.chunk(id, model, created, i, "", true, nil))
	}
	choices := make([]*choice, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		c := &choice{}
		choices[i] = c
		wg.Go(func() {
			st := stopper{stops: req.Stop}
			out := func(text string) error {
				if text == "" {
					return nil
				}
				if !stream {
					c.text.WriteString(text)
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				if err := open(c, i); err != nil {
					return err
				}
				return send(shape.chunk(id, model, created, i, text, false, nil))
			}
			c.res, c.err = h.gen.Generate(ctx, req, func(text string) error {
				c.tokens++
				sent, stopped := st.push(text)
				if err := out(sent); err != nil {
					return err
				}
				if stopped {
					return errStopped
				}
				return nil
			})
			switch {
			case errors.Is(c.err, errStopped):
				c.err, c.res.Finish = nil, FinishStop
			case c.err == nil:
				c.err = out(st.flush())
			}
			if c.err != nil {
				cancel() // one choice failed: the request has failed
			}
		})
	}
	wg.Wait()
	var failed error
	for _, c := range choices {
		if c.err != nil && (failed == nil || errors.Is(failed, context.Canceled)) {
			failed = c.err
		}
	}
	if failed != nil {
		if r.Context().Err() != nil {
			return // the client went away: no one to answer
		}
		e := h.apiError(failed)
		if !started {
			writeError(w, e)
			return
		}
		mu.Lock()
		_ = send(errorBody(e))
		mu.Unlock()
		return
	}
	u := usageOf(choices)
	if !stream {
		writeJSON(w, http.StatusOK, shape.response(id, model, created, choices, u))
		return
	}
	for i, c := range choices {
		fr := c.res.Finish
		if err := open(c, i); err != nil {
			return
		}
		if err := send(shape.chunk(id, model, created, i, "", false, &fr)); err != nil {
			return
		}
	}
	if usage {
		if err := send(map[string]any{"id": id, "object": shape.chunkObject(), "created": created, "model": model, "choices": []any{}, "usage": u}); err != nil {
			return
		}
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = http.NewResponseController(w).Flush()
}

// apiError is how err is answered.
func (h *Handler) apiError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	h.cfg.Logger.Error("openai: generation failed", "err", err)
	return &Error{Status: http.StatusInternalServerError, Type: "server_error", Message: "the generation failed"}
}

// usage is the usage object.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func usageOf(choices []*choice) usage {
	var u usage
	for _, c := range choices {
		u.PromptTokens += c.res.PromptTokens
		u.CompletionTokens += c.tokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// stopper applies stop sequences to a sequence's text as it comes: it
// passes on what cannot be part of a stop, holds back a tail that may be
// the start of one, and reports the first complete one (the text before
// it is the sequence's last).
type stopper struct {
	stops []string
	held  string
}

// push adds text and returns what may be sent now, and whether a stop
// sequence was reached.
func (s *stopper) push(text string) (string, bool) {
	if len(s.stops) == 0 {
		return text, false
	}
	s.held += text
	cut := -1
	for _, st := range s.stops {
		if i := strings.Index(s.held, st); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		out := s.held[:cut]
		s.held = ""
		return out, true
	}
	keep := 0
	for _, st := range s.stops {
		for k := min(len(st)-1, len(s.held)); k > keep; k-- {
			if strings.HasSuffix(s.held, st[:k]) {
				keep = k
				break
			}
		}
	}
	out := s.held[:len(s.held)-keep]
	s.held = s.held[len(s.held)-keep:]
	return out, false
}

// flush returns what is held back: the sequence ended without a stop.
func (s *stopper) flush() string {
	out := s.held
	s.held = ""
	return out
}
