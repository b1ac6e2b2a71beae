package openai

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Limits on a request, so a typo cannot hold a sequence for ever.
const (
	// StopMax is OpenAI's limit on stop sequences.
	StopMax = 4
	// stopLenMax bounds one stop sequence, in bytes.
	stopLenMax = 256
	// PromptsMax bounds the prompts of one completions request (each a
	// choice of its own).
	PromptsMax = 16
	// MessagesMax bounds a chat's messages.
	MessagesMax = 1024
)

// completionRequest is POST /v1/completions' body: the fields batchd
// reads (others are ignored).
type completionRequest struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	commonParams
	Echo   bool   `json:"echo"`
	Suffix string `json:"suffix"`
	BestOf *int   `json:"best_of"`
}

// chatRequest is POST /v1/chat/completions' body.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	commonParams
}

// chatMessage is one message of a chat; content is a string or an array
// of text parts.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// commonParams are the sampling and streaming fields both endpoints take.
type commonParams struct {
	Stop          json.RawMessage `json:"stop"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Temperature *float64        `json:"temperature"`
	TopP        *float64        `json:"top_p"`
	Seed        *int64          `json:"seed"`
	N           *int            `json:"n"`
	User        string          `json:"user"`
	Logprobs    json.RawMessage `json:"logprobs"`
}

// invalid is a 400 invalid_request_error about param.
func invalid(param, format string, args ...any) *Error {
	return &Error{Status: 400, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

// stringOrList reads a JSON string or an array of strings (absent or
// null: none).
func stringOrList(raw json.RawMessage, param string) ([]string, *Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalid(param, "%s: want a string or an array of strings", param)
	}
	return list, nil
}

// params checks the common fields and returns the stop sequences and the
// sampling settings.
func (p commonParams) params(req *Request) *Error {
	stop, e := stringOrList(p.Stop, "stop")
	if e != nil {
		return e
	}
	if len(stop) > StopMax {
		return invalid("stop", "%d stop sequences: at most %d", len(stop), StopMax)
	}
	for _, s := range stop {
		if s == "" || len(s) > stopLenMax {
			return invalid("stop", "a stop sequence of %d bytes: want 1 to %d", len(s), stopLenMax)
		}
	}
	req.Stop = stop
	if t := p.Temperature; t != nil {
		if !(*t >= 0 && *t <= 2) {
			return invalid("temperature", "%v: want 0 to 2", *t)
		}
		req.Temperature = *t
	}
	if t := p.TopP; t != nil && !(*t > 0 && *t <= 1) {
		return invalid("top_p", "%v: want more than 0, at most 1", *t)
	}
	if p.Seed != nil {
		req.Seed = *p.Seed
	}
	if p.N != nil && *p.N != 1 {
		return invalid("n", "n %d: only 1 is served", *p.N)
	}
	if l := strings.TrimSpace(string(p.Logprobs)); l != "" && l != "null" && l != "false" {
		return invalid("logprobs", "logprobs are not served")
	}
	req.User = p.User
	return nil
}

// maxTokens checks a max_tokens value against the limit (def when absent).
func maxTokens(v *int, param string, def, limit int) (int, *Error) {
	if v == nil {
		return def, nil
	}
	if *v < 1 || *v > limit {
		return 0, invalid(param, "%d: want 1 to %d", *v, limit)
	}
	return *v, nil
}

// chatText is a message's text: a string, or the text parts of an array.
func chatText(raw json.RawMessage, i int) (string, *Error) {
	param := fmt.Sprintf("messages[%d].content", i)
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(param, "%s: want a string or an array of text parts", param)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", invalid(param, "%s: a part of type %q: only text is served", param, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// ChatPrompt is the prompt a chat becomes for a byte-level model with no
// chat template of its own: each message as "role: content" on its line,
// then "assistant:" for the model to go on from.
func ChatPrompt(roles, contents []string) string {
	var b strings.Builder
	for i := range roles {
		b.WriteString(roles[i])
		b.WriteString(": ")
		b.WriteString(contents[i])
		b.WriteByte('\n')
	}
	b.WriteString("assistant:")
	return b.String()
}
