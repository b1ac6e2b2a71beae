package openai

// responseShape is what differs between completions and chat completions:
// their objects' names and where the text goes.
type responseShape interface {
	idPrefix() string
	chunkObject() string
	// roleChunk: a stream opens each choice with a chunk naming the
	// assistant's role (chat).
	roleChunk() bool
	// chunk is one streamed chunk of choice i: text, the role's opening
	// (role), or the choice's finish reason (finish not nil).
	chunk(id, model string, created int64, i int, text string, role bool, finish *Finish) any
	response(id, model string, created int64, choices []*choice, u usage) any
}

type completionShape struct{}

func (completionShape) idPrefix() string    { return "cmpl-" }
func (completionShape) chunkObject() string { return "text_completion" }
func (completionShape) roleChunk() bool     { return false }

// streamChunk is one chunk of a stream, of either shape: a struct, as a
// chunk is encoded for every token of every stream (encoding/json encodes
// a struct without a map's boxing and key sorting: 0.6 µs a chunk against
// 3 to 5 µs as a map, BenchmarkChunk).
type streamChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices [1]chunkChoice `json:"choices"`
}

type chunkChoice struct {
	Index int `json:"index"`
	// Text is a completion's (always present), Delta a chat's.
	Text     *string     `json:"text,omitempty"`
	Delta    *chunkDelta `json:"delta,omitempty"`
	Logprobs *struct{}   `json:"logprobs"`
	Finish   *Finish     `json:"finish_reason"`
}

type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

func (s completionShape) chunk(id, model string, created int64, i int, text string, _ bool, finish *Finish) any {
	c := &streamChunk{ID: id, Object: s.chunkObject(), Created: created, Model: model}
	c.Choices[0] = chunkChoice{Index: i, Text: &text, Finish: finish}
	return c
}

func (s completionShape) response(id, model string, created int64, choices []*choice, u usage) any {
	out := make([]any, len(choices))
	for i, c := range choices {
		out[i] = map[string]any{"index": i, "text": c.text.String(), "logprobs": nil, "finish_reason": c.res.Finish}
	}
	return map[string]any{"id": id, "object": "text_completion", "created": created, "model": model, "choices": out, "usage": u}
}

type chatShape struct{}

func (chatShape) idPrefix() string    { return "chatcmpl-" }
func (chatShape) chunkObject() string { return "chat.completion.chunk" }
func (chatShape) roleChunk() bool     { return true }

func (s chatShape) chunk(id, model string, created int64, i int, text string, role bool, finish *Finish) any {
	delta := &chunkDelta{}
	switch {
	case role:
		empty := ""
		delta.Role, delta.Content = "assistant", &empty
	case finish == nil:
		delta.Content = &text
	}
	c := &streamChunk{ID: id, Object: s.chunkObject(), Created: created, Model: model}
	c.Choices[0] = chunkChoice{Index: i, Delta: delta, Finish: finish}
	return c
}

func (s chatShape) response(id, model string, created int64, choices []*choice, u usage) any {
	out := make([]any, len(choices))
	for i, c := range choices {
		out[i] = map[string]any{"index": i, "message": map[string]any{"role": "assistant", "content": c.text.String()},
			"logprobs": nil, "finish_reason": c.res.Finish}
	}
	return map[string]any{"id": id, "object": "chat.completion", "created": created, "model": model, "choices": out, "usage": u}
}
