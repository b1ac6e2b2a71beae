package engine

import "github.com/batchd/batchd/actors"

// FrontsOf returns the addresses of e's fronts, for tests that reach them.
func FrontsOf(e *Engine) []actors.Address { return e.fronts }
