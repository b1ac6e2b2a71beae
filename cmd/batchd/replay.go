package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/record"
	"github.com/batchd/batchd/sim"
)

// recordOptions are `batchd serve --record FILE` and its companions.
type recordOptions struct {
	path     string
	inputs   bool
	bytesMax int64
}

func (o *recordOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.path, "record", "", "write one JSON line per request to this file (arrival, tenant, model, version, input length, outcome) for 'batchd sim --replay'")
	fs.BoolVar(&o.inputs, "record-inputs", false, "with --record, also write each request's input text (the clients' data: off by default)")
	fs.Int64Var(&o.bytesMax, "record-max-bytes", record.BytesMaxDefault, "with --record, stop recording (with a warning) before the file passes this size")
}

func (o recordOptions) validate() error {
	if o.bytesMax < 1 {
		return usagef("--record-max-bytes %d: must be positive", o.bytesMax)
	}
	if o.path == "" && o.inputs {
		return usagef("--record-inputs: needs --record FILE")
	}
	return nil
}

// open returns the Doer the HTTP handler should call: eng itself, or with
// --record a recorder in front of it, and the function that flushes and
// closes the recording (a no-op without one).
func (o recordOptions) open(eng engine.FrontDoor, log *slog.Logger) (engine.FrontDoor, func() error, error) {
	if o.path == "" {
		return eng, func() error { return nil }, nil
	}
	f, err := os.OpenFile(o.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("--record: %w", err)
	}
	rec, err := record.New(eng, f, record.Config{Inputs: o.inputs, BytesMax: o.bytesMax, Logger: log})
	if err != nil {
		return nil, nil, errors.Join(err, f.Close())
	}
	log.Info("recording requests", "file", o.path, "inputs", o.inputs, "bytes_max", o.bytesMax)
	return rec, func() error {
		s := rec.Stats()
		err := rec.Close()
		log.Info("recording closed", "file", o.path, "lines", s.Lines, "bytes", s.Bytes, "skipped", s.Skipped)
		return err
	}, nil
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
