package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/batchd/batchd/engine/server"
)

// runStatus is `batchd status`: a node's view of its cluster.
func runStatus(args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	url := fs.String("url", "http://127.0.0.1:8080", "the node to ask (its HTTP address)")
	keyEnv := fs.String("key-env", "", "environment variable holding the node's metrics key, when its /metrics is behind one")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on the request")
	asJSON := fs.Bool("json", false, "print the node's answer as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: batchd status [--url http://HOST:PORT] [--key-env VAR] [--json]\n\nShows a node's view of its cluster (GET /v1/cluster): every member, its\nincarnation, state, devices and models, and the owner of each model.")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return err
		}
		return usagef("%v (see 'batchd status -h')", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (see 'batchd status -h')", fs.Arg(0))
	}
	key := ""
	if *keyEnv != "" {
		if key = os.Getenv(*keyEnv); key == "" {
			return usagef("--key-env: $%s is empty or unset", *keyEnv)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := server.FetchClusterStatus(ctx, *url, key)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return server.WriteClusterStatus(stdout, st)
}
