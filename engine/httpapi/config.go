package httpapi

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/httpapi/metrics"
)

// Config configures the HTTP adapter. Start from DefaultConfig: the zero
// value of a limit is not "unlimited" but invalid.
type Config struct {
	// Models is the model registry, the same list the batcher is given
	// (actors.BatcherConfig.Models). The handler uses it to refuse unknown
	// models and versions with 404 before they reach the engine, to apply
	// each model's InputLenMax, to pin one version per OIP request, and to
	// answer the OIP metadata endpoints. Empty (the default) accepts any
	// model name, as the batcher does without a registry.
	Models []actors.ModelConfig
	// APIKeys maps bearer tokens to tenants. Empty (the default) leaves the
	// API open: every request belongs to the one tenant "default". With
	// keys, a request without "Authorization: Bearer KEY" or with an
	// unknown key is refused with 401.
	APIKeys []APIKey
	// MetricsKey, when set, is the bearer token GET /metrics requires (a
	// scraper's own, not a tenant's). Without it, /metrics is open while
	// APIKeys is empty (an open API has nothing to hide) and refused (403)
	// once there are keys: its series name every tenant and model, which
	// a tenant restricted to some models must not learn from it.
	MetricsKey string
	// MetricsOpen serves /metrics without a key even with APIKeys: for a
	// server whose port only a trusted scraper can reach. Default false.
	MetricsOpen bool
	// BodyMaxBytes caps a request body; larger bodies are refused with 413
	// without being read further. Default 1 MiB: a full batch of 100
	// inputs of a few KiB each.
	BodyMaxBytes int64
	// InputMaxBytes caps one input, in bytes; a model's InputLenMax, when
	// smaller, caps its inputs instead. Default 64 KiB.
	InputMaxBytes int
	// BatchItemsMax caps the items of one /v1 batch request and the
	// elements of one OIP input tensor. Default 1,000.
	BatchItemsMax int
	// TimeoutMax caps a request's timeout_ms (larger values are lowered to
	// it, not refused). It should equal the batcher's TimeoutMax. Default
	// 60 s, the batcher's default.
	TimeoutMax time.Duration
	// ReplyGrace is how long past a request's deadline (its timeout, or
	// TimeoutMax when it set none) the front door may take to answer it
	// (see Handler): the handler sizes a response's write deadline with it. It
	// should equal the engine's ReplyGrace. Default 5 s.
	ReplyGrace time.Duration
	// BodyReadTimeout bounds reading a request body, so a client that
	// trickles its body cannot hold a connection and a goroutine. It is set
	// per request (http.ResponseController), not as the server's
	// ReadTimeout, which would also cut off a client that waits longer
	// than it for its reply. Default 10 s.
	BodyReadTimeout time.Duration
	// Jobs is the durable job store (a *jobs.Runner). With it, async
	// infers and async batches are durable jobs, kept across restarts,
	// with idempotency keys and DELETE to cancel; without it (nil, the
	// default, as in tests of the synchronous API) async requests are
	// refused with 400. batchd serve always sets it.
	Jobs JobStore
	// JobItemsMax caps the items of one durable batch (the store's own
	// ItemsMax should be at least this). Default 10,000.
	JobItemsMax int
	// JobBodyMaxBytes caps the body of a /v1 batch when Jobs is set, in
	// place of BodyMaxBytes when larger. Default 16 MiB: 10,000 inputs of
	// a KiB and a half.
	JobBodyMaxBytes int64
	// BatchAsyncAbove: with Jobs set, a /v1 batch of more items than this
	// (or than BatchItemsMax, if smaller) becomes a durable job even
	// without "async": a synchronous answer would wait too long. Default
	// 1,000.
	BatchAsyncAbove int
	// RetryAfterDefault is the Retry-After given with a 429 or 503 whose
	// cause carries no hint of its own (the engine's in-flight bound,
	// draining). Default 1 s.
	RetryAfterDefault time.Duration
	// ModelLabelsMax bounds the distinct model names used as metric labels
	// when there is no registry (any model name is served then, and each
	// would otherwise be a new series); the rest are counted as "other".
	// Default 64.
	ModelLabelsMax int
	// Ready reports whether a request for model can be served now (a
	// healthy device that can take it); model "" asks about the server as
	// a whole (some model can be). /v2/health/ready asks with "", and
	// /v2/models/{m}[/versions/{v}]/ready with m, once m is known to the
	// registry (an unknown model is 404 without asking); both answer 200
	// only while it returns true, and never after Shutdown. It is called
	// on the probe's goroutine, so it must be safe for concurrent use; ctx
	// bounds it (ScrapeTimeout). Nil: derived from Signals (DevicesHealthy
	// > 0, for any model) when that is set, else always ready.
	Ready func(ctx context.Context, model string) bool
	// Signals returns the batcher's load signals for /metrics (queue depth
	// and oldest wait per key, device busy fractions, the autoscaling
	// recommendation). It is called at scrape time, on the scraper's
	// goroutine, so it is responsible for its own synchronisation: it must
	// not read actor state from outside the actor, but ask the actor (a
	// message round trip, as engine.Engine.Stats does) and wait at most
	// until ctx ends. Nil: those gauges are not exported.
	Signals func(ctx context.Context) (actors.Signals, error)
	// Devices are the engine's device addresses in order
	// (engine.Engine.Devices): /metrics labels a device by its index
	// here, from 0, not by its actor address (the engine's start at 16).
	// A device not listed is labelled "addr-" and its address.
	Devices []actors.Address
	// Autoscale is the live autoscaling recommendation (an
	// autoscale.Recommender) that /metrics (batchd_autoscale_*) and
	// /v1/stats report. Nil: not reported.
	Autoscale metrics.Autoscale
	// ScrapeTimeout bounds one Signals call (and one Ready call). Default
	// 2 s.
	ScrapeTimeout time.Duration
	// Cluster, when set, answers GET /v1/cluster (behind the metrics key,
	// as /metrics is): the node's view of its cluster, as JSON. Nil: the
	// server is a single node, and the route says so (404).
	Cluster func() any
	// Collectors are more series for /metrics (the cluster's).
	Collectors []prometheus.Collector
	// Logger receives the adapter's own logs (backend failures, a
	// goroutine that had to be cut off). Nil discards them.
	Logger *slog.Logger
}

// APIKey is one bearer token and the tenant it authenticates.
type APIKey struct {
	// Key is the bearer token itself. Keys are compared by their SHA-256,
	// so the table holds no token in clear after New.
	Key string
	// Tenant is the tenant the key's requests are accounted to (the
	// batcher's fairness, rate limits and quotas are per tenant).
	Tenant string
	// Models, when not empty, restricts the key to these models; a request
	// for another is refused with 403.
	Models []string
}

// DefaultConfig returns the limits for the seeds' service: 1 MiB bodies,
// 64 KiB inputs, batches of up to 1,000 items, timeouts up to 60 s, durable
// batches of up to 10,000 items, an open API with one tenant.
func DefaultConfig() Config {
	return Config{
		BodyMaxBytes:      1 << 20,
		InputMaxBytes:     64 << 10,
		BatchItemsMax:     1_000,
		TimeoutMax:        60 * time.Second,
		ReplyGrace:        5 * time.Second,
		BodyReadTimeout:   10 * time.Second,
		JobItemsMax:       10_000,
		JobBodyMaxBytes:   16 << 20,
		BatchAsyncAbove:   1_000,
		RetryAfterDefault: time.Second,
		ModelLabelsMax:    64,
		ScrapeTimeout:     2 * time.Second,
	}
}

// DefaultTenant is the tenant of every request when no API keys are
// configured.
const DefaultTenant = "default"

// nameMaxBytes bounds model, version and tenant names taken from a request:
// they become batch keys and metric labels.
const nameMaxBytes = 256

// paramsMaxBytes bounds a request's canonical params: they are part of its
// batch key, held for as long as the request is queued.
const paramsMaxBytes = 4 << 10

// Validate reports the first setting that makes the configuration unusable.
func (c Config) Validate() error {
	switch {
	case c.BodyMaxBytes < 1:
		return fmt.Errorf("httpapi config: BodyMaxBytes %d: must be positive", c.BodyMaxBytes)
	case c.InputMaxBytes < 1:
		return fmt.Errorf("httpapi config: InputMaxBytes %d: must be positive", c.InputMaxBytes)
	case c.BatchItemsMax < 1:
		return fmt.Errorf("httpapi config: BatchItemsMax %d: must be positive", c.BatchItemsMax)
	case c.TimeoutMax <= 0 || c.ReplyGrace <= 0 || c.BodyReadTimeout <= 0 || c.ScrapeTimeout <= 0:
		return fmt.Errorf("httpapi config: TimeoutMax, ReplyGrace, BodyReadTimeout and ScrapeTimeout must be positive")
	case c.JobItemsMax < 1 || c.JobBodyMaxBytes < 1 || c.BatchAsyncAbove < 1:
		return fmt.Errorf("httpapi config: JobItemsMax %d, JobBodyMaxBytes %d, BatchAsyncAbove %d: must be positive", c.JobItemsMax, c.JobBodyMaxBytes, c.BatchAsyncAbove)
	case c.RetryAfterDefault <= 0:
		return fmt.Errorf("httpapi config: RetryAfterDefault %v: must be positive", c.RetryAfterDefault)
	case c.ModelLabelsMax < 1:
		return fmt.Errorf("httpapi config: ModelLabelsMax %d: must be positive", c.ModelLabelsMax)
	}
	keys := map[string]bool{}
	if c.MetricsKey != "" {
		if c.MetricsOpen {
			return fmt.Errorf("httpapi config: MetricsKey and MetricsOpen: set one")
		}
		keys[c.MetricsKey] = true // a tenant's key must not open /metrics too
	}
	for i, k := range c.APIKeys {
		switch {
		case k.Key == "" || keys[k.Key]:
			return fmt.Errorf("httpapi config: APIKeys[%d]: empty key, or repeated (MetricsKey included)", i)
		case k.Tenant == "" || len(k.Tenant) > nameMaxBytes || !utf8.ValidString(k.Tenant):
			return fmt.Errorf("httpapi config: APIKeys[%d]: tenant must be 1 to %d bytes of UTF-8", i, nameMaxBytes)
		}
		keys[k.Key] = true
	}
	models := map[string]bool{}
	for i, m := range c.Models {
		if m.Name == "" || models[m.Name] || len(m.Versions) == 0 {
			return fmt.Errorf("httpapi config: Models[%d]: empty or repeated name %q, or no versions", i, m.Name)
		}
		models[m.Name] = true
	}
	return nil
}
