package config

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/batchd/batchd/actors/schema"
)

// Limits on the server's own values that would otherwise be accepted and
// then hurt: each says how large a sane setting can be, so a typo (an extra
// zero or three) is an error rather than a server that allocates for ever.
// The batcher's and the devices' are the schema's.
const (
	bodyMaxBytesMax = 1 << 30
	shutdownMaxMax  = 10 * time.Minute
	// A GOGC below gcPercentMin collects most of the time; above
	// gcPercentMax the heap is all garbage.
	gcPercentMin = 25
	gcPercentMax = 10000
	// A memory limit below memoryLimitMin would collect without pause; one
	// above memoryLimitMax (1 PiB) is a typo.
	memoryLimitMin = 64 << 20
	memoryLimitMax = 1 << 50
)

// validator collects mistakes with the path of the key each is about.
type validator struct {
	*schema.Validator
	f          *File
	modelNames map[string]bool
}

// Validate reports every mistake in the configuration, each with the path
// of its key and where the value came from (file and line, or the flag).
// The error wraps ErrInvalid.
func (f *File) Validate() error {
	v := &validator{Validator: &schema.Validator{Src: f.src, Default: "(default)"}, f: f}
	v.http()
	v.engine()
	f.Policy.Check(v.Validator, "policy")
	v.devices()
	v.modelNames = v.models()
	v.warm(v.modelNames)
	v.tenants()
	f.DefaultTenant.Check(v.Validator, "default_tenant")
	v.jobs()
	v.process()
	v.grpc()
	v.cluster()
	v.generation()
	if a := v.f.Autoscale; a != nil {
		a.Check(v.Validator, "autoscale", v.f.Devices.Count)
	}
	if err := v.Err(); err != nil {
		return err
	}
	// The owners' own checks are the backstop: whatever the schema lets
	// through that they refuse is still an error, naming their field.
	if _, err := f.engineConfig(nil); err != nil {
		return schema.Invalid("", err.Error())
	}
	if _, err := f.HTTPConfig(); err != nil {
		return schema.Invalid("", err.Error())
	}
	return nil
}

func (v *validator) http() {
	h := v.f.HTTP
	if _, port, err := net.SplitHostPort(h.Addr); err != nil {
		v.Bad("http.addr", "%q: want host:port (127.0.0.1:8080, :8080): %v", h.Addr, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.Bad("http.addr", "%q: port %q: want 0 to 65535", h.Addr, port)
	}
	if h.BodyMaxBytes < 1 || h.BodyMaxBytes > bodyMaxBytesMax {
		v.Bad("http.body_max_bytes", "%d: want 1 to %d", h.BodyMaxBytes, bodyMaxBytesMax)
	}
	v.IntIn("http.input_max_bytes", h.InputMaxBytes, 1, int(min(h.BodyMaxBytes, bodyMaxBytesMax)))
	v.IntIn("http.batch_items_max", h.BatchItemsMax, 1, schema.BatchMaxMax)
	v.DurIn("http.reply_grace", h.ReplyGrace, time.Millisecond, time.Hour)
	v.DurIn("http.read_header_timeout", h.ReadHeaderTimeout, time.Millisecond, time.Hour)
	v.DurIn("http.body_read_timeout", h.BodyReadTimeout, time.Millisecond, time.Hour)
	v.DurIn("http.idle_timeout", h.IdleTimeout, time.Millisecond, time.Hour)
	if h.ParkAfter != 0 && (h.ParkAfter < parkAfterMin || h.ParkAfter > time.Hour) {
		v.Bad("http.park_after", "%v: want 0 (never) or %v to 1h", h.ParkAfter, parkAfterMin)
	}
	v.DurIn("http.retry_after_default", h.RetryAfterDefault, time.Millisecond, time.Hour)
	v.IntIn("http.model_labels_max", h.ModelLabelsMax, 1, 1<<16)
	v.DurIn("http.scrape_timeout", h.ScrapeTimeout, time.Millisecond, time.Minute)
	v.DurIn("http.shutdown_timeout", h.ShutdownTimeout, time.Millisecond, shutdownMaxMax)
}

func (v *validator) grpc() {
	g := v.f.GRPC
	if g.Addr != "" {
		if _, port, err := net.SplitHostPort(g.Addr); err != nil {
			v.Bad("grpc.addr", "%q: want host:port (127.0.0.1:8081, :8081) or empty (no gRPC): %v", g.Addr, err)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			v.Bad("grpc.addr", "%q: port %q: want 0 to 65535", g.Addr, port)
		}
	}
	v.IntIn("grpc.msg_max_bytes", g.MsgMaxBytes, 1, int(bodyMaxBytesMax))
	v.IntIn("grpc.stream_in_flight_max", g.StreamInFlightMax, 1, streamInFlightMaxMax)
	v.IntIn("grpc.conn_streams_max", int(g.ConnStreamsMax), 1, connStreamsMaxMax)
}

// streamInFlightMaxMax and connStreamsMaxMax bound grpc's per-stream and
// per-connection settings: each request in flight holds a goroutine.
const (
	streamInFlightMaxMax = 1 << 16
	connStreamsMaxMax    = 1 << 16
)

func (v *validator) process() {
	p := v.f.Process
	v.IntIn("process.gc_percent", p.GCPercent, gcPercentMin, gcPercentMax)
	if m := p.MemoryLimitBytes; m != 0 && (m < memoryLimitMin || m > memoryLimitMax) {
		v.Bad("process.memory_limit_bytes", "%d: want 0 (no limit) or %d to %d", m, int64(memoryLimitMin), int64(memoryLimitMax))
	}
}

func (v *validator) engine() {
	e := v.f.Engine
	v.IntIn("engine.in_flight_max", e.InFlightMax, 1, schema.InFlightMaxMax)
	v.IntIn("engine.job_timeout_multiple", e.JobTimeoutMultiple, 1, 1000)
	v.DurIn("engine.job_timeout_min", e.JobTimeoutMin, time.Millisecond, time.Hour)
}

func (v *validator) devices() {
	d := v.f.Devices
	switch d.Backend {
	case BackendEmulated, BackendCPU, BackendCUDA, BackendWorker, BackendUpstream, BackendFanout:
	default:
		v.Bad("devices.backend", "%q: want emulated, cpu, cuda, worker, upstream or fanout", d.Backend)
	}
	v.checkWorker()
	v.checkUpstream()
	v.IntIn("devices.count", d.Count, 1, min(v.f.Policy.DevicesMax, schema.DevicesCountMax))
	schema.CheckLatencySpread(v.Validator, "devices.latency_spread", d.LatencySpread)
	if d.LatencyModel == nil {
		v.DurIn("devices.latency", d.Latency, time.Microsecond, time.Hour)
	} else {
		if v.f.Has("devices.latency") && v.f.Has("devices.latency_model") {
			v.Bad("devices.latency_model", "set devices.latency or devices.latency_model, not both")
		}
		d.LatencyModel.Check(v.Validator, "devices.latency_model")
	}
	d.Supervision.Check(v.Validator, "devices")
	d.Faults.Check(v.Validator, "devices.faults", d.Count, 0, schema.FleetIndex(d.Count))
}

// models checks the registry and returns the set of model names.
func (v *validator) models() map[string]bool {
	switch {
	case v.f.OpenRegistry && len(v.f.Models) > 0:
		v.Bad("open_registry", "true serves any model name: list no models with it (or set it false)")
	case !v.f.OpenRegistry && len(v.f.Models) == 0:
		v.Bad("models", "empty: list the models to serve, or set open_registry: true to serve any model name")
	}
	return schema.CheckModels(v.Validator, "models", v.f.Models, v.f.Policy, v.f.HTTP.InputMaxBytes)
}

func (v *validator) warm(models map[string]bool) {
	for i, m := range v.f.Devices.WarmModels {
		if len(v.f.Models) > 0 && !models[m] {
			v.Bad(fmt.Sprintf("devices.warm_models[%d]", i), "%q: not among models", m)
		}
	}
}

func (v *validator) tenants() {
	names, keys := map[string]bool{}, map[string]string{}
	for i, t := range v.f.Tenants {
		p := fmt.Sprintf("tenants[%d]", i)
		t.Tenant.Check(v.Validator, p, names)
		key, err := t.key()
		if err != nil {
			v.Bad(p+".api_key", "%v", err)
		} else if other, dup := keys[key]; dup {
			v.Bad(p+".api_key", "the same key as tenant %q", other)
		} else {
			keys[key] = t.Name
		}
		for j, m := range t.Models {
			// A key may be restricted to generation models too.
			gen := v.f.Generation.Enabled && slices.Contains(v.f.Generation.Models, m)
			if len(v.f.Models) > 0 && !v.modelNames[m] && !gen {
				v.Bad(fmt.Sprintf("%s.models[%d]", p, j), "%q: not among models or generation.models", m)
			}
		}
	}
	m := v.f.HTTP.Metrics
	switch key, err := m.key(); {
	case err != nil:
		v.Bad("http.metrics.api_key", "%v", err)
	case key != "" && m.Open:
		v.Bad("http.metrics.open", "true needs no key: set it or http.metrics.api_key, not both")
	case key != "" && keys[key] != "":
		v.Bad("http.metrics.api_key", "the same key as tenant %q: a tenant must not read every tenant's metrics", keys[key])
	}
	schema.CheckTenantCount(v.Validator, "tenants", len(v.f.Tenants), v.f.Policy)
}

// key returns the metrics key, from the file or its environment variable;
// "" when neither is set.
func (m Metrics) key() (string, error) { return apiKey(m.APIKey, m.APIKeyEnv) }

// key returns the tenant's API key, from the file or its environment
// variable.
func (t Tenant) key() (string, error) {
	if t.APIKey == "" && t.APIKeyEnv == "" {
		return "", fmt.Errorf("missing: a tenant is known by its key (or set api_key_env)")
	}
	return apiKey(t.APIKey, t.APIKeyEnv)
}

// apiKey is the bearer token key, or the one in the environment variable
// env instead; "" when neither is set.
func apiKey(key, env string) (string, error) {
	switch {
	case key != "" && env != "":
		return "", fmt.Errorf("set api_key or api_key_env, not both")
	case env != "":
		k := os.Getenv(env)
		if k == "" {
			return "", fmt.Errorf("api_key_env: $%s is empty or unset", env)
		}
		return k, nil
	case key != "" && len(key) < 8:
		return "", fmt.Errorf("%d characters: want at least 8", len(key))
	}
	return key, nil
}
