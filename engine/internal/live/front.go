package live

import (
	"fmt"
	"time"

	"github.com/batchd/batchd/actors"
)

// Front is the part of engine.Runtime that every adapter answers from its
// Host alone: an adapter embeds it (and keeps the Host for Spawn and
// Close), so the delegations are written once and the Host's NewCell
// stays off the adapter's public methods.
type Front struct {
	host *Host
	name string // the adapter's name, for errors
}

// NewFront returns the Front of an adapter called name over h.
func NewFront(h *Host, name string) Front { return Front{host: h, name: name} }

// Listen implements engine.Runtime.
func (f Front) Listen(addr actors.Address, fn func(actors.Message)) error {
	if err := f.host.Listen(addr, fn); err != nil {
		return fmt.Errorf("%s: listen: %w", f.name, err)
	}
	return nil
}

// Send implements engine.Runtime.
func (f Front) Send(to actors.Address, msg actors.Message) { f.host.Send(to, msg) }

// Now implements engine.Runtime.
func (f Front) Now() time.Duration { return f.host.Now() }

// Restarts is how many times supervision restarted an actor.
func (f Front) Restarts() int64 { return f.host.Restarts() }

// DeadLetters is how many messages went to an address nobody holds.
func (f Front) DeadLetters() int64 { return f.host.DeadLetters() }
