// Command batchd is batchd's one binary. Each mode is a subcommand:
//
//	batchd serve [flags]  serve inference over HTTP on the live engine
//	batchd load [flags]   send load to a server and report latency percentiles
//	batchd sim [flags]    run the deterministic simulator and print its report
//	batchd plan [flags]   size a fleet: the formula beside the simulator's smallest fleet
//	batchd fidelity       run one workload live and simulated; compare percentiles
//	batchd devices        list the GPUs the CUDA driver sees, or say why none
//	batchd profile        measure batch latency by size and input length; write a latency table
//
// main stays thin: it parses flags
// into a package's Config, validates it there, runs, and maps the outcome
// to an exit status (0 success, 1 a failed run or broken invariant, 2 a
// usage error).
//
// Imported by: nothing (a main package).
package main
