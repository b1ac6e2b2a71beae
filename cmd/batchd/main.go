package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Exit statuses. Usage errors are 2, as with the flag package, so a script
// can tell a typo from a failed run.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// usageError is an error of the command line rather than of the run; it
// exits with exitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"serve", "serve inference over HTTP on the live engine (make run)", runServe},
	{"load", "send open- or closed-loop load to a server and report latency", runLoad},
	{"sim", "run the deterministic simulator on a workload and print its report", runSim},
	{"sim-cluster", "simulate a cluster of nodes with faults (a cluster scenario, or flags) and check every answer", runSimCluster},
	{"sim-gen", "run a generation scenario (continuous batching) in the simulator: latencies per tenant, tokens/s, KV use, charts", runSimGen},
	{"plan", "size a fleet: the formula beside the smallest fleet the simulator shows holding the SLO", runPlan},
	{"fidelity", "run one workload live and in the simulator and compare their percentiles", runFidelity},
	{"devices", "list the GPUs the CUDA driver sees, or say why there are none", runDevices},
	{"profile", "measure a backend's batch latency (bytenet on each GPU or the CPU, or a serve config's backend) into a latency table", runProfile},
	{"status", "show a node's view of its cluster: members, incarnations, states, devices, owners", runStatus},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "batchd %s: %v\n", c.name, err)
			return exitUsage
		default:
			fmt.Fprintf(stderr, "batchd %s: %v\n", c.name, err)
			return exitFail
		}
	}
	fmt.Fprintf(stderr, "batchd: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: batchd <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'batchd <command> -h' for a command's flags.")
}

// writeJSON writes v as indented JSON, the --json form of every command.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
