package actors

import (
	"fmt"
	"slices"
)

// Router is the door of a split on one node: one accumulator (a Batcher
// configured for one model) per model, and this actor in front of them,
// where a single Batcher would be. It sends each request to its model's
// accumulator, a cancellation and a drain to every one of them (the one
// that queues the request answers; the others ignore it), and answers a
// request for a model it has no accumulator for Rejected itself. It keeps
// no state but the routes.
type Router struct {
	models []string
	to     []Address
}

// NewRouter returns a Router that sends model models[i] to to[i].
func NewRouter(models []string, to []Address) (*Router, error) {
	switch {
	case len(models) == 0 || len(models) > SplitModelsMax:
		return nil, fmt.Errorf("router: %d models: want 1 to %d", len(models), SplitModelsMax)
	case len(to) != len(models):
		return nil, fmt.Errorf("router: %d models, %d accumulators", len(models), len(to))
	}
	for i, m := range models {
		if m == "" || slices.Index(models, m) != i {
			return nil, fmt.Errorf("router: model %q empty or listed twice", m)
		}
	}
	return &Router{models: slices.Clone(models), to: slices.Clone(to)}, nil
}

// Receive implements Actor.
func (r *Router) Receive(ctx Context, msg Message) {
	switch m := msg.(type) {
	case Submit:
		if i := slices.Index(r.models, m.Req.Model); i >= 0 {
			ctx.Send(r.to[i], m)
			return
		}
		ctx.Send(m.Req.ReplyTo, Reply{ID: m.Req.ID, Outcome: Rejected, Reason: ReasonUnknownModel,
			Err: fmt.Sprintf("unknown model %q", m.Req.Model), Version: m.Req.Version,
			Arrival: m.Req.Arrival, Done: ctx.Now()})
	case Cancel, Drain:
		for _, a := range r.to {
			ctx.Send(a, m)
		}
	case Start, Undeliverable:
	default:
		panic(fmt.Sprintf("batchd: router got unknown message %T", msg))
	}
}
