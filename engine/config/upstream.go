package config

import (
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/batchd/batchd/engine/upstream"
)

// The values of devices.backend for model servers reached over HTTP.
const (
	// BackendUpstream: every device is a slot on an Open Inference
	// Protocol server (devices.upstream).
	BackendUpstream = "upstream"
	// BackendFanout: every device sends its batches as single calls to an
	// upstream that takes one input per call (devices.fanout).
	BackendFanout = "fanout"
)

// Upstream is the Open Inference Protocol server every device is a slot on
// when devices.backend is upstream (Triton, KServe, MLServer, another
// batchd): a batch is one infer call with a BYTES input of shape [n];
// devices.count is the batches in flight against it.
type Upstream struct {
	// URL is the server's base: http://host:port or https://host:port,
	// with an optional path prefix; the calls go to
	// {url}/v2/models/{model}[/versions/{version}]/infer, the batch's
	// model and version as batchd's registry names them.
	URL string `yaml:"url"`
	// Token is sent as a bearer token; TokenEnv names an environment
	// variable that holds it instead. At most one is set.
	Token    string `yaml:"token"`
	TokenEnv string `yaml:"token_env"`
	// CAFile, for https, is a PEM file of the authorities to trust in
	// place of the system's.
	CAFile string `yaml:"ca_file"`
	// Timeout bounds one batch's call; past it the batch is a device
	// fault and is re-queued. The engine's own bounds hold too, whichever
	// ends first: the device's watchdog (devices.watchdog_multiple times
	// the predicted latency, at least 250 ms) and engine.job_timeout_*.
	// So set devices.latency (or latency_model) to the upstream's round
	// trip for a batch: the batcher plans with it and the watchdog allows
	// it.
	Timeout time.Duration `yaml:"timeout"`
	// ReadyTimeout bounds the wait at start for the server's
	// /v2/health/ready: a server that is not ready by then stops batchd's
	// start.
	ReadyTimeout time.Duration `yaml:"ready_timeout"`
	// InputName and OutputName are the tensors' names.
	InputName  string `yaml:"input_name"`
	OutputName string `yaml:"output_name"`
	// BinaryData sends and asks for binary tensor data (Triton, batchd);
	// false speaks JSON (KServe, MLServer), which carries UTF-8 only.
	BinaryData bool `yaml:"binary_data"`
	// ResponseMaxBytes bounds one answer.
	ResponseMaxBytes int64 `yaml:"response_max_bytes"`
}

// Fanout is the single-input API every device sends its batches to, one
// call per input, when devices.backend is fanout.
type Fanout struct {
	// URL is where each input is POSTed: "{model}" and "{version}" in it
	// become the batch's (http://host:port/predict/{model}).
	URL string `yaml:"url"`
	// Body is the calls' form: raw (the input's bytes; the answer's body
	// is the output) or json ({"input": ...} answered {"output": ...}).
	Body string `yaml:"body"`
	// Token, TokenEnv and CAFile are as devices.upstream's.
	Token    string `yaml:"token"`
	TokenEnv string `yaml:"token_env"`
	CAFile   string `yaml:"ca_file"`
	// Concurrency bounds the calls in flight, over all devices.
	Concurrency int `yaml:"concurrency"`
	// Timeout bounds one call.
	Timeout time.Duration `yaml:"timeout"`
	// Attempts bounds the tries of one input; only 429, 503 and a refused
	// connection are tried again, after a jittered backoff from Backoff,
	// doubling, up to BackoffMax.
	Attempts   int           `yaml:"attempts"`
	Backoff    time.Duration `yaml:"backoff"`
	BackoffMax time.Duration `yaml:"backoff_max"`
	// ResponseMaxBytes bounds one answer.
	ResponseMaxBytes int64 `yaml:"response_max_bytes"`
}

func defaultUpstream() Upstream {
	c := upstream.DefaultOIPConfig()
	return Upstream{
		Timeout: c.Timeout, ReadyTimeout: c.ReadyTimeout,
		InputName: c.InputName, OutputName: c.OutputName,
		BinaryData: c.BinaryData, ResponseMaxBytes: c.ResponseMaxBytes,
	}
}

func defaultFanout() Fanout {
	c := upstream.DefaultFanoutConfig()
	return Fanout{
		Body: c.Body, Concurrency: c.Concurrency, Timeout: c.Timeout,
		Attempts: c.Attempts, Backoff: c.Backoff, BackoffMax: c.BackoffMax,
		ResponseMaxBytes: c.ResponseMaxBytes,
	}
}

// Bounds of the sections' values: past them a setting is a typo.
const (
	fanoutConcurrencyMax = 4096
	fanoutAttemptsMax    = 20
	responseMaxBytesMax  = 1 << 30
)

// checkUpstream validates devices.upstream and devices.fanout: the one
// devices.backend names fully, and the other not at all.
func (v *validator) checkUpstream() {
	d := v.f.Devices
	if d.Backend != BackendUpstream && d.Upstream.URL != "" {
		v.Bad("devices.upstream.url", "set, but devices.backend is %q: set devices.backend: upstream to use it", d.Backend)
	}
	if d.Backend != BackendFanout && d.Fanout.URL != "" {
		v.Bad("devices.fanout.url", "set, but devices.backend is %q: set devices.backend: fanout to use it", d.Backend)
	}
	switch d.Backend {
	case BackendUpstream:
		u := d.Upstream
		const p = "devices.upstream"
		v.checkURL(p+".url", u.URL, "http://127.0.0.1:8000")
		v.checkCreds(p, u.URL, u.Token, u.TokenEnv, u.CAFile)
		v.DurIn(p+".timeout", u.Timeout, time.Millisecond, time.Hour)
		v.DurIn(p+".ready_timeout", u.ReadyTimeout, time.Millisecond, time.Hour)
		for _, k := range []struct{ path, name string }{{p + ".input_name", u.InputName}, {p + ".output_name", u.OutputName}} {
			if k.name == "" || strings.ContainsAny(k.name, "\x00\"") {
				v.Bad(k.path, "%q: want a tensor's name", k.name)
			}
		}
		if u.ResponseMaxBytes < 1 || u.ResponseMaxBytes > responseMaxBytesMax {
			v.Bad(p+".response_max_bytes", "%d: want 1 to %d", u.ResponseMaxBytes, responseMaxBytesMax)
		}
	case BackendFanout:
		f := d.Fanout
		const p = "devices.fanout"
		v.checkURL(p+".url", strings.NewReplacer("{model}", "m", "{version}", "v").Replace(f.URL), "http://127.0.0.1:9000/predict/{model}")
		v.checkCreds(p, f.URL, f.Token, f.TokenEnv, f.CAFile)
		if f.Body != upstream.BodyRaw && f.Body != upstream.BodyJSON {
			v.Bad(p+".body", "%q: want raw or json", f.Body)
		}
		v.IntIn(p+".concurrency", f.Concurrency, 1, fanoutConcurrencyMax)
		v.DurIn(p+".timeout", f.Timeout, time.Millisecond, time.Hour)
		v.IntIn(p+".attempts", f.Attempts, 1, fanoutAttemptsMax)
		v.DurIn(p+".backoff", f.Backoff, time.Millisecond, time.Minute)
		v.DurIn(p+".backoff_max", f.BackoffMax, max(f.Backoff, time.Millisecond), time.Hour)
		if f.ResponseMaxBytes < 1 || f.ResponseMaxBytes > responseMaxBytesMax {
			v.Bad(p+".response_max_bytes", "%d: want 1 to %d", f.ResponseMaxBytes, responseMaxBytesMax)
		}
	}
}

// checkURL checks an upstream's address.
func (v *validator) checkURL(path, s, example string) {
	if s == "" {
		v.Bad(path, "missing: the upstream's address (%s)", example)
		return
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		v.Bad(path, "%q: %v", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		v.Bad(path, "%q: want http:// or https://", s)
	case u.Host == "":
		v.Bad(path, "%q: no host", s)
	case u.RawQuery != "" || u.Fragment != "":
		v.Bad(path, "%q: want no query or fragment", s)
	}
}

// checkCreds checks a section's token and CA file.
func (v *validator) checkCreds(p, rawURL, token, tokenEnv, caFile string) {
	switch {
	case token != "" && tokenEnv != "":
		v.Bad(p+".token", "set token or token_env, not both")
	case tokenEnv != "" && os.Getenv(tokenEnv) == "":
		v.Bad(p+".token_env", "$%s is empty or unset", tokenEnv)
	case strings.ContainsAny(token, "\r\n"):
		v.Bad(p+".token", "holds a line break")
	}
	if caFile == "" {
		return
	}
	if !strings.HasPrefix(rawURL, "https://") {
		v.Bad(p+".ca_file", "set, but the url is not https://")
	}
	if _, err := os.Stat(caFile); err != nil {
		v.Bad(p+".ca_file", "%q: %v", caFile, err)
	}
}

func token(t, env string) string {
	if env != "" {
		return os.Getenv(env)
	}
	return t
}

// UpstreamConfig is the upstream every device is a slot on (devices.backend
// upstream).
func (f *File) UpstreamConfig() upstream.OIPConfig {
	u := f.Devices.Upstream
	c := upstream.DefaultOIPConfig()
	c.URL, c.Token, c.CAFile = u.URL, token(u.Token, u.TokenEnv), u.CAFile
	c.Slots = f.Devices.Count
	c.ConnsMax = f.Devices.Count
	c.Timeout, c.ReadyTimeout = u.Timeout, u.ReadyTimeout
	c.InputName, c.OutputName = u.InputName, u.OutputName
	c.BinaryData = u.BinaryData
	c.BatchMax = f.Policy.BatchMax
	c.ResponseMaxBytes = u.ResponseMaxBytes
	return c
}

// FanoutConfig is the single-input upstream every device sends its
// batches to (devices.backend fanout).
func (f *File) FanoutConfig() upstream.FanoutConfig {
	u := f.Devices.Fanout
	c := upstream.DefaultFanoutConfig()
	c.URL, c.Token, c.CAFile = u.URL, token(u.Token, u.TokenEnv), u.CAFile
	c.Body = u.Body
	c.Concurrency, c.ConnsMax = u.Concurrency, u.Concurrency
	c.Timeout = u.Timeout
	c.Attempts, c.Backoff, c.BackoffMax = u.Attempts, u.Backoff, u.BackoffMax
	c.BatchMax = f.Policy.BatchMax
	c.ResponseMaxBytes = u.ResponseMaxBytes
	return c
}
