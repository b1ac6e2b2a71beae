package config

import (
	"fmt"
	"math"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Limits on values that would otherwise be accepted and then hurt: each
// says how large a sane setting can be, so a typo (an extra zero or three)
// is an error rather than a server that allocates for ever.
const (
	devicesCountMax  = 1 << 16
	batchMaxMax      = 1 << 16
	queueTotalMaxMax = 1 << 24
	inFlightMaxMax   = 1 << 24
	bodyMaxBytesMax  = 1 << 30
	attemptMaxMax    = 100
	bucketEdgesMax   = 64
	versionsMax      = 64
	timeoutMaxMax    = time.Hour
	shutdownMaxMax   = 10 * time.Minute
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
	f          *File
	modelNames map[string]bool
	errs       []located
}

// located is a mistake with the line it is on (0: a flag or a default),
// so mistakes are reported in file order.
type located struct {
	line int
	msg  string
}

func (v *validator) bad(path, format string, args ...any) {
	// A key the file leaves out (a model's versions) is named with where
	// its nearest enclosing key is.
	where := ""
	for p := path; where == "" && p != ""; p = parent(p) {
		where = v.f.src[p]
	}
	if where == "" {
		where = "(default)"
	}
	line := 0
	if i := strings.LastIndexByte(where, ':'); i >= 0 {
		line, _ = strconv.Atoi(where[i+1:])
	}
	v.errs = append(v.errs, located{line, fmt.Sprintf("%s: %s: %s", where, path, fmt.Sprintf(format, args...))})
}

// parent strips a path's last key or index: models[0].name → models[0]
// → models.
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func (v *validator) intIn(path string, x, lo, hi int) {
	if x < lo || x > hi {
		v.bad(path, "%d: want %d to %d", x, lo, hi)
	}
}

func (v *validator) durIn(path string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		v.bad(path, "%v: want %v to %v", d, lo, hi)
	}
}

func (v *validator) rate(path string, p float64) {
	if !(p >= 0 && p <= 1) { // also NaN
		v.bad(path, "%v: want a probability in [0, 1]", p)
	}
}

// Validate reports every mistake in the configuration, each with the path
// of its key and where the value came from (file and line, or the flag).
// The error wraps ErrInvalid.
func (f *File) Validate() error {
	v := &validator{f: f}
	v.http()
	v.engine()
	v.policy()
	v.devices()
	v.modelNames = v.models()
	v.warm(v.modelNames)
	v.tenants()
	v.limits("default_tenant", f.DefaultTenant)
	v.jobs()
	v.process()
	if len(v.errs) > 0 {
		sort.SliceStable(v.errs, func(i, j int) bool { return v.errs[i].line < v.errs[j].line })
		msgs := make([]string, len(v.errs))
		for i, e := range v.errs {
			msgs[i] = e.msg
		}
		return &Error{msg: strings.Join(msgs, "\n")}
	}
	// The owners' own checks are the backstop: whatever the schema lets
	// through that they refuse is still an error, naming their field.
	if _, err := f.engineConfig(nil); err != nil {
		return &Error{msg: err.Error()}
	}
	if _, err := f.HTTPConfig(); err != nil {
		return &Error{msg: err.Error()}
	}
	return nil
}

func (v *validator) http() {
	h := v.f.HTTP
	if _, port, err := net.SplitHostPort(h.Addr); err != nil {
		v.bad("http.addr", "%q: want host:port (127.0.0.1:8080, :8080): %v", h.Addr, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.bad("http.addr", "%q: port %q: want 0 to 65535", h.Addr, port)
	}
	if h.BodyMaxBytes < 1 || h.BodyMaxBytes > bodyMaxBytesMax {
		v.bad("http.body_max_bytes", "%d: want 1 to %d", h.BodyMaxBytes, bodyMaxBytesMax)
	}
	v.intIn("http.input_max_bytes", h.InputMaxBytes, 1, int(min(h.BodyMaxBytes, bodyMaxBytesMax)))
	v.intIn("http.batch_items_max", h.BatchItemsMax, 1, batchMaxMax)
	v.intIn("http.batch_concurrency_max", h.BatchConcurrencyMax, 1, batchMaxMax)
	v.durIn("http.reply_grace", h.ReplyGrace, time.Millisecond, time.Hour)
	v.durIn("http.read_header_timeout", h.ReadHeaderTimeout, time.Millisecond, time.Hour)
	v.durIn("http.body_read_timeout", h.BodyReadTimeout, time.Millisecond, time.Hour)
	v.durIn("http.idle_timeout", h.IdleTimeout, time.Millisecond, time.Hour)
	v.durIn("http.retry_after_default", h.RetryAfterDefault, time.Millisecond, time.Hour)
	v.intIn("http.model_labels_max", h.ModelLabelsMax, 1, 1<<16)
	v.durIn("http.scrape_timeout", h.ScrapeTimeout, time.Millisecond, time.Minute)
	v.durIn("http.shutdown_timeout", h.ShutdownTimeout, time.Millisecond, shutdownMaxMax)
}

func (v *validator) process() {
	p := v.f.Process
	v.intIn("process.gc_percent", p.GCPercent, gcPercentMin, gcPercentMax)
	if m := p.MemoryLimitBytes; m != 0 && (m < memoryLimitMin || m > memoryLimitMax) {
		v.bad("process.memory_limit_bytes", "%d: want 0 (no limit) or %d to %d", m, int64(memoryLimitMin), int64(memoryLimitMax))
	}
}

func (v *validator) engine() {
	e := v.f.Engine
	v.intIn("engine.in_flight_max", e.InFlightMax, 1, inFlightMaxMax)
	v.intIn("engine.job_timeout_multiple", e.JobTimeoutMultiple, 1, 1000)
	v.durIn("engine.job_timeout_min", e.JobTimeoutMin, time.Millisecond, time.Hour)
}

func (v *validator) policy() {
	p := v.f.Policy
	v.intIn("policy.batch_max", p.BatchMax, 1, batchMaxMax)
	v.intIn("policy.queue_total_max", p.QueueTotalMax, 1, queueTotalMaxMax)
	v.intIn("policy.queue_max", p.QueueMax, 1, max(p.QueueTotalMax, 1))
	v.intIn("policy.keys_max", p.KeysMax, 1, 1<<20)
	v.intIn("policy.tenant_keys_max", p.TenantKeysMax, 1, max(p.KeysMax, 1))
	v.intIn("policy.devices_max", p.DevicesMax, 1, devicesCountMax)
	v.intIn("policy.tenants_max", p.TenantsMax, 1, 1<<20)
	v.durIn("policy.timeout_max", p.TimeoutMax, time.Millisecond, timeoutMaxMax)
	v.durIn("policy.slo", p.SLO, time.Millisecond, max(p.TimeoutMax, time.Millisecond))
	v.durIn("policy.margin", p.Margin, 0, p.SLO)
	v.durIn("policy.overrun_max", p.OverrunMax, 0, p.SLO)
	v.durIn("policy.overrun_age", p.OverrunAge, time.Millisecond, time.Hour)
	v.intIn("policy.poison_memory_max", p.PoisonMemoryMax, 0, 1<<20)
	v.durIn("policy.poison_memory_age", p.PoisonMemoryAge, time.Second, 24*time.Hour)
	v.durIn("policy.linger_max", p.LingerMax, 0, p.SLO)
	v.intIn("policy.attempt_max", p.AttemptMax, 1, attemptMaxMax)
	if _, ok := keyPolicies[p.KeyPolicy]; !ok {
		v.bad("policy.key_policy", "%q: want fair or slack", p.KeyPolicy)
	}
	v.durIn("policy.priority_aging", p.PriorityAging, time.Millisecond, time.Hour)
	v.durIn("policy.signal_window", p.SignalWindow, time.Millisecond, time.Hour)
	if !(p.TargetUtilization > 0 && p.TargetUtilization <= 1) {
		v.bad("policy.target_utilization", "%v: want (0, 1]", p.TargetUtilization)
	}
	v.durIn("policy.no_device_retry_after", p.NoDeviceRetryAfter, 0, time.Hour)
}

func (v *validator) devices() {
	d := v.f.Devices
	switch d.Backend {
	case BackendEmulated, BackendCPU, BackendCUDA:
	default:
		v.bad("devices.backend", "%q: want emulated, cpu or cuda", d.Backend)
	}
	v.intIn("devices.count", d.Count, 1, min(v.f.Policy.DevicesMax, devicesCountMax))
	if d.LatencyModel == nil {
		v.durIn("devices.latency", d.Latency, time.Microsecond, time.Hour)
	} else {
		if v.f.Has("devices.latency") && v.f.Has("devices.latency_model") {
			v.bad("devices.latency_model", "set devices.latency or devices.latency_model, not both")
		}
		m := d.LatencyModel
		v.durIn("devices.latency_model.base", m.Base, 0, time.Hour)
		v.durIn("devices.latency_model.per_item", m.PerItem, 0, time.Minute)
		v.durIn("devices.latency_model.per_padded_byte", m.PerPaddedByte, 0, time.Second)
		for i, pt := range m.Table {
			p := fmt.Sprintf("devices.latency_model.table[%d]", i)
			if pt.BatchSize < 1 || (i > 0 && pt.BatchSize <= m.Table[i-1].BatchSize) {
				v.bad(p+".batch_size", "%d: want positive and increasing", pt.BatchSize)
			}
			v.durIn(p+".latency", pt.Latency, time.Microsecond, time.Hour)
		}
		if len(m.Table) == 0 && m.Base+m.PerItem <= 0 {
			v.bad("devices.latency_model", "a batch must cost more than zero: set base or per_item")
		}
	}
	v.intIn("devices.watchdog_multiple", d.WatchdogMultiple, 1, 1000)
	v.durIn("devices.restart_backoff", d.RestartBackoff, time.Millisecond, time.Hour)
	v.durIn("devices.restart_backoff_max", d.RestartBackoffMax, max(d.RestartBackoff, time.Millisecond), time.Hour)
	v.intIn("devices.quarantine_after", d.QuarantineAfter, 1, 1000)
	v.durIn("devices.quarantine_for", d.QuarantineFor, time.Millisecond, 24*time.Hour)
	fl := d.Faults
	v.rate("devices.faults.hang_rate", fl.HangRate)
	v.rate("devices.faults.crash_rate", fl.CrashRate)
	v.rate("devices.faults.batch_error_rate", fl.BatchErrorRate)
	v.rate("devices.faults.item_error_rate", fl.ItemErrorRate)
	if s := fl.HangRate + fl.CrashRate + fl.BatchErrorRate; s > 1 {
		v.bad("devices.faults", "hang_rate + crash_rate + batch_error_rate = %v: must not exceed 1", s)
	}
}

// models checks the registry and returns the set of model names.
func (v *validator) models() map[string]bool {
	names := map[string]bool{}
	switch {
	case v.f.OpenRegistry && len(v.f.Models) > 0:
		v.bad("open_registry", "true serves any model name: list no models with it (or set it false)")
	case !v.f.OpenRegistry && len(v.f.Models) == 0:
		v.bad("models", "empty: list the models to serve, or set open_registry: true to serve any model name")
	}
	for i, m := range v.f.Models {
		p := fmt.Sprintf("models[%d]", i)
		switch {
		case m.Name == "":
			v.bad(p+".name", "missing")
		case names[m.Name]:
			v.bad(p+".name", "%q: listed twice", m.Name)
		case strings.ContainsAny(m.Name, "/ \t\n?#%"):
			v.bad(p+".name", "%q: must not hold '/', '?', '#', '%%' or spaces (it is a URL path segment)", m.Name)
		}
		names[m.Name] = true
		if len(m.Versions) == 0 || len(m.Versions) > versionsMax {
			v.bad(p+".versions", "%d versions: want 1 to %d", len(m.Versions), versionsMax)
		}
		vnames, total := map[string]bool{}, 0
		for j, ver := range m.Versions {
			q := fmt.Sprintf("%s.versions[%d]", p, j)
			switch {
			case ver.Name == "":
				v.bad(q+".name", "missing")
			case vnames[ver.Name]:
				v.bad(q+".name", "%q: listed twice", ver.Name)
			case strings.ContainsAny(ver.Name, "/ \t\n?#%"):
				v.bad(q+".name", "%q: must not hold '/', '?', '#', '%%' or spaces (it is a URL path segment)", ver.Name)
			}
			vnames[ver.Name] = true
			v.intIn(q+".weight", ver.Weight, 0, 1_000_000)
			total += max(ver.Weight, 0)
		}
		if len(m.Versions) > 0 && total == 0 {
			v.bad(p+".versions", "no version has a weight above 0, so requests that name no version have nowhere to go")
		}
		v.intIn(p+".batch_max", m.BatchMax, 0, v.f.Policy.BatchMax)
		v.intIn(p+".input_len_max", m.InputLenMax, 0, v.f.HTTP.InputMaxBytes)
		v.durIn(p+".slo", m.SLO, 0, v.f.Policy.TimeoutMax)
		if len(m.BucketEdges) > bucketEdgesMax {
			v.bad(p+".bucket_edges", "%d edges: want at most %d", len(m.BucketEdges), bucketEdgesMax)
		}
		for j, e := range m.BucketEdges {
			if e < 1 || (j > 0 && e <= m.BucketEdges[j-1]) {
				v.bad(fmt.Sprintf("%s.bucket_edges[%d]", p, j), "%d: want positive and increasing", e)
			}
		}
	}
	return names
}

func (v *validator) warm(models map[string]bool) {
	for i, m := range v.f.Devices.WarmModels {
		if len(v.f.Models) > 0 && !models[m] {
			v.bad(fmt.Sprintf("devices.warm_models[%d]", i), "%q: not among models", m)
		}
	}
}

func (v *validator) tenants() {
	names, keys := map[string]bool{}, map[string]string{}
	for i, t := range v.f.Tenants {
		p := fmt.Sprintf("tenants[%d]", i)
		switch {
		case t.Name == "":
			v.bad(p+".name", "missing")
		case names[t.Name]:
			v.bad(p+".name", "%q: listed twice", t.Name)
		}
		names[t.Name] = true
		key, err := t.key()
		if err != nil {
			v.bad(p+".api_key", "%v", err)
		} else if other, dup := keys[key]; dup {
			v.bad(p+".api_key", "the same key as tenant %q", other)
		} else {
			keys[key] = t.Name
		}
		for j, m := range t.Models {
			if len(v.f.Models) > 0 && !v.modelNames[m] {
				v.bad(fmt.Sprintf("%s.models[%d]", p, j), "%q: not among models", m)
			}
		}
		v.limits(p, t.Limits)
	}
	m := v.f.HTTP.Metrics
	switch key, err := m.key(); {
	case err != nil:
		v.bad("http.metrics.api_key", "%v", err)
	case key != "" && m.Open:
		v.bad("http.metrics.open", "true needs no key: set it or http.metrics.api_key, not both")
	case key != "" && keys[key] != "":
		v.bad("http.metrics.api_key", "the same key as tenant %q: a tenant must not read every tenant's metrics", keys[key])
	}
	if len(v.f.Tenants) > v.f.Policy.TenantsMax {
		v.bad("tenants", "%d tenants: more than policy.tenants_max (%d)", len(v.f.Tenants), v.f.Policy.TenantsMax)
	}
}

// key returns the metrics key, from the file or its environment variable;
// "" when neither is set.
func (m Metrics) key() (string, error) {
	switch {
	case m.APIKey != "" && m.APIKeyEnv != "":
		return "", fmt.Errorf("set api_key or api_key_env, not both")
	case m.APIKeyEnv != "":
		k := os.Getenv(m.APIKeyEnv)
		if k == "" {
			return "", fmt.Errorf("api_key_env: $%s is empty or unset", m.APIKeyEnv)
		}
		return k, nil
	case m.APIKey != "" && len(m.APIKey) < 8:
		return "", fmt.Errorf("%d characters: want at least 8", len(m.APIKey))
	}
	return m.APIKey, nil
}

// key returns the tenant's API key, from the file or its environment
// variable.
func (t Tenant) key() (string, error) {
	switch {
	case t.APIKey != "" && t.APIKeyEnv != "":
		return "", fmt.Errorf("set api_key or api_key_env, not both")
	case t.APIKeyEnv != "":
		k := os.Getenv(t.APIKeyEnv)
		if k == "" {
			return "", fmt.Errorf("api_key_env: $%s is empty or unset", t.APIKeyEnv)
		}
		return k, nil
	case t.APIKey == "":
		return "", fmt.Errorf("missing: a tenant is known by its key (or set api_key_env)")
	case len(t.APIKey) < 8:
		return "", fmt.Errorf("%d characters: want at least 8", len(t.APIKey))
	}
	return t.APIKey, nil
}

func (v *validator) limits(p string, l Limits) {
	v.intIn(p+".weight", l.Weight, 1, 1_000_000)
	if !(l.Rate >= 0 && l.Rate <= math.MaxInt32) {
		v.bad(p+".rate", "%v: want 0 (no limit) or a positive rate per second", l.Rate)
	}
	v.intIn(p+".burst", l.Burst, 0, math.MaxInt32)
	if l.Rate > 0 && l.Burst < 1 {
		v.bad(p+".burst", "%d: a rate needs a burst of at least 1", l.Burst)
	}
	v.intIn(p+".in_flight_max", l.InFlightMax, 0, inFlightMaxMax)
}
