//go:build !hollywood

package main

import (
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/protoactor"
)

// runtimeName names the live actor runtime linked into this binary. The two
// runtimes cannot share a binary (both register the protobuf file
// actor.proto, and the program panics at start), so a build tag picks one:
// protoactor by default, hollywood with -tags hollywood.
const runtimeName = "protoactor"

// newRuntime makes the live actor runtime for engine.Config.Runtime.
func newRuntime(opts engine.RuntimeOptions) (engine.Runtime, error) { return protoactor.New(opts) }
