package config

import (
	_ "embed"
	"fmt"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/schema"
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
	GRPC    GRPC    `yaml:"grpc"`
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
	// Cluster makes the server a node of a cluster; without a node name
	// it is a single node.
	Cluster Cluster `yaml:"cluster"`
	// Autoscale, when set, runs the autoscaling policy (the simulator's,
	// schema.Autoscale) live on the batcher's signals and exports its
	// recommendation (batchd_autoscale_devices_recommended) for a
	// HorizontalPodAutoscaler or KEDA to act on. Absent: no
	// recommendation beyond batchd_devices_needed.
	Autoscale *schema.Autoscale `yaml:"autoscale,omitempty"`
	// Generation serves text generation over the OpenAI-compatible API
	// on the same listener; off by default.
	Generation Generation `yaml:"generation"`

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
	// BatchItemsMax bounds the items of one /v1 batch or /v2 tensor.
	BatchItemsMax int `yaml:"batch_items_max"`
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
	// FastLane serves the infer routes' plainest requests on the lane's
	// own connection loop (engine/fastlane), every other request through
	// net/http. Default true; false: net/http serves all.
	FastLane bool `yaml:"fast_lane"`
	// ParkAfter: with the fast lane, a kept-alive connection that has
	// waited this long (up to twice as long) for its next request gives
	// up its goroutine and read buffer until its client sends again
	// (engine/fastlane's parker; Linux). 0: never.
	ParkAfter time.Duration `yaml:"park_after"`
	// Metrics says who may read GET /metrics.
	Metrics Metrics `yaml:"metrics"`
}

// GRPC is the Open Inference Protocol over gRPC (engine/grpcapi), on a
// port of its own, beside HTTP: the same API keys, registry, limits and
// metrics as the REST routes.
type GRPC struct {
	// Addr is the listen address; empty (the default) serves no gRPC.
	Addr string `yaml:"addr"`
	// MsgMaxBytes bounds a received message; more is ResourceExhausted.
	MsgMaxBytes int `yaml:"msg_max_bytes"`
	// StreamInFlightMax bounds the requests of one ModelStreamInfer
	// stream in the engine at once; past it the stream is not read.
	StreamInFlightMax int `yaml:"stream_in_flight_max"`
	// ConnStreamsMax bounds the concurrent calls of one connection.
	ConnStreamsMax uint32 `yaml:"conn_streams_max"`
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
	// model of package cudabridge, in Go or on every visible GPU), or
	// "worker" (a program of the operator's per device, Worker below),
	// "upstream" (an Open Inference Protocol server, Upstream below) or
	// "fanout" (a single-input API, Fanout below).
	// EngineConfig always builds emulated backends; batchd serve replaces
	// them for the others.
	Backend string `yaml:"backend"`
	// Count is the number of devices.
	Count int `yaml:"count"`
	// CUDAGraphs, with backend cuda, runs each batch's kernels as one
	// CUDA graph launch (cudabridge.DeviceConfig.Graphs); default true.
	// The other backends have no kernels and do not read it.
	CUDAGraphs bool `yaml:"cuda_graphs"`
	// CUDAWaitSleep, with backend cuda, starts each batch's wait for its
	// GPU with a sleep that keeps the device's processor, instead of
	// polling all of it (cudabridge.DeviceConfig.WaitSleep), and gives the
	// process one processor (GOMAXPROCS) more per GPU, unless GOMAXPROCS
	// is set, so that the core the poll kept busy serves requests. Linux;
	// default false.
	CUDAWaitSleep bool `yaml:"cuda_wait_sleep"`
	// AskAhead: a device takes its next batch while one runs, a full one
	// at once and a partial one from AskAhead before its batch's predicted
	// end, and starts it as soon as this one ends
	// (actors.DeviceConfig.AskAhead); 0, the default: once idle. Set to
	// the engine's hand-over between two batches (a few hundred
	// microseconds), for batches short enough that it is a good part of
	// the cycle.
	AskAhead time.Duration `yaml:"ask_ahead"`
	// Latency is a fixed time per batch of any size. LatencyModel, when
	// given, replaces it.
	Latency time.Duration `yaml:"latency"`
	// LatencyModel is a batch cost that depends on size and padding.
	LatencyModel *LatencyModel `yaml:"latency_model"`
	// WarmModels are the models the devices hold; empty means any.
	WarmModels []string `yaml:"warm_models"`
	// Supervision: watchdog, restart backoff, quarantine.
	schema.Supervision `yaml:",inline"`
	// LatencySpread is the σ of a log-normal factor of mean 1 on each
	// emulated batch's true cost: a backend whose latency varies while the
	// batcher plans with its mean, as a scenario's devices.latency_spread.
	// 0: the cost model exactly.
	LatencySpread float64 `yaml:"latency_spread"`
	// Faults are injected by the emulated backends (demos and tests).
	Faults Faults `yaml:"faults"`
	// Worker is the program each device runs its batches in, for backend
	// worker.
	Worker Worker `yaml:"worker"`
	// Upstream is the Open Inference Protocol server the devices are
	// slots on, for backend upstream.
	Upstream Upstream `yaml:"upstream"`
	// Fanout is the single-input API the devices send each input to, for
	// backend fanout.
	Fanout Fanout `yaml:"fanout"`
}

// The batcher's and the devices' settings are the schema's, shared with
// the simulator's scenarios (package actors/schema).
type (
	// Policy is the batcher's: batching, queues, deadlines and fairness.
	Policy = schema.Policy
	// Model is one model of the registry, Version one of its versions.
	Model   = schema.Model
	Version = schema.Version
	// Limits are a tenant's share and limits.
	Limits = schema.Limits
	// LatencyModel is actors.LatencyModel as written in the file, and
	// LatencyPoint one point of its table.
	LatencyModel = schema.LatencyModel
	LatencyPoint = schema.LatencyPoint
	// Faults are the emulated backend's faults: rates, slow batches, a heal
	// time and faults at given times, the simulator's own (schema.Faults).
	Faults = schema.Faults
)

// Tenant is one API key and its tenant's share and limits.
type Tenant struct {
	schema.Tenant `yaml:",inline"`
	// APIKey is the bearer token; APIKeyEnv names an environment variable
	// that holds it instead, so the file need not hold secrets. Exactly
	// one must be set.
	APIKey    string `yaml:"api_key"`
	APIKeyEnv string `yaml:"api_key_env"`
	// Models, when not empty, restricts the key to these models (403 for
	// others).
	Models []string `yaml:"models"`
}

// UnmarshalYAML fills a listed tenant's unset keys from defaultTenant. The
// older callback form is used on purpose: it decodes with the caller's
// decoder, so unknown keys stay errors (the Node form would not).
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
// one. It is the schema's, which scenarios share.
var ErrInvalid = schema.ErrInvalid

// Error is a configuration mistake (or several, one per line). It wraps
// ErrInvalid.
type Error = schema.Error

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

// LoadFileKeyless is LoadFile for a file that is simulated, not served: a
// key the file names an environment variable for (api_key_env) that is
// unset is not an error but a stand-in key of its own, since the
// simulator authenticates nobody. Every other check is Load's.
func LoadFileKeyless(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := Decode(path, data)
	if err != nil {
		return nil, err
	}
	for i := range f.Tenants {
		t := &f.Tenants[i]
		if t.APIKeyEnv != "" && os.Getenv(t.APIKeyEnv) == "" {
			t.APIKey, t.APIKeyEnv = fmt.Sprintf("unset $%s (tenant %d)", t.APIKeyEnv, i), ""
		}
	}
	if m := &f.HTTP.Metrics; m.APIKeyEnv != "" && os.Getenv(m.APIKeyEnv) == "" {
		m.APIKey, m.APIKeyEnv = "unset $"+m.APIKeyEnv+" (metrics)", ""
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
	lines, err := schema.Decode(name, data, f)
	if err != nil {
		return nil, err
	}
	f.src = schema.Sources(name, lines)
	f.backendCost()
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
	lm := schema.LatencyModelOf(m)
	f.Devices.LatencyModel = &lm
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
	if c.Devices.Upstream.Token != "" {
		c.Devices.Upstream.Token = "(redacted)"
	}
	if c.Devices.Fanout.Token != "" {
		c.Devices.Fanout.Token = "(redacted)"
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
