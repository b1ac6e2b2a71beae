package gen

import (
	"time"

	"github.com/batchd/batchd/actors"
)

// Request is one generation request as a front door hands it to a
// Scheduler.
type Request struct {
	// ID is unique among the requests a Scheduler has in flight; it
	// names the sequence in steps and tokens.
	ID     uint64
	Tenant string
	Model  string
	// Version: empty means the scheduler's own.
	Version string
	// Priority: higher levels are served first; clamped to [PriorityLow,
	// PriorityHigh].
	Priority int8
	// Prompt is the context to continue, one byte a token.
	Prompt string
	// MaxTokens caps the output: the stream ends there if the model has
	// not ended it before.
	MaxTokens int
	// Temperature and Seed are how the model picks each token, carried to
	// every step slot of the sequence: Temperature 0 is greedy, above 0 a
	// draw from the softmax of the logits over Temperature, seeded with
	// Seed (a backend's own function of the seed and the position, so a
	// recompute picks the same tokens). Temperature must be a finite
	// number >= 0. The emulated generator ignores both.
	Temperature float64
	Seed        int64
	// Arrival is when the front door received the request.
	Arrival time.Duration
	// TTFTDeadline is the absolute time by which the first token is
	// useful; zero means Arrival plus Config.TTFT.
	TTFTDeadline time.Duration
	// Deadline is the absolute time by which the whole output is useful;
	// zero means Arrival plus Config.Timeout.
	Deadline time.Duration
	// ReplyTo is where the Tokens and the one End go.
	ReplyTo actors.Address
}

// Submit asks a Scheduler to admit and serve a generation request.
type Submit struct{ Req Request }

// Cancel withdraws a generation request, queued or running: its
// sequence frees its KV blocks and its stream ends Cancelled.
type Cancel struct{ ID uint64 }

// Token is one generated token, sent to the request's ReplyTo as soon as
// the step that made it is done. Index counts from 0 within the request's
// output; the scheduler sends each index once and in order, a recompute
// after a preemption or a device crash included (it resumes from the
// tokens already sent). A client behind a network that may repeat a
// message keeps the next index it expects and drops any other.
type Token struct {
	ID    uint64
	Index int
	Byte  byte
}

// End is the one terminal message of a generation request, sent to its
// ReplyTo after its last Token.
type End struct {
	ID      uint64
	Outcome actors.Outcome
	// Reason and Err say why, for any outcome other than Completed.
	Reason actors.Reason
	Err    string
	// RetryAfter is the hint for Rejected replies.
	RetryAfter time.Duration
	// Version is the model version that served the request.
	Version string
	// Tokens is the number of Tokens sent: the stream's length.
	Tokens int
	// The request's timeline: FirstToken is zero when no token was sent.
	Arrival, FirstToken, Done time.Duration
	// Preemptions counts the times the sequence was preempted for KV
	// blocks (and recomputed); Attempts the devices it ran on that crashed,
	// plus one.
	Preemptions, Attempts int
}
