// Package config reads the YAML file of `batchd serve` into the
// configurations the server is built from: actors.BatcherConfig and
// actors.DeviceConfig (inside engine.Config), the emulated backends' fault
// knobs, and httpapi.Config.
//
// One file describes one server:
//
//	http:     listen address, body and input limits, timeouts,
//	          who may read /metrics
//	grpc:     the Open Inference Protocol over gRPC: listen address (empty: off),
//	          message and per-stream bounds
//	engine:   seed, in-flight bound, backend call bound
//	devices:  count, emulated latency (or a latency model), warm models, fault knobs
//	policy:   batch max, queue bounds, SLO, margin, key policy, priority aging, ...
//	models:   names, versions with routing weights, bucket edges, per-model limits
//	          (left out: the default registry, "echo"; open_registry: true, with
//	          none listed, serves any model name)
//	tenants:  API keys with weights, rates, bursts and in-flight caps
//	default_tenant: the open tenant's share and limits
//
// The policy, the registry, the tenants' limits, the devices' supervision,
// cost model and fault rates are package actors/schema's, which the
// simulator's scenarios embed too: a key means the same in both, with the
// same default, validator and mapping onto actors.BatcherConfig
// (BatcherConfig, the one mapping, which `batchd sim --config` runs too).
//
// Defaults are filled in one place, Default, which takes them from the
// owners' own constructors (actors.DefaultBatcherConfig,
// actors.DefaultDeviceConfig, engine.DefaultConfig, httpapi.DefaultConfig):
// a key the file leaves out keeps that default. Decoding is strict: an
// unknown key, a value of the wrong type and a value out of range are all
// errors that name the key's path (policy.batch_max) and its line.
//
// Embedded is the file `make run` serves with: the seeds' setup (4 emulated
// devices at 100 ms, batches of up to 100, one model "echo", one open
// tenant) on 127.0.0.1:8080, every other key written out with its default
// and a comment.
//
// Imported by: cmd/batchd, engine/fidelity, engine/server. It imports
// actors, actors/devicemodel (the fault plan), actors/gen (the generation
// scheduler's configuration), actors/schema (the schema it
// shares with scenarios), engine, engine/grpcapi, engine/httpapi,
// engine/jobs, engine/upstream (devices.upstream, devices.fanout) and
// engine/workerproc (devices.worker).
package config
