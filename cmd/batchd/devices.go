package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/batchd/batchd/cudabridge"
)

// runDevices is `batchd devices`: the GPUs the CUDA driver sees, or why
// there are none (exit 1).
func runDevices(args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("devices", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: batchd devices")
			fmt.Fprintln(stdout)
			fmt.Fprintln(stdout, "Lists the GPUs the CUDA driver (libcuda.so.1) sees: index, name, memory")
			fmt.Fprintln(stdout, "and the driver's version. Without a driver or a GPU it says why and exits 1.")
			return err
		}
		return usagef("%v (see 'batchd devices -h')", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (see 'batchd devices -h')", fs.Arg(0))
	}
	v, devs, err := cudabridge.ListDevices()
	if err != nil {
		return err
	}
	return cudabridge.WriteDevices(stdout, v, devs)
}
