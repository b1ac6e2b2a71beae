package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	scengen "github.com/batchd/batchd/scenarios/gen"
)

// runSimGen runs a generation scenario (scenarios/gen) in the simulator:
// the report per rate, the charts with --charts DIR, and exit 1 if an
// expectation fails.
func runSimGen(args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("sim-gen", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	seed := fs.Uint64("seed", 0, "master seed (default: the scenario's)")
	charts := fs.String("charts", "", "write the charts (KV use over time, TTFT CDF, tokens/s by rate; PNG and SVG) into this folder")
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: batchd sim-gen SCENARIO [flags]\n\nRuns a generation scenario (continuous batching: KV cache, chunked prefill,\npreemption) in the simulator at each of its rates, prints TTFT, TPOT and\ninter-token latency per tenant, tokens/s, KV use and preemptions, and checks\nits expectations (exit 1 if one fails). SCENARIO is a file or a built-in\none (%s).\n\n", strings.Join(scengen.Builtins(), ", "))
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return err
		}
		return usagef("%v (see 'batchd sim-gen -h')", err)
	}
	if name == "" || fs.NArg() > 0 {
		return usagef("want one scenario, a file or one of %s (see 'batchd sim-gen -h')", strings.Join(scengen.Builtins(), ", "))
	}
	sc, err := scengen.Find(name)
	if err != nil {
		return usageError{err}
	}
	if *seed == 0 {
		*seed = sc.Seed
	}
	res, err := sc.Run(*seed)
	if err != nil {
		return err
	}
	if err := res.WriteText(stdout); err != nil {
		return err
	}
	if *charts != "" {
		paths, err := res.WriteCharts(*charts)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "charts: %s\n", strings.Join(paths, " "))
	}
	if f := res.Failures(); len(f) > 0 {
		return fmt.Errorf("generation scenario %s: %d of %d expectations failed:\n  %s", sc.Name, len(f), len(res.Checks), strings.Join(f, "\n  "))
	}
	return nil
}
