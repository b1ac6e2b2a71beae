// Package schema is the one definition of what both YAML surfaces of
// batchd say about the batcher and its devices: the policy (policy:), the
// registry of models and versions (models:), the tenants' shares and limits
// (tenants:, default_tenant:), the devices' supervision, cost model and
// faults (devices:), and the strict loader that reads them.
//
// The serve configuration (engine/config) and the simulator's scenarios
// (scenarios) embed these types, so a key means the same in both, has the
// same default (taken from the owner's constructor: PolicyOf over an
// actors.BatcherConfig, SupervisionOf over an actors.DeviceConfig), is
// checked by the same validator, and maps onto actors.BatcherConfig and
// actors.DeviceConfig by the same function (Policy.Apply, Configs, ...).
//
// Decode is the loader: an unknown key (with the nearest known name as a
// hint), a value of the wrong type and, through Validator, a value out of
// range are all errors of the form "file:line: key.path: message", one a
// line, in file order, wrapping ErrInvalid.
//
// Imported by: cmd/batchd (the sim subcommand), engine/config,
// engine/fidelity, scenarios.
// It imports actors, actors/devicemodel (the fault plan and schedule it
// builds) and the YAML library, nothing of the live engine or the
// simulator.
package schema
