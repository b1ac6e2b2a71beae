package config

import (
	"time"

	"fmt"

	"github.com/batchd/batchd/actors/schema"
	"github.com/batchd/batchd/engine/grpcapi"
	"github.com/batchd/batchd/engine/httpapi"
)

// addrDefault is loopback: a server someone starts to try batchd is not
// reachable from the network until they say so.
const addrDefault = "127.0.0.1:8080"

// parkAfterDefault parks a connection idle a second or two: a client
// between bursts, or one of an open-loop client's many, not one of a
// closed loop's (engine/fastlane's BenchmarkGCIdleConns: an idle
// connection's goroutine doubles what it costs each garbage collection).
const parkAfterDefault = time.Second

// parkAfterMin bounds how often the sweep that parks connections runs.
const parkAfterMin = 10 * time.Millisecond

// defaultHTTP takes the adapter's defaults from httpapi.DefaultConfig and
// the server's from httpapi's NewServer constants.
func defaultHTTP() HTTP {
	h := httpapi.DefaultConfig()
	return HTTP{
		Addr:              addrDefault,
		BodyMaxBytes:      h.BodyMaxBytes,
		InputMaxBytes:     h.InputMaxBytes,
		BatchItemsMax:     h.BatchItemsMax,
		ReplyGrace:        h.ReplyGrace,
		ReadHeaderTimeout: httpapi.ReadHeaderTimeout,
		BodyReadTimeout:   h.BodyReadTimeout,
		IdleTimeout:       httpapi.IdleTimeout,
		RetryAfterDefault: h.RetryAfterDefault,
		ModelLabelsMax:    h.ModelLabelsMax,
		ScrapeTimeout:     h.ScrapeTimeout,
		ShutdownTimeout:   shutdownTimeoutDefault,
		FastLane:          true,
		ParkAfter:         parkAfterDefault,
	}
}

// HTTPConfig returns the HTTP adapter's configuration: the limits, the
// model registry (the batcher's), the API keys, and the request timeout
// cap (the batcher's TimeoutMax). Ready, Signals and Logger are the
// caller's to set: they need the running engine. Call it on a validated
// File.
func (f *File) HTTPConfig() (httpapi.Config, error) {
	h := f.HTTP
	c := httpapi.DefaultConfig()
	c.BodyMaxBytes = h.BodyMaxBytes
	c.InputMaxBytes = h.InputMaxBytes
	c.BatchItemsMax = h.BatchItemsMax
	c.TimeoutMax = f.Policy.TimeoutMax
	c.ReplyGrace = h.ReplyGrace
	c.BodyReadTimeout = h.BodyReadTimeout
	c.RetryAfterDefault = h.RetryAfterDefault
	c.ModelLabelsMax = h.ModelLabelsMax
	c.ScrapeTimeout = h.ScrapeTimeout
	c.JobItemsMax = f.Jobs.ItemsMax
	c.JobBodyMaxBytes = f.Jobs.BodyMaxBytes
	c.BatchAsyncAbove = f.Jobs.BatchAsyncAbove
	c.Models = schema.ModelConfigs(f.Models)
	mkey, err := h.Metrics.key()
	if err != nil {
		return httpapi.Config{}, fmt.Errorf("config: %w: http.metrics.api_key: %w", ErrInvalid, err)
	}
	c.MetricsKey, c.MetricsOpen = mkey, h.Metrics.Open
	for i, t := range f.Tenants {
		key, err := t.key()
		if err != nil {
			return httpapi.Config{}, fmt.Errorf("config: %w: tenants[%d].api_key: %w", ErrInvalid, i, err)
		}
		c.APIKeys = append(c.APIKeys, httpapi.APIKey{Key: key, Tenant: t.Name, Models: append([]string(nil), t.Models...)})
	}
	if err := c.Validate(); err != nil {
		return httpapi.Config{}, fmt.Errorf("config: %w: %w", ErrInvalid, err)
	}
	return c, nil
}

// defaultGRPC takes its limits from grpcapi.DefaultConfig; no address:
// gRPC is off unless a file or --grpc-addr gives one.
func defaultGRPC() GRPC {
	g := grpcapi.DefaultConfig()
	return GRPC{MsgMaxBytes: g.MsgMaxBytes, StreamInFlightMax: g.StreamInFlightMax, ConnStreamsMax: g.ConnStreamsMax}
}

// GRPCConfig returns the gRPC server's configuration (Logger is the
// caller's to set). Call it on a validated File.
func (f *File) GRPCConfig() grpcapi.Config {
	c := grpcapi.DefaultConfig()
	c.MsgMaxBytes = f.GRPC.MsgMaxBytes
	c.StreamInFlightMax = f.GRPC.StreamInFlightMax
	c.ConnStreamsMax = f.GRPC.ConnStreamsMax
	return c
}
