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
// Cluster scenarios (ClusterScenario) are files with a top-level cluster:
// section: nodes of front, accumulator and devices over a seeded network,
// SWIM membership, true faults (crash, restart, leave, partition, one-way)
// at given times, and expectations over sim/cluster's report (lost,
// twice, detection of a node, per-second figures in a window that may
// start at a node's detection). `batchd sim-cluster NAME|FILE` runs one;
// the built-in ones are the files of cluster/, and TestClusterScenarios
// runs every one (long ones with -scenarios.long). The two kinds share
// the strict loader, the latency key, the policy and the expectation
// syntax; each refuses the other's files with the command to use.
//
// Imported by: cmd/batchd (the sim and sim-cluster subcommands; and
// tests). It imports sim, sim/cluster, actors, actors/member and
// actors/schema, and nothing of the live engine.
package scenarios
