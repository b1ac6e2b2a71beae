// Package deploy holds batchd's deployment examples, as files to copy:
// kubernetes/ (one Deployment per node, scaled on the autoscaling
// recommendation), kubernetes-cluster/ (a StatefulSet of nodes that batch
// together, joined by a headless service's DNS name, the gossip key from
// a Secret) and systemd/ (a unit, its environment file and a config for a
// node on a bare GPU host). The package has no code: its test checks every
// Kubernetes manifest against the API's schemas (client-go's, the ones
// server-side apply uses, embedded in the module, so no download), and
// cmd/batchd's tests check that the configuration each example passes
// loads as batchd serve loads it.
//
// Imported by: nothing (its test is the point).
package deploy
