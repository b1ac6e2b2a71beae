package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/batchd/batchd/actors"
)

// Embedded is the default configuration file, the one `make run` and a
// `batchd serve` without --config use.
//
//go:embed default.yaml
var Embedded []byte

// EmbeddedName is how errors and logs name the embedded file.
const EmbeddedName = "(embedded default.yaml)"

// The values of devices.backend.
const (
	BackendEmulated = "emulated"
	BackendCPU      = "cpu"
	BackendCUDA     = "cuda"
)

// File is the schema of the configuration file. Its fields mirror the
// structs the server is built from, under snake_case keys; durations are
// written as Go durations ("100ms", "1m30s").
type File struct {
	HTTP    HTTP    `yaml:"http"`
	Engine  Engine  `yaml:"engine"`
	Devices Devices `yaml:"devices"`
	Policy  Policy  `yaml:"policy"`
	// Models is the registry: the models served, with their versions. A
	// file that leaves it out keeps the default registry (model "echo");
	// it may be empty only with OpenRegistry.
	Models []Model `yaml:"models"`
	// OpenRegistry serves any model name and takes a request's version as
	// given, with no registry: an explicit choice, since it lets clients
	// name models that exist nowhere (each one a batch key of its own).
	// With it, the file must list no models.
	OpenRegistry bool `yaml:"open_registry"`
	// Tenants are the API keys the server knows. With none, every request
	// is the open default tenant's.
	Tenants []Tenant `yaml:"tenants"`
	// DefaultTenant holds the share and limits of the open tenant and of
	// any tenant not listed.
	DefaultTenant Limits `yaml:"default_tenant"`
	// Jobs is the durable store of async and batch jobs.
	Jobs Jobs `yaml:"jobs"`
	// Process is the Go runtime's settings for the server's process.
	Process Process `yaml:"process"`

	// src says where each key's value came from ("file.yaml:12" or
	// "--devices"), by path; errors quote it.
	src map[string]string
}

// HTTP is the front door: httpapi.Config and the http.Server around it.
// Its timeouts on requests follow policy.timeout_max.
type HTTP struct {
	// Addr is the listen address. Default 127.0.0.1:8080, loopback only.
	Addr string `yaml:"addr"`
	// BodyMaxBytes bounds a request body; more is 413.
	BodyMaxBytes int64 `yaml:"body_max_bytes"`
	// InputMaxBytes bounds one input in bytes; more is 400.
	InputMaxBytes int `yaml:"input_max_bytes"`
	// BatchItemsMax bounds the items of one /v1 batch or /v2 tensor, and
	// BatchConcurrencyMax the engine calls one such request has at once.
	BatchItemsMax       int `yaml:"batch_items_max"`
	BatchConcurrencyMax int `yaml:"batch_concurrency_max"`
	// ReplyGrace is how long past a request's deadline the engine waits
	// for its actors' reply before it answers the request Expired (504)
	// itself: a bound on every wait, for a reply that was lost.
	ReplyGrace time.Duration `yaml:"reply_grace"`
	// ReadHeaderTimeout bounds reading a request's headers and
	// BodyReadTimeout its body, so a slow client cannot hold a connection.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	BodyReadTimeout   time.Duration `yaml:"body_read_timeout"`
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// RetryAfterDefault is the Retry-After of a 429 or 503 whose cause
	// gives no hint of its own.
	RetryAfterDefault time.Duration `yaml:"retry_after_default"`
	// ModelLabelsMax bounds the model names used as metric labels when no
	// registry is configured.
	ModelLabelsMax int `yaml:"model_labels_max"`
	// ScrapeTimeout bounds one /metrics or readiness look at the engine.
	ScrapeTimeout time.Duration `yaml:"scrape_timeout"`
	// ShutdownTimeout bounds the graceful shutdown on SIGTERM: the drain
	// of queued work and the answer to every request in flight.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Metrics says who may read GET /metrics.
	Metrics Metrics `yaml:"metrics"`
}

// Metrics says who may read GET /metrics, whose series name every tenant
// and every model served. With no tenants (an open API) anyone may; with
// tenants, only a scraper with the metrics key (APIKey or APIKeyEnv), or
// anyone if Open says so, and never a tenant by its own key.
type Metrics struct {
	// APIKey is the bearer token a scraper sends; APIKeyEnv names an
	// environment variable that holds it instead. At most one is set.
	APIKey    string `yaml:"api_key"`
	APIKeyEnv string `yaml:"api_key_env"`
	// Open serves /metrics without a key even with tenants: for a port
	// only a trusted scraper can reach.
	Open bool `yaml:"open"`
}

// Process is how the Go runtime manages the server's memory. GOGC and
// GOMEMLIMIT in the environment win over it, as they do for any Go
// program.
type Process struct {
	// GCPercent is Go's GOGC: a collection starts once the heap has grown
	// this many percent over what the last one left live. The server's
	// live heap is mostly its connections' buffers; at Go's default of 100
	// it collected every 0.8 s at 3x overload, and each collection's
	// mark phase (35-60 ms) delayed the answers that fell in it.
	GCPercent int `yaml:"gc_percent"`
	// MemoryLimitBytes is a soft limit on the runtime's memory
	// (GOMEMLIMIT): near it, collections run as often as needed whatever
	// GCPercent says. 0: no limit.
	MemoryLimitBytes int64 `yaml:"memory_limit_bytes"`
}

// Engine is engine.Config's own settings.
type Engine struct {
	// Seed seeds the actors' random streams and the emulated backends.
	Seed uint64 `yaml:"seed"`
	// InFlightMax bounds the requests in flight in the engine.
	InFlightMax int `yaml:"in_flight_max"`
	// JobTimeoutMultiple bounds every backend call at this multiple of its
	// predicted latency.
	JobTimeoutMultiple int `yaml:"job_timeout_multiple"`
	// JobTimeoutMin is the least bound of a backend call.
	JobTimeoutMin time.Duration `yaml:"job_timeout_min"`
}

// Devices describes the emulated GPUs: their number, cost, warm models,
// supervision and faults. The batcher plans with the same latency model the
// devices run with.
type Devices struct {
	// Backend is what runs the batches: "emulated" (the seeds'
	// batchstring, with the faults below), "cpu" or "cuda" (the bytenet
	// model of package cudabridge, in Go or on every visible GPU).
	// EngineConfig always builds emulated backends; batchd serve replaces
	// them for cpu and cuda.
	Backend string `yaml:"backend"`
	// Count is the number of devices.
	Count int `yaml:"count"`
	// Latency is a fixed time per batch of any size. LatencyModel, when
	// given, replaces it.
	Latency time.Duration `yaml:"latency"`
	// LatencyModel is a batch cost that depends on size and padding.
	LatencyModel *LatencyModel `yaml:"latency_model"`
	// WarmModels are the models the devices hold; empty means any.
	WarmModels []string `yaml:"warm_models"`
	// WatchdogMultiple: a batch still running after this multiple of its
	// predicted latency is declared hung.
	WatchdogMultiple int `yaml:"watchdog_multiple"`
	// RestartBackoff and RestartBackoffMax: the wait before a failed
	// device restarts, doubling per consecutive failure up to the max.
	RestartBackoff    time.Duration `yaml:"restart_backoff"`
	RestartBackoffMax time.Duration `yaml:"restart_backoff_max"`
	// QuarantineAfter consecutive failures take a device out of service
	// for QuarantineFor.
	QuarantineAfter int           `yaml:"quarantine_after"`
	QuarantineFor   time.Duration `yaml:"quarantine_for"`
	// Faults are injected by the emulated backends (demos and tests).
	Faults Faults `yaml:"faults"`
}

// LatencyModel is actors.LatencyModel: Base + PerItem·n +
// PerPaddedByte·n·longest, or a measured table instead of Base and PerItem.
type LatencyModel struct {
	Base          time.Duration  `yaml:"base"`
	PerItem       time.Duration  `yaml:"per_item"`
	PerPaddedByte time.Duration  `yaml:"per_padded_byte"`
	Table         []LatencyPoint `yaml:"table"`
}

// LatencyPoint is one measured batch latency.
type LatencyPoint struct {
	BatchSize int           `yaml:"batch_size"`
	Latency   time.Duration `yaml:"latency"`
}

// Faults are the emulated backend's fault knobs, probabilities in [0, 1].
// Hang, crash and batch error are exclusive outcomes of one batch, so their
// sum must not exceed 1.
type Faults struct {
	HangRate       float64 `yaml:"hang_rate"`
	CrashRate      float64 `yaml:"crash_rate"`
	BatchErrorRate float64 `yaml:"batch_error_rate"`
	ItemErrorRate  float64 `yaml:"item_error_rate"`
	// PoisonPrefix: a batch holding an input with this prefix fails whole,
	// every time. Empty: off.
	PoisonPrefix string `yaml:"poison_prefix"`
}

// Policy is the batcher's: batching, queues, deadlines and fairness.
type Policy struct {
	BatchMax      int `yaml:"batch_max"`
	QueueMax      int `yaml:"queue_max"`
	QueueTotalMax int `yaml:"queue_total_max"`
	KeysMax       int `yaml:"keys_max"`
	// TenantKeysMax bounds the keys one tenant holds requests in.
	TenantKeysMax int `yaml:"tenant_keys_max"`
	DevicesMax    int `yaml:"devices_max"`
	TenantsMax    int `yaml:"tenants_max"`
	// SLO is the latency target of a request without its own deadline.
	SLO time.Duration `yaml:"slo"`
	// TimeoutMax caps a request's own deadline.
	TimeoutMax time.Duration `yaml:"timeout_max"`
	// Margin is held back from every request's slack.
	Margin time.Duration `yaml:"margin"`
	// LearnOverrun adds to Margin what batches have lately run past
	// their predicted time (actors.BatcherConfig.LearnOverrun), capped
	// per batch at OverrunMax.
	LearnOverrun bool          `yaml:"learn_overrun"`
	OverrunMax   time.Duration `yaml:"overrun_max"`
	// OverrunAge forgets a batch's overrun this long after it.
	OverrunAge time.Duration `yaml:"overrun_age"`
	// PoisonMemoryMax and PoisonMemoryAge bound the poison inputs the
	// batcher remembers (actors.BatcherConfig.PoisonMemoryMax).
	PoisonMemoryMax int           `yaml:"poison_memory_max"`
	PoisonMemoryAge time.Duration `yaml:"poison_memory_age"`
	// LingerMax, when positive, caps the derived linger.
	LingerMax  time.Duration `yaml:"linger_max"`
	AttemptMax int           `yaml:"attempt_max"`
	// KeyPolicy is "fair" (weighted device time per tenant) or "slack"
	// (earliest deadline first).
	KeyPolicy     string        `yaml:"key_policy"`
	PriorityAging time.Duration `yaml:"priority_aging"`
	// BucketMerge lets a due batch with room take shorter length buckets.
	BucketMerge        bool          `yaml:"bucket_merge"`
	SignalWindow       time.Duration `yaml:"signal_window"`
	TargetUtilization  float64       `yaml:"target_utilization"`
	NoDeviceRetryAfter time.Duration `yaml:"no_device_retry_after"`
}

// Model is one model of the registry.
type Model struct {
	Name     string    `yaml:"name"`
	Versions []Version `yaml:"versions"`
	// BatchMax, InputLenMax and SLO, when positive, replace the policy's
	// for this model.
	BatchMax    int           `yaml:"batch_max"`
	InputLenMax int           `yaml:"input_len_max"`
	SLO         time.Duration `yaml:"slo"`
	// BucketEdges are increasing input lengths in bytes that split a
	// model's queue by input length.
	BucketEdges []int `yaml:"bucket_edges"`
}

// Version is one version of a model. Weight routes the requests that name
// no version; 0 serves only requests that pin it. Default 1.
type Version struct {
	Name   string `yaml:"name"`
	Weight int    `yaml:"weight"`
}

// Tenant is one API key and its tenant's share and limits.
type Tenant struct {
	Name string `yaml:"name"`
	// APIKey is the bearer token; APIKeyEnv names an environment variable
	// that holds it instead, so the file need not hold secrets. Exactly
	// one must be set.
	APIKey    string `yaml:"api_key"`
	APIKeyEnv string `yaml:"api_key_env"`
	// Models, when not empty, restricts the key to these models (403 for
	// others).
	Models []string `yaml:"models"`
	Limits `yaml:",inline"`
}

// Limits are a tenant's share and limits.
type Limits struct {
	// Weight is the share of device time against other backlogged
	// tenants. Default 1.
	Weight int `yaml:"weight"`
	// Rate (requests per second) and Burst form a token bucket; Rate 0 is
	// no limit.
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
	// InFlightMax caps the tenant's requests queued or running; 0 is none.
	InFlightMax int `yaml:"in_flight_max"`
}

// UnmarshalYAML fills a listed model's unset keys from defaultModel. The
// older callback form is used on purpose: it decodes with the caller's
// decoder, so unknown keys stay errors (the Node form would not).
func (m *Model) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Model
	p := plain(defaultModel())
	if err := unmarshal(&p); err != nil {
		return err
	}
	*m = Model(p)
	return nil
}

// UnmarshalYAML fills a listed version's unset keys from defaultVersion.
func (v *Version) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Version
	p := plain(defaultVersion())
	if err := unmarshal(&p); err != nil {
		return err
	}
	*v = Version(p)
	return nil
}

// UnmarshalYAML fills a listed tenant's unset keys from defaultTenant.
func (t *Tenant) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Tenant
	p := plain(defaultTenant())
	if err := unmarshal(&p); err != nil {
		return err
	}
	*t = Tenant(p)
	return nil
}

// ErrInvalid is wrapped by every error about the file's content (as
// opposed to reading it), so a caller can tell a bad file from a missing
// one.
var ErrInvalid = errors.New("invalid configuration")

// LoadFile reads and decodes the file at path over the defaults, and
// validates the result.
func LoadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Load(path, data)
}

// LoadEmbedded decodes and validates Embedded.
func LoadEmbedded() (*File, error) { return Load(EmbeddedName, Embedded) }

// Load decodes data (named name in errors) over Default and validates the
// result. Every key the data leaves out keeps its default; every key it
// holds must exist in the schema.
func Load(name string, data []byte) (*File, error) {
	f, err := Decode(name, data)
	if err != nil {
		return nil, err
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// Decode is Load without the validation, for a caller that changes the
// result (flags) before it validates.
func Decode(name string, data []byte) (*File, error) {
	f := Default()
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", name, ErrInvalid, err)
	}
	lines := map[string]int{}
	// An empty file, or one of only comments or "---", is all defaults.
	if len(root.Content) > 0 && root.Content[0].Tag != "!!null" {
		doc := root.Content[0]
		if doc.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s:%d: %w: the file must be a mapping of sections (http, devices, ...)", name, doc.Line, ErrInvalid)
		}
		if errs := checkKeys(doc, fileType, "", lines); len(errs) > 0 {
			return nil, fieldErrors(name, errs)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(f); err != nil {
			return nil, decodeError(name, err, lines)
		}
	}
	f.src = make(map[string]string, len(lines))
	for path, line := range lines {
		f.src[path] = fmt.Sprintf("%s:%d", name, line)
	}
	// An open registry drops the default one, unless the file lists
	// models of its own too (Validate refuses that).
	if f.OpenRegistry && !f.Has("models") {
		f.Models = nil
	}
	return f, nil
}

// SetBy records that the value at path was set by something other than the
// file (a flag, say), so errors about it name that instead.
func (f *File) SetBy(path, by string) {
	if f.src == nil {
		f.src = map[string]string{}
	}
	f.src[path] = by
}

// SetLatencyTable makes the devices' cost model the measured table m (a
// profile, actors.ParseLatencyTable) in place of devices.latency and any
// latency_model, set by by (a flag, say).
func (f *File) SetLatencyTable(m actors.LatencyModel, by string) {
	lm := &LatencyModel{Base: m.Base, PerItem: m.PerItem, PerPaddedByte: m.PerPaddedByte}
	for _, p := range m.Table {
		lm.Table = append(lm.Table, LatencyPoint{BatchSize: p.BatchSize, Latency: p.Latency})
	}
	f.Devices.LatencyModel = lm
	delete(f.src, "devices.latency")
	f.SetBy("devices.latency_model", by)
}

// Has reports whether the value at path was set by the file or SetBy.
func (f *File) Has(path string) bool {
	_, ok := f.src[path]
	return ok
}

// Marshal writes the configuration as YAML (every key, defaults included),
// for `batchd serve --print-config`.
// API keys are written as "(redacted)".
func (f *File) Marshal() ([]byte, error) {
	c := *f
	if c.HTTP.Metrics.APIKey != "" {
		c.HTTP.Metrics.APIKey = "(redacted)"
	}
	c.Tenants = append([]Tenant(nil), f.Tenants...)
	for i := range c.Tenants {
		if c.Tenants[i].APIKey != "" {
			c.Tenants[i].APIKey = "(redacted)"
		}
	}
	out, err := yaml.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	return out, nil
}
