package openai

import (
	"encoding/json"
	"testing"
)

// BenchmarkChunk is the encoding of one streamed chunk, the handler's
// work for every token of every stream (besides its write and flush).
//
//	go test -run '^$' -bench Chunk -benchmem ./engine/openai/
func BenchmarkChunk(b *testing.B) {
	for _, c := range []struct {
		name  string
		shape responseShape
	}{{"completion", completionShape{}}, {"chat", chatShape{}}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := json.Marshal(c.shape.chunk("cmpl-0123456789abcdef01234567", "tiny", 1795573897, 0, "x", false, nil)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The struct chunks encode as OpenAI's: a completion's text always
// present, a chat's delta with the role and empty content to open, the
// content for text, empty at the finish; logprobs and finish_reason null
// until the finish. Deliberate break: the chat's opening chunk without its
// empty content (`delta.Role = "assistant"` alone) fails it.
func TestChunkJSON(t *testing.T) {
	stop := FinishStop
	for _, c := range []struct {
		got  any
		want string
	}{
		{completionShape{}.chunk("id", "m", 7, 1, "", false, nil), `{"id":"id","object":"text_completion","created":7,"model":"m","choices":[{"index":1,"text":"","logprobs":null,"finish_reason":null}]}`},
		{completionShape{}.chunk("id", "m", 7, 0, "ab", false, &stop), `{"id":"id","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":"ab","logprobs":null,"finish_reason":"stop"}]}`},
		{chatShape{}.chunk("id", "m", 7, 0, "", true, nil), `{"id":"id","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`},
		{chatShape{}.chunk("id", "m", 7, 0, "x", false, nil), `{"id":"id","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}]}`},
		{chatShape{}.chunk("id", "m", 7, 0, "", false, &stop), `{"id":"id","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`},
	} {
		b, err := json.Marshal(c.got)
		if err != nil || string(b) != c.want {
			t.Errorf("chunk %s, %v\nwant %s", b, err, c.want)
		}
	}
}
