package server

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/record"
)

// RecordOptions are what `batchd serve --record FILE` and its companions
// ask of the server: a recording of every request, for `batchd sim
// --replay`. The zero value records nothing.
type RecordOptions struct {
	// Path is the file to write one JSON line per request to (created or
	// truncated). Empty: no recording.
	Path string
	// Inputs also records each request's input text (the clients' data:
	// off by default).
	Inputs bool
	// BytesMax bounds the file; zero means record.BytesMaxDefault.
	BytesMax int64
}

// openRecord returns the front door the HTTP handler and the job runner
// should call: eng itself, or with o.Path a recorder in front of it, and
// the function that flushes and closes the recording (a no-op without
// one).
func openRecord(o RecordOptions, eng engine.FrontDoor, log *slog.Logger) (engine.FrontDoor, func() error, error) {
	if o.Path == "" {
		return eng, func() error { return nil }, nil
	}
	f, err := os.OpenFile(o.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	rec, err := record.New(eng, f, record.Config{Inputs: o.Inputs, BytesMax: o.BytesMax, Logger: log})
	if err != nil {
		return nil, nil, errors.Join(err, f.Close())
	}
	bytesMax := o.BytesMax
	if bytesMax == 0 {
		bytesMax = record.BytesMaxDefault
	}
	log.Info("recording requests", "file", o.Path, "inputs", o.Inputs, "bytes_max", bytesMax)
	return rec, func() error {
		s := rec.Stats()
		err := rec.Close()
		log.Info("recording closed", "file", o.Path, "lines", s.Lines, "bytes", s.Bytes, "skipped", s.Skipped)
		return err
	}, nil
}
