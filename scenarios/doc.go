// Package scenarios holds traffic and fault scenarios as data (YAML files)
// and their loader: a scenario states a fleet, its latency model, the
// models and tenants, the traffic in phases, the faults, the batcher's
// policy and what must hold (expect:), and this package turns it into a
// sim.Config, runs it and checks the expectations against the report.
//
// The built-in scenarios (the seeds' situations, one file each) are the
// *.yaml files of this folder, embedded in the binary, so `batchd sim NAME`
// finds them; any other file is loaded by path. TestScenarios runs every
// one and fails on a broken expectation, which puts them in `make test`.
//
// The policy, the registry (models:), the tenants' limits, the devices'
// supervision, cost model and fault rates are package actors/schema's, as
// in a serve configuration (engine/config): a key means the same in both.
// The schema is documented on Scenario and its fields; README.md shows a
// small file. Every mistake in a file is reported with the file, the line
// and the path of the key (traffic[1].rate), and an unknown key is a
// mistake, not something silently ignored.
//
// The simulator runs one batcher over all the devices of all the nodes:
// nodes group devices and give them their warm models, they do not add a
// network between batcher and device (NetDelay applies to every message).
//
// Imported by: cmd/batchd (the sim subcommand; and tests). It imports
// sim, actors and actors/schema, and nothing of the live engine.
package scenarios
