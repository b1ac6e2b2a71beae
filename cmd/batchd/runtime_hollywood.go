//go:build hollywood

package main

import (
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/hollywood"
)

// runtimeName names the live actor runtime linked into this binary; see
// runtime_protoactor.go for why a build tag chooses it.
const runtimeName = "hollywood"

// newRuntime makes the live actor runtime for engine.Config.Runtime.
func newRuntime(opts engine.RuntimeOptions) (engine.Runtime, error) { return hollywood.New(opts) }
