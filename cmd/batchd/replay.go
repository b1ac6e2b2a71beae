package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/record"
	"github.com/batchd/batchd/engine/server"
	"github.com/batchd/batchd/sim"
)

// bindRecord registers `batchd serve --record FILE` and its companions
// on fs, into o.
func bindRecord(fs *flag.FlagSet, o *server.RecordOptions) {
	fs.StringVar(&o.Path, "record", "", "write one JSON line per request to this file (arrival, tenant, model, version, input length, outcome) for 'batchd sim --replay'")
	fs.BoolVar(&o.Inputs, "record-inputs", false, "with --record, also write each request's input text (the clients' data: off by default)")
	fs.Int64Var(&o.BytesMax, "record-max-bytes", record.BytesMaxDefault, "with --record, stop recording (with a warning) before the file passes this size")
}

// checkRecord refuses the combinations of the --record flags that make no
// sense.
func checkRecord(o server.RecordOptions) error {
	if o.BytesMax < 1 {
		return usagef("--record-max-bytes %d: must be positive", o.BytesMax)
	}
	if o.Path == "" && o.Inputs {
		return usagef("--record-inputs: needs --record FILE")
	}
	return nil
}

// fleetKeys are the settings --fleet takes, in the order the help lists
// them.
var fleetKeys = []string{"devices", "latency", "latency-per-item", "batch-max"}

// parseFleet applies a --fleet spec, "devices=8,latency=80ms,batch-max=64",
// to cfg: the fleet a replay (or any run) is tried against. Each key at
// most once; an unknown key, a bad value or an empty item is an error that
// names it.
func parseFleet(spec string, cfg *sim.Config) error {
	seen := map[string]bool{}
	for item := range strings.SplitSeq(spec, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || key == "" || val == "" {
			return fmt.Errorf("--fleet %q: item %q: want key=value with a key of %s", spec, item, strings.Join(fleetKeys, ", "))
		}
		if seen[key] {
			return fmt.Errorf("--fleet %q: %s given twice", spec, key)
		}
		seen[key] = true
		bad := func(err error) error { return fmt.Errorf("--fleet %q: %s=%s: %w", spec, key, val, err) }
		switch key {
		case "devices", "batch-max":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 {
				return bad(errors.New("want a positive integer"))
			}
			if key == "devices" {
				cfg.Devices = n
			} else {
				cfg.Batcher.BatchMax = n
			}
		case "latency", "latency-per-item":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 || (key == "latency" && d == 0) {
				return bad(errors.New("want a positive duration such as 100ms"))
			}
			if key == "latency" {
				perItem := cfg.Latency.PerItem
				cfg.Latency = actors.FixedLatency(d)
				cfg.Latency.PerItem = perItem
			} else {
				cfg.Latency.PerItem = d
				cfg.Latency.Table = nil
			}
		default:
			return fmt.Errorf("--fleet %q: unknown key %q: want %s", spec, key, strings.Join(fleetKeys, ", "))
		}
	}
	return nil
}

// loadReplay reads a recording into cfg: its requests replace the traffic
// and the safety phase becomes just long enough to hold them.
func loadReplay(path string, cfg *sim.Config) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--replay: %w", err)
	}
	defer f.Close()
	reqs, err := sim.ReadReplay(f, 0)
	if err != nil {
		return fmt.Errorf("--replay %s: %w", path, err)
	}
	cfg.Replay = reqs
	cfg.Sources = nil
	cfg.Duration = sim.ReplayDuration(reqs)
	return nil
}
