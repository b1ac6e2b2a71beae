// Package autoscale runs the autoscaling policy live: the simulator's
// actors.Autoscaler, the same actor, on a live engine's signals. Every
// period a Recommender reads the batcher's signals (engine.Engine.Signals,
// a message round trip) and sends them to the Autoscaler, which runs on
// an actor runtime of its own (engine.LinkedRuntime); the policy's
// decisions (actors.ScaleTo) come back to an endpoint that keeps the
// latest. Nothing here adds or removes a device: the node exports the
// recommendation (/metrics, batchd_autoscale_devices_recommended beside
// batchd_autoscale_devices_current) for a HorizontalPodAutoscaler or KEDA
// to act on (cluster/deploy/kubernetes), and its status page shows it.
//
// The policy reads one node's load, so on a node that is never given more
// devices the devices it asked for stay "booting" for its ColdStart (and
// a Cooldown): set autoscale.cold_start to the time a new pod takes to
// serve, so that pressure adds one device per pod start, as in the
// simulator.
//
// Imported by: engine/server. It imports actors and engine.
package autoscale
