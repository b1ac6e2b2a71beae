package sweep

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/batchd/batchd/sim"
)

// FleetKeys are the settings a fleet spec takes, in the order the help
// lists them.
var FleetKeys = []string{"devices", "latency", "latency-per-item", "batch-max"}

// ParseFleet applies a fleet spec, "devices=8,latency=80ms,batch-max=64",
// to cfg: the fleet a replay (or any run) is tried against (`batchd sim
// --fleet`). Each key at most once; an unknown key, a bad value or an
// empty item is an error that names it.
func ParseFleet(spec string, cfg *sim.Config) error {
	seen := map[string]bool{}
	for item := range strings.SplitSeq(spec, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || key == "" || val == "" {
			return fmt.Errorf("item %q: want key=value with a key of %s", item, strings.Join(FleetKeys, ", "))
		}
		if seen[key] {
			return fmt.Errorf("%s given twice", key)
		}
		seen[key] = true
		bad := func(err error) error { return fmt.Errorf("%s=%s: %w", key, val, err) }
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
				// A fixed cost (actors.FixedLatency) that keeps its
				// per-item part.
				cfg.Latency.Base, cfg.Latency.PerPaddedByte, cfg.Latency.Table = d, 0, nil
			} else {
				cfg.Latency.PerItem = d
				cfg.Latency.Table = nil
			}
		default:
			return fmt.Errorf("unknown key %q: want %s", key, strings.Join(FleetKeys, ", "))
		}
	}
	return nil
}
