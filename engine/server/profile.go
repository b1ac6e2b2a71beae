package server

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/batchd/batchd/cudabridge"
	"github.com/batchd/batchd/engine/config"
)

// ProfileTarget opens device 0 of f's backend, built exactly as serve
// builds it (a worker process started and handshaken, an upstream asked
// for readiness), for `batchd profile` to time: a batch runs the file's
// first model at its first version, and fails if the backend fails it or
// any of its items. close releases the backend.
func ProfileTarget(f *config.File, log *slog.Logger) (t cudabridge.Target, closeAll func(), err error) {
	one := *f // one device: only device 0 is timed (cuda: GPU 0)
	one.Devices.Count = 1
	// Built as serve builds it: for cpu and cuda that also makes the
	// registry serve bytenet, so the model is read after.
	c, closeAll, _, err := engineConfig(&one, log)
	if err != nil {
		return t, nil, err
	}
	if c.Backend == nil || len(one.Models) == 0 {
		closeAll()
		return t, nil, fmt.Errorf("profile: devices.backend %q with %d models: nothing to time", f.Devices.Backend, len(one.Models))
	}
	m := one.Models[0]
	version := "v1"
	if len(m.Versions) > 0 {
		version = m.Versions[0].Name
	}
	lim := cudabridge.Limits{BatchMax: one.Policy.BatchMax, InputLenMax: one.HTTP.InputMaxBytes}
	if m.BatchMax > 0 {
		lim.BatchMax = min(lim.BatchMax, m.BatchMax)
	}
	if m.InputLenMax > 0 {
		lim.InputLenMax = min(lim.InputLenMax, m.InputLenMax)
	}
	b := c.Backend(0)
	run := func(ctx context.Context, inputs []string) error {
		outs, itemErrs, err := b.Run(ctx, m.Name, version, inputs)
		if err != nil {
			return err
		}
		if len(outs) != len(inputs) {
			return fmt.Errorf("%d outputs for %d inputs", len(outs), len(inputs))
		}
		for i, e := range itemErrs {
			if e != nil {
				return fmt.Errorf("item %d: %w", i, e)
			}
		}
		return nil
	}
	backend := f.Devices.Backend
	if backend == "" {
		backend = config.BackendEmulated
	}
	name := fmt.Sprintf("device 0 of devices.backend %s, model %s version %s", backend, m.Name, version)
	return cudabridge.Target{Name: name, Run: run, Limits: lim}, closeAll, nil
}
