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

func (s completionShape) chunk(id, model string, created int64, i int, text string, _ bool, finish *Finish) any {
	return map[string]any{"id": id, "object": s.chunkObject(), "created": created, "model": model,
		"choices": []any{map[string]any{"index": i, "text": text, "logprobs": nil, "finish_reason": finish}}}
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
	delta := map[string]any{}
	switch {
	case role:
		delta["role"], delta["content"] = "assistant", ""
	case finish == nil:
		delta["content"] = text
	}
	return map[string]any{"id": id, "object": s.chunkObject(), "created": created, "model": model,
		"choices": []any{map[string]any{"index": i, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
}

func (s chatShape) response(id, model string, created int64, choices []*choice, u usage) any {
	out := make([]any, len(choices))
	for i, c := range choices {
		out[i] = map[string]any{"index": i, "message": map[string]any{"role": "assistant", "content": c.text.String()},
			"logprobs": nil, "finish_reason": c.res.Finish}
	}
	return map[string]any{"id": id, "object": "chat.completion", "created": created, "model": model, "choices": out, "usage": u}
}
