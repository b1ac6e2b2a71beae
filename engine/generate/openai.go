package generate

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/gen"
	"github.com/batchd/batchd/engine/openai"
)

var _ openai.Generator = (*Service)(nil)

// stream is one request's tokens and end as they come back.
type stream struct {
	max  int // MaxTokens: the most tokens kept
	mu   sync.Mutex
	out  []byte
	end  *gen.End
	wake chan struct{} // capacity 1: something came
}

// deliver is the reply endpoint: it hands each Token and gen.End to its
// stream. It runs on the scheduler's goroutine and does not block.
func (s *Service) deliver(msg actors.Message) {
	var id uint64
	switch m := msg.(type) {
	case gen.Token:
		id = m.ID
	case gen.End:
		id = m.ID
	default:
		return
	}
	s.mu.Lock()
	st := s.streams[id]
	s.mu.Unlock()
	if st == nil {
		return // its Generate has returned
	}
	st.mu.Lock()
	switch m := msg.(type) {
	case gen.Token:
		// The next index only, each once: a repeat or a gap is dropped.
		if m.Index == len(st.out) && len(st.out) < st.max && st.end == nil {
			st.out = append(st.out, m.Byte)
		}
	case gen.End:
		if st.end == nil {
			st.end = &m
		}
	}
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// Generate implements openai.Generator: it submits req to its model's
// scheduler, emits each token's text in index order as it comes, and
// turns the gen.End into a Result or an *openai.Error. When ctx ends (the
// client went away) or emit fails, it cancels the request, so the
// scheduler frees its KV blocks at once and the device forgets it at its
// next step.
func (s *Service) Generate(ctx context.Context, req openai.Request, emit func(text string) error) (openai.Result, error) {
	m := s.models[req.Model]
	switch {
	case m == nil:
		return openai.Result{}, &openai.Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("the model %q is not served", req.Model)}
	case s.draining.Load():
		return openai.Result{}, overloaded("the server is shutting down", time.Second)
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		return openai.Result{}, overloaded(fmt.Sprintf("%d generation requests in flight", cap(s.slots)), time.Second)
	}
	id := s.ids.Add(1)
	st := &stream{max: req.MaxTokens, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	s.streams[id] = st
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, id)
		s.mu.Unlock()
	}()
	arrival := s.rt.Now()
	s.rt.Send(m.addr, gen.Submit{Req: gen.Request{
		ID: id, Tenant: req.Tenant, Model: req.Model, Prompt: req.Prompt, MaxTokens: req.MaxTokens,
		Temperature: req.Temperature, Seed: req.Seed, Arrival: arrival, ReplyTo: replyAddr,
	}})
	// The scheduler answers by the request's deadline; past it and the
	// grace, its gen.End is lost (a scheduler restarted under it).
	bound := time.NewTimer(m.cfg.Timeout + s.cfg.ReplyGrace)
	defer bound.Stop()
	cancel := func() { s.rt.Send(m.addr, gen.Cancel{ID: id}) }
	sent := 0
	for {
		select {
		case <-st.wake:
		case <-ctx.Done():
			cancel()
			s.met.cancelled(m.name, sent)
			return openai.Result{}, ctx.Err()
		case <-bound.C:
			cancel()
			s.met.ended(m, req, gen.End{Outcome: actors.Expired, Reason: actors.ReasonDeadline})
			return openai.Result{}, &openai.Error{Status: http.StatusGatewayTimeout, Type: "server_error", Code: "timeout",
				Message: "no end of the generation came by its deadline"}
		}
		st.mu.Lock()
		out, end := st.out[sent:], st.end
		st.mu.Unlock()
		for _, b := range out {
			sent++
			if err := emit(string([]byte{b})); err != nil {
				// A stop sequence, or the client gone.
				cancel()
				s.met.cancelled(m.name, sent)
				return openai.Result{}, err
			}
		}
		if end == nil {
			continue
		}
		s.met.ended(m, req, *end)
		if end.Outcome != actors.Completed {
			return openai.Result{}, endError(end)
		}
		if sent != end.Tokens {
			return openai.Result{}, fmt.Errorf("generate: request %d ended after %d tokens, %d received", id, end.Tokens, sent)
		}
		res := openai.Result{PromptTokens: len(req.Prompt), Finish: openai.FinishStop}
		if sent >= req.MaxTokens {
			res.Finish = openai.FinishLength
		}
		return res, nil
	}
}

func overloaded(msg string, retry time.Duration) *openai.Error {
	return &openai.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "overloaded", Message: msg, RetryAfter: retry}
}

// endError is how a request that did not complete is answered, by the
// reason its scheduler gave.
func endError(e *gen.End) error {
	msg := e.Err
	if msg == "" {
		msg = e.Outcome.String() + ": " + e.Reason.String()
	}
	switch e.Reason {
	case actors.ReasonInvalid:
		return &openai.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: msg}
	case actors.ReasonUnknownModel:
		return &openai.Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found", Message: msg}
	case actors.ReasonRateLimited:
		return &openai.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limit_exceeded", Message: msg, RetryAfter: max(e.RetryAfter, time.Second)}
	case actors.ReasonQuota:
		return &openai.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "quota_exceeded", Message: msg, RetryAfter: max(e.RetryAfter, time.Second)}
	case actors.ReasonQueueFull, actors.ReasonOverloaded, actors.ReasonNoDevice, actors.ReasonDraining:
		return overloaded(msg, max(e.RetryAfter, time.Second))
	case actors.ReasonDeadline:
		return &openai.Error{Status: http.StatusGatewayTimeout, Type: "server_error", Code: "timeout", Message: msg}
	case actors.ReasonCancelled:
		return context.Canceled
	}
	return &openai.Error{Status: http.StatusInternalServerError, Type: "server_error", Code: e.Reason.String(), Message: msg}
}
