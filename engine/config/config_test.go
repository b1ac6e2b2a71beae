package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/schema"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/httpapi"
)

// TestEmbeddedDefault: the embedded file parses, validates, describes the
// seeds' setup, and otherwise says exactly what Default says (so its
// comments cannot drift from the owners' defaults).
func TestEmbeddedDefault(t *testing.T) {
	f, err := LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Models = []Model{{Name: "echo", Versions: []Version{{Name: "v1", Weight: 1}}}}
	want.Devices.WarmModels = []string{}
	want.Tenants = []Tenant{}
	want.Devices.Faults.Schedule = []schema.Fault{}
	want.src = f.src
	if !reflect.DeepEqual(f, want) {
		t.Errorf("embedded file differs from Default:\n got %+v\nwant %+v", f, want)
	}
	c, err := f.EngineConfig(func(engine.RuntimeOptions) (engine.Runtime, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	if c.Devices != 4 || c.Device.Latency.Base != 100*time.Millisecond ||
		c.Batcher.BatchMax != 100 || len(c.Batcher.Models) != 1 || c.Batcher.Models[0].Name != "echo" ||
		c.Batcher.Latency.Base != 100*time.Millisecond || f.HTTP.Addr != "127.0.0.1:8080" || len(f.Tenants) != 0 {
		t.Errorf("not the seeds' setup: %+v / %+v", c, f.HTTP)
	}
	if c.Backend == nil {
		t.Fatal("no backend factory")
	}
	if b, ok := c.Backend(0).(*engine.Emulated); !ok || b == nil {
		t.Errorf("device 0 backend %T, want *engine.Emulated", c.Backend(0))
	}
}

// TestEmbeddedDocumentsEveryKey: every key of the schema appears in the
// embedded file, set or in a comment, so the file is the reference.
func TestEmbeddedDocumentsEveryKey(t *testing.T) {
	text := string(Embedded)
	for _, k := range schema.Keys(reflect.TypeOf(File{})) {
		if !regexp.MustCompile(`(?m)^[ #\-]*`+regexp.QuoteMeta(k)+`:`).MatchString(text) &&
			!strings.Contains(text, "{"+k+":") && !strings.Contains(text, " "+k+":") {
			t.Errorf("key %q is not in default.yaml", k)
		}
	}
}

func TestEmptyFileIsDefault(t *testing.T) {
	for _, data := range []string{"", "# nothing\n", "---\n"} {
		f, err := Load("empty.yaml", []byte(data))
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		want := Default()
		want.src = f.src
		if !reflect.DeepEqual(f, want) {
			t.Errorf("%q: got %+v, want Default", data, f)
		}
	}
}

// TestFullFile maps every section onto the engine's structs.
func TestFullFile(t *testing.T) {
	t.Setenv("BOB_KEY", "bob-secret-key")
	f, err := Load("full.yaml", []byte(`
http: {addr: ":9090", input_max_bytes: 100}
engine: {seed: 9, in_flight_max: 500}
devices:
  count: 2
  latency_model: {base: 20ms, per_item: 1ms, table: [{batch_size: 1, latency: 20ms}, {batch_size: 50, latency: 80ms}]}
  warm_models: [resnet]
  faults: {crash_rate: 0.1, poison_prefix: "!!"}
policy: {batch_max: 50, slo: 300ms, key_policy: slack, bucket_merge: true}
models:
  - name: resnet
    versions: [{name: v1, weight: 95}, {name: v2, weight: 5}, {name: v3, weight: 0}, {name: v4}]
    bucket_edges: [16, 64]
    batch_max: 32
tenants:
  - {name: alice, api_key: alice-secret, weight: 3, rate: 100, burst: 10}
  - {name: bob, api_key_env: BOB_KEY, in_flight_max: 7, models: [resnet]}
default_tenant: {weight: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.EngineConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Batcher
	if c.Devices != 2 || c.Seed != 9 || c.InFlightMax != 500 || b.BatchMax != 50 || b.SLO != 300*time.Millisecond ||
		b.KeyPolicy != actors.PolicySlack || !b.BucketMerge || b.DefaultTenant.Weight != 2 {
		t.Errorf("engine config %+v", c)
	}
	wantLat := actors.LatencyModel{Base: 20 * time.Millisecond, PerItem: time.Millisecond,
		Table: []actors.LatencyPoint{{BatchSize: 1, Latency: 20 * time.Millisecond}, {BatchSize: 50, Latency: 80 * time.Millisecond}}}
	if !reflect.DeepEqual(b.Latency, wantLat) || !reflect.DeepEqual(c.Device.Latency, wantLat) {
		t.Errorf("latency %+v / %+v, want %+v", b.Latency, c.Device.Latency, wantLat)
	}
	wantModel := actors.ModelConfig{Name: "resnet", BatchMax: 32, BucketEdges: []int{16, 64},
		Versions: []actors.VersionConfig{{Name: "v1", Weight: 95}, {Name: "v2", Weight: 5}, {Name: "v3", Weight: 0}, {Name: "v4", Weight: 1}}}
	if len(b.Models) != 1 || !reflect.DeepEqual(b.Models[0], wantModel) {
		t.Errorf("models %+v, want %+v", b.Models, wantModel)
	}
	wantTenants := []actors.TenantConfig{{Name: "alice", Weight: 3, Rate: 100, Burst: 10}, {Name: "bob", Weight: 1, InflightMax: 7}}
	if !reflect.DeepEqual(b.Tenants, wantTenants) {
		t.Errorf("tenants %+v, want %+v", b.Tenants, wantTenants)
	}
	if !reflect.DeepEqual(c.Device.Models, []string{"resnet"}) {
		t.Errorf("warm models %v", c.Device.Models)
	}
	if k, err := f.Tenants[1].key(); err != nil || k != "bob-secret-key" {
		t.Errorf("bob's key %q, %v", k, err)
	}
	h, err := f.HTTPConfig()
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []httpapi.APIKey{{Key: "alice-secret", Tenant: "alice"}, {Key: "bob-secret-key", Tenant: "bob", Models: []string{"resnet"}}}
	if !reflect.DeepEqual(h.APIKeys, wantKeys) || h.InputMaxBytes != 100 || h.TimeoutMax != b.TimeoutMax ||
		!reflect.DeepEqual(h.Models, b.Models) {
		t.Errorf("http config %+v", h)
	}
	if f.HTTP.Addr != ":9090" || f.HTTP.InputMaxBytes != 100 || f.HTTP.BodyMaxBytes != Default().HTTP.BodyMaxBytes {
		t.Errorf("http %+v", f.HTTP)
	}
}

// TestErrors: each mistake names its key's path and line.
func TestErrors(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown section", "htp:\n  addr: x\n", []string{`bad.yaml:1: htp: unknown key (did you mean "http"?)`}},
		{"unknown nested key", "policy:\n  batchmax: 5\n", []string{`bad.yaml:2: policy.batchmax: unknown key (did you mean "batch_max"?)`}},
		{"unknown key, no near name", "devices:\n  colour: red\n", []string{`bad.yaml:2: devices.colour: unknown key (known: ask_ahead, backend, count,`}},
		{"unknown key in a list item", "models:\n  - name: m\n    verions: [{name: v1}]\n", []string{`bad.yaml:3: models[0].verions: unknown key (did you mean "versions"?)`}},
		{"unknown key in a tenant", "tenants:\n  - name: a\n    api_key: abcdefgh\n    wieght: 2\n", []string{`bad.yaml:4: tenants[0].wieght: unknown key (did you mean "weight"?)`}},
		{"unknown key deep", "devices:\n  faults:\n    crash: 0.1\n", []string{`bad.yaml:3: devices.faults.crash: unknown key`}},
		{"wrong type", "policy:\n  batch_max: many\n", []string{"bad.yaml:2: policy.batch_max: cannot unmarshal !!str `many` into int"}},
		{"duration without unit", "policy:\n  slo: 100\n", []string{"bad.yaml:2: policy.slo: cannot unmarshal !!int `100` into a duration (write it with a unit"}},
		{"bad duration", "devices:\n  latency: fast\n", []string{"bad.yaml:2: devices.latency: cannot unmarshal !!str `fast` into a duration"}},
		{"list for a map", "http: [1, 2]\n", []string{"bad.yaml:1: http: cannot unmarshal !!seq into config.HTTP"}},
		{"syntax", "policy: [\n", []string{"bad.yaml: invalid configuration: yaml: line"}},
		{"not a mapping", "- a\n- b\n", []string{"bad.yaml:1: invalid configuration: the file must be a mapping"}},
		{"zero devices", "devices:\n  count: 0\n", []string{"bad.yaml:2: devices.count: 0: want 1 to 1024"}},
		{"batch max", "policy:\n  batch_max: -1\n", []string{"bad.yaml:2: policy.batch_max: -1: want 1 to"}},
		{"queue over total", "policy:\n  queue_max: 20\n  queue_total_max: 10\n", []string{"bad.yaml:2: policy.queue_max: 20: want 1 to 10"}},
		{"slo over timeout", "policy:\n  slo: 2m\n", []string{"bad.yaml:2: policy.slo: 2m0s: want 1ms to 1m0s"}},
		{"key policy", "policy:\n  key_policy: round-robin\n", []string{`bad.yaml:2: policy.key_policy: "round-robin": want fair or slack`}},
		{"backend", "devices:\n  backend: tpu\n", []string{`bad.yaml:2: devices.backend: "tpu": want emulated, cpu, cuda, worker, upstream or fanout`}},
		{"worker without cmd", "devices:\n  backend: worker\n", []string{"bad.yaml:1: devices.worker.cmd: missing: the program each device runs"}},
		{"worker cmd unused", "devices:\n  worker:\n    cmd: [python3, model.py]\n", []string{`bad.yaml:3: devices.worker.cmd: set, but devices.backend is "emulated"`}},
		{"worker key typo", "devices:\n  worker:\n    cwd: [x]\n", []string{`bad.yaml:3: devices.worker.cwd: unknown key (did you mean "cmd"?)`}},
		{"worker dir missing", "devices:\n  backend: worker\n  worker:\n    cmd: [x]\n    dir: /nonexistent/models\n", []string{`bad.yaml:5: devices.worker.dir: "/nonexistent/models": not a directory here`}},
		{"worker env name", "devices:\n  backend: worker\n  worker:\n    cmd: [x]\n    env: {\"A=B\": c}\n", []string{`bad.yaml:5: devices.worker.env.A=B: "A=B": want a name without '='`}},
		{"worker frame too small", "devices:\n  backend: worker\n  worker:\n    cmd: [x]\n    frame_max_bytes: 5000\n", []string{"bad.yaml:5: devices.worker.frame_max_bytes: 5000: want 6555024 (a batch of policy.batch_max inputs of http.input_max_bytes)"}},
		{"worker start timeout", "devices:\n  backend: worker\n  worker:\n    cmd: [x]\n    start_timeout: 0s\n", []string{"bad.yaml:5: devices.worker.start_timeout: 0s: want 1ms to 1h0m0s"}},
		{"target utilization", "policy:\n  target_utilization: 1.5\n", []string{"bad.yaml:2: policy.target_utilization: 1.5: want (0, 1]"}},
		{"bad addr", "http:\n  addr: localhost\n", []string{`bad.yaml:2: http.addr: "localhost": want host:port`}},
		{"bad port", "http:\n  addr: \"127.0.0.1:99999\"\n", []string{`bad.yaml:2: http.addr: "127.0.0.1:99999": port "99999"`}},
		{"input over body", "http:\n  body_max_bytes: 100\n  input_max_bytes: 1000\n", []string{"bad.yaml:3: http.input_max_bytes: 1000: want 1 to 100"}},
		{"no versions", "models:\n  - name: m\n    versions: []\n", []string{"bad.yaml:3: models[0].versions: 0 versions: want 1 to 64"}},
		{"no model name", "models:\n  - versions: [{name: v1}]\n", []string{"bad.yaml:2: models[0].name: missing"}},
		{"model twice", "models:\n  - {name: m, versions: [{name: v1}]}\n  - {name: m, versions: [{name: v1}]}\n", []string{`bad.yaml:3: models[1].name: "m": listed twice`}},
		{"model name with slash", "models:\n  - {name: a/b, versions: [{name: v1}]}\n", []string{`models[0].name: "a/b": must not hold '/'`}},
		{"version twice", "models:\n  - name: m\n    versions: [{name: v1}, {name: v1}]\n", []string{`bad.yaml:3: models[0].versions[1].name: "v1": listed twice`}},
		{"no routable version", "models:\n  - name: m\n    versions: [{name: v1, weight: 0}]\n", []string{"bad.yaml:3: models[0].versions: no version has a weight above 0"}},
		{"negative weight", "models:\n  - name: m\n    versions: [{name: v1, weight: -1}]\n", []string{"bad.yaml:3: models[0].versions[0].weight: -1: want 0 to"}},
		{"buckets not increasing", "models:\n  - name: m\n    versions: [{name: v1}]\n    bucket_edges: [64, 16]\n", []string{"models[0].bucket_edges[1]: 16: want positive and increasing"}},
		{"model batch over policy", "models:\n  - name: m\n    versions: [{name: v1}]\n    batch_max: 500\n", []string{"bad.yaml:4: models[0].batch_max: 500: want 0 to 100"}},
		{"warm model unknown", "models: [{name: m, versions: [{name: v1}]}]\ndevices:\n  warm_models: [nope]\n", []string{`bad.yaml:3: devices.warm_models[0]: "nope": not among models`}},
		{"latency and model", "devices:\n  latency: 10ms\n  latency_model: {base: 5ms}\n", []string{"bad.yaml:3: devices.latency_model: set devices.latency or devices.latency_model, not both"}},
		{"latency model free", "devices:\n  latency_model: {per_padded_byte: 1us}\n", []string{"bad.yaml:2: devices.latency_model: a batch must cost more than zero"}},
		{"latency table", "devices:\n  latency_model:\n    table: [{batch_size: 10, latency: 5ms}, {batch_size: 5, latency: 9ms}]\n", []string{"devices.latency_model.table[1].batch_size: 5: want positive and increasing"}},
		{"fault rate", "devices:\n  faults:\n    crash_rate: 2\n", []string{"bad.yaml:3: devices.faults.crash_rate: 2: want a probability in [0, 1]"}},
		{"fault sum", "devices:\n  faults:\n    crash_rate: 0.6\n    hang_rate: 0.6\n", []string{"bad.yaml:2: devices.faults: hang_rate + crash_rate + batch_error_rate = 1.2"}},
		{"tenant without key", "tenants:\n  - name: a\n", []string{"bad.yaml:2: tenants[0].api_key: missing"}},
		{"tenant short key", "tenants:\n  - name: a\n    api_key: abc\n", []string{"bad.yaml:3: tenants[0].api_key: 3 characters: want at least 8"}},
		{"tenant key twice", "tenants:\n  - {name: a, api_key: abcdefgh}\n  - {name: b, api_key: abcdefgh}\n", []string{`bad.yaml:3: tenants[1].api_key: the same key as tenant "a"`}},
		{"tenant key env unset", "tenants:\n  - {name: a, api_key_env: BATCHD_TEST_UNSET_KEY}\n", []string{"tenants[0].api_key: api_key_env: $BATCHD_TEST_UNSET_KEY is empty or unset"}},
		{"tenant both keys", "tenants:\n  - {name: a, api_key: abcdefgh, api_key_env: X}\n", []string{"tenants[0].api_key: set api_key or api_key_env, not both"}},
		{"tenant twice", "tenants:\n  - {name: a, api_key: abcdefgh}\n  - {name: a, api_key: abcdefgi}\n", []string{`bad.yaml:3: tenants[1].name: "a": listed twice`}},
		{"rate without burst", "tenants:\n  - name: a\n    api_key: abcdefgh\n    rate: 10\n", []string{"tenants[0].burst: 0: a rate needs a burst of at least 1"}},
		{"tenant model unknown", "models: [{name: m, versions: [{name: v1}]}]\ntenants:\n  - {name: a, api_key: abcdefgh, models: [n]}\n", []string{`bad.yaml:3: tenants[0].models[0]: "n": not among models or generation.models`}},
		{"default tenant weight", "default_tenant:\n  weight: 0\n", []string{"bad.yaml:2: default_tenant.weight: 0: want 1 to"}},
		{"gc percent", "process:\n  gc_percent: 5\n", []string{"bad.yaml:2: process.gc_percent: 5: want 25 to 10000"}},
		{"memory limit", "process:\n  memory_limit_bytes: 1000\n", []string{"bad.yaml:2: process.memory_limit_bytes: 1000: want 0 (no limit) or 67108864 to"}},
		{"park after", "http:\n  park_after: 5ms\n", []string{"bad.yaml:2: http.park_after: 5ms: want 0 (never) or 10ms to 1h"}},
		{"upstream without url", "devices:\n  backend: upstream\n", []string{"bad.yaml:1: devices.upstream.url: missing: the upstream's address"}},
		{"upstream url scheme", "devices:\n  backend: upstream\n  upstream:\n    url: ftp://h:1\n", []string{`bad.yaml:4: devices.upstream.url: "ftp://h:1": want http:// or https://`}},
		{"upstream url, other backend", "devices:\n  upstream:\n    url: http://h:1\n", []string{`bad.yaml:3: devices.upstream.url: set, but devices.backend is "emulated"`}},
		{"upstream timeout", "devices:\n  backend: upstream\n  upstream:\n    url: http://h:1\n    timeout: 0s\n", []string{"bad.yaml:5: devices.upstream.timeout: 0s"}},
		{"upstream ca without https", "devices:\n  backend: upstream\n  upstream:\n    url: http://h:1\n    ca_file: /nonexistent.pem\n", []string{"bad.yaml:5: devices.upstream.ca_file: set, but the url is not https://", `devices.upstream.ca_file: "/nonexistent.pem": stat`}},
		{"upstream both tokens", "devices:\n  backend: upstream\n  upstream:\n    url: http://h:1\n    token: abc\n    token_env: X\n", []string{"bad.yaml:5: devices.upstream.token: set token or token_env, not both"}},
		{"upstream token env unset", "devices:\n  backend: upstream\n  upstream:\n    url: http://h:1\n    token_env: BATCHD_TEST_UNSET_KEY\n", []string{"bad.yaml:5: devices.upstream.token_env: $BATCHD_TEST_UNSET_KEY is empty or unset"}},
		{"upstream output name", "devices:\n  backend: upstream\n  upstream:\n    url: http://h:1\n    output_name: \"\"\n", []string{`bad.yaml:5: devices.upstream.output_name: "": want a tensor's name`}},
		{"upstream unknown key", "devices:\n  backend: upstream\n  upstream:\n    url: http://h:1\n    tiemout: 1s\n", []string{"bad.yaml:5: devices.upstream.tiemout: unknown key"}},
		{"fanout body", "devices:\n  backend: fanout\n  fanout:\n    url: http://h:1/p/{model}\n    body: xml\n", []string{`bad.yaml:5: devices.fanout.body: "xml": want raw or json`}},
		{"fanout attempts", "devices:\n  backend: fanout\n  fanout:\n    url: http://h:1/p\n    attempts: 0\n    concurrency: 0\n", []string{"bad.yaml:5: devices.fanout.attempts: 0: want 1 to 20", "bad.yaml:6: devices.fanout.concurrency: 0: want 1 to 4096"}},
		{"fanout backoff", "devices:\n  backend: fanout\n  fanout:\n    url: http://h:1/p\n    backoff: 1s\n    backoff_max: 100ms\n", []string{"bad.yaml:6: devices.fanout.backoff_max: 100ms"}},
		{"fanout url, other backend", "devices:\n  fanout:\n    url: http://h:1/p\n", []string{`bad.yaml:3: devices.fanout.url: set, but devices.backend is "emulated"`}},
		{"join without a node", "cluster:\n  join: [a:7946]\n", []string{"bad.yaml:2: cluster.join: needs cluster.node (--node)"}},
		{"node name", "cluster:\n  node: -a b\n", []string{`bad.yaml:2: cluster.node: "-a b": want 1 to 128 letters`}},
		{"cluster bind", "cluster:\n  node: a\n  bind: 7946\n", []string{`bad.yaml:3: cluster.bind: "7946": want host:port`}},
		{"probe timeout over interval", "cluster:\n  node: a\n  probe_interval: 100ms\n  probe_timeout: 1s\n", []string{"bad.yaml:4: cluster.probe_timeout: 1s: want 1ms to 100ms"}},
		{"gossip key unset", "cluster:\n  node: a\n  secret_key_env: BATCHD_TEST_UNSET_KEY\n", []string{"bad.yaml:3: cluster.secret_key_env: $BATCHD_TEST_UNSET_KEY is empty or unset"}},
		{"several at once", "devices:\n  count: 0\npolicy:\n  slo: 0s\n", []string{"bad.yaml:2: devices.count", "bad.yaml:4: policy.slo"}},
		{"several unknown at once", "a: 1\nb: 2\n", []string{"bad.yaml:1: a: unknown key", "bad.yaml:2: b: unknown key"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load("bad.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatalf("no error for:\n%s", c.yaml)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not say\n%s", err, w)
				}
			}
		})
	}
}

// TestSetBy: an error about a value a flag set names the flag.
func TestSetBy(t *testing.T) {
	f, err := Decode("x.yaml", []byte("devices:\n  count: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !f.Has("devices.count") || f.Has("devices.latency") {
		t.Errorf("Has: %v", f.src)
	}
	f.Devices.Count = 0
	f.SetBy("devices.count", "--devices")
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "--devices: devices.count: 0") {
		t.Errorf("error %v does not name the flag", err)
	}
}

func TestLoadFile(t *testing.T) {
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("missing file: %v", err)
	}
	p := filepath.Join(t.TempDir(), "ok.yaml")
	if err := os.WriteFile(p, []byte("devices: {count: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := LoadFile(p)
	if err != nil || f.Devices.Count != 2 || f.src["devices.count"] != p+":1" {
		t.Errorf("LoadFile: %+v, %v", f, err)
	}
}

// TestMarshalRoundTrip: --print-config output loads back to the same
// configuration, keys redacted.
func TestMarshalRoundTrip(t *testing.T) {
	f, err := LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	g, err := Load("printed.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	again, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Errorf("round trip:\n%s\nthen\n%s", out, again)
	}

	f, err = Load("k.yaml", []byte("tenants: [{name: a, api_key: very-secret-key}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err = f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "very-secret-key") || f.Tenants[0].APIKey != "very-secret-key" {
		t.Errorf("key not redacted in the copy only:\n%s", out)
	}
}

// TestRegistryChoice: a file that leaves models out keeps the default
// registry (an open one would serve any model name); an open registry is
// asked for with open_registry, and then no models may be listed.
func TestRegistryChoice(t *testing.T) {
	f, err := Load("r.yaml", []byte("devices: {count: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := f.HTTPConfig()
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Models) != 1 || h.Models[0].Name != "echo" || f.OpenRegistry {
		t.Errorf("a file without models: registry %+v, open %v; want echo only", h.Models, f.OpenRegistry)
	}
	f, err = Load("r.yaml", []byte("open_registry: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	h, err = f.HTTPConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.EngineConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Models) != 0 || len(c.Batcher.Models) != 0 {
		t.Errorf("open_registry: handler registry %+v, batcher %+v; want none", h.Models, c.Batcher.Models)
	}
	for _, c := range []struct{ yaml, want string }{
		{"open_registry: true\nmodels: [{name: m, versions: [{name: v1}]}]\n", "r.yaml:1: open_registry: true serves any model name"},
		{"models: []\n", "r.yaml:1: models: empty: list the models to serve, or set open_registry: true"},
	} {
		if _, err := Load("r.yaml", []byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
	// What --print-config writes of an open registry loads back as one.
	f, err = Load("r.yaml", []byte("open_registry: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if g, err := Load("printed.yaml", out); err != nil || !g.OpenRegistry || len(g.Models) != 0 {
		t.Errorf("printed open registry loads back as %+v, %v", g, err)
	}
}

// TestMetricsExposure: http.metrics reaches the handler, its key from the
// file or the environment, redacted when printed; a tenant's key, a key
// with open, or a short key are mistakes.
func TestMetricsExposure(t *testing.T) {
	t.Setenv("SCRAPE_KEY", "scraper-secret")
	f, err := Load("m.yaml", []byte("http: {metrics: {api_key_env: SCRAPE_KEY}}\ntenants: [{name: a, api_key: tenant-secret}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := f.HTTPConfig()
	if err != nil || h.MetricsKey != "scraper-secret" || h.MetricsOpen {
		t.Errorf("metrics key from the environment: %q open %v, %v", h.MetricsKey, h.MetricsOpen, err)
	}
	f, err = Load("m.yaml", []byte("http: {metrics: {api_key: scraper-secret}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := f.Marshal(); err != nil || strings.Contains(string(out), "scraper-secret") {
		t.Errorf("metrics key printed: %v\n%s", err, out)
	}
	if f, err = Load("m.yaml", []byte("http: {metrics: {open: true}}\n")); err != nil {
		t.Fatal(err)
	}
	if h, err := f.HTTPConfig(); err != nil || !h.MetricsOpen || h.MetricsKey != "" {
		t.Errorf("metrics open: %+v, %v", h, err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"http: {metrics: {api_key: same-secret}}\ntenants: [{name: a, api_key: same-secret}]\n", `http.metrics.api_key: the same key as tenant "a"`},
		{"http: {metrics: {api_key: scraper-secret, open: true}}\n", "http.metrics.open: true needs no key"},
		{"http: {metrics: {api_key: short}}\n", "http.metrics.api_key: 5 characters: want at least 8"},
		{"http: {metrics: {api_key_env: NO_SUCH_VAR_BATCHD}}\n", "http.metrics.api_key: api_key_env: $NO_SUCH_VAR_BATCHD is empty or unset"},
	} {
		if _, err := Load("m.yaml", []byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
}

// TestModelWithoutVersions: a model listed without versions serves one,
// v1, as in the simulator's scenarios (the schema's default).
func TestModelWithoutVersions(t *testing.T) {
	f, err := Load("m.yaml", []byte("models: [{name: m}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := f.BatcherConfig()
	want := []actors.VersionConfig{{Name: "v1", Weight: 1}}
	if len(b.Models) != 1 || !reflect.DeepEqual(b.Models[0].Versions, want) {
		t.Errorf("registry %+v, want m with %+v", b.Models, want)
	}
}

// TestServeRunsEveryFault: a serve config's faults are the simulator's
// (rates, healthy devices, faults at given times), and the emulated
// backends it builds run them.
func TestServeRunsEveryFault(t *testing.T) {
	f, err := Load("faults.yaml", []byte(`
devices:
  count: 2
  latency: 1ms
  faults:
    crash_rate: 1
    healthy_devices: 1
    schedule: [{at: 0s, kind: crash, device: 1}]
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.EngineConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	run := func(i int) error {
		_, _, err := c.Backend(i).Run(context.Background(), "echo", "v1", []string{"x"})
		return err
	}
	if err := run(0); !errors.Is(err, engine.ErrDeviceFault) {
		t.Errorf("device 0 at crash_rate 1: %v, want a device fault", err)
	}
	b1 := c.Backend(1)
	for i, want := range []bool{true, false} {
		_, _, err := b1.Run(context.Background(), "echo", "v1", []string{"x"})
		if got := errors.Is(err, engine.ErrDeviceFault); got != want {
			t.Errorf("healthy device 1, batch %d: %v; want a fault %v (the scheduled crash, once)", i, err, want)
		}
	}
	for _, bad := range []string{
		"devices: {count: 2, faults: {schedule: [{at: 0s, kind: crash, device: 2}]}}",
		"devices: {count: 2, faults: {schedule: [{at: 0s, kind: crash, node: a, device: 0}]}}",
		"devices: {faults: {schedule: [{at: 0s, kind: melt, device: 0}]}}",
		"devices: {faults: {slow_rate: 0.5, slow_factor: 0.5}}",
	} {
		if _, err := Load("bad.yaml", []byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestKeylessForTheSimulator: a file whose tenant key comes from an unset
// variable cannot be served, but can be simulated: the simulator
// authenticates nobody.
func TestKeylessForTheSimulator(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.yaml")
	data := "tenants:\n  - {name: alice, api_key_env: BATCHD_TEST_UNSET_KEY}\n  - {name: bob, api_key_env: BATCHD_TEST_UNSET_KEY_2}\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path); err == nil {
		t.Fatal("LoadFile: an unset key was accepted for serving")
	}
	f, err := LoadFileKeyless(path)
	if err != nil {
		t.Fatalf("LoadFileKeyless: %v", err)
	}
	if len(f.Tenants) != 2 || f.Tenants[0].Name != "alice" || f.Tenants[0].APIKey == f.Tenants[1].APIKey {
		t.Errorf("tenants %+v: want both, with distinct stand-in keys", f.Tenants)
	}
}

// TestUpstreamSections: a good devices.upstream and devices.fanout map onto
// the backends' configurations, tokens from the environment included, and
// --print-config hides the token.
func TestUpstreamSections(t *testing.T) {
	t.Setenv("BATCHD_TEST_UPSTREAM_TOKEN", "s3cret-from-env")
	f, err := Load("up.yaml", []byte("devices:\n  backend: upstream\n  count: 3\n  upstream:\n    url: http://127.0.0.1:8000/\n    token_env: BATCHD_TEST_UPSTREAM_TOKEN\n    timeout: 2s\n    input_name: in0\n    binary_data: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	u := f.UpstreamConfig()
	if u.URL != "http://127.0.0.1:8000/" || u.Token != "s3cret-from-env" || u.Slots != 3 || u.ConnsMax != 3 ||
		u.Timeout != 2*time.Second || u.InputName != "in0" || u.OutputName != "output" || u.BinaryData || u.BatchMax != f.Policy.BatchMax {
		t.Errorf("UpstreamConfig: %+v", u)
	}
	f, err = Load("fan.yaml", []byte("devices:\n  backend: fanout\n  fanout:\n    url: http://127.0.0.1:9000/predict/{model}\n    body: json\n    token: tok-in-file\n    concurrency: 8\n    attempts: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := f.FanoutConfig()
	if c.URL != "http://127.0.0.1:9000/predict/{model}" || c.Body != "json" || c.Token != "tok-in-file" || c.Concurrency != 8 || c.Attempts != 5 {
		t.Errorf("FanoutConfig: %+v", c)
	}
	out, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "tok-in-file") {
		t.Errorf("Marshal shows the fanout token:\n%s", out)
	}
}

// TestGossipKey: the gossip key is base64 of 16, 24 or 32 bytes; anything
// else is refused with what is wrong.
func TestGossipKey(t *testing.T) {
	f := Default()
	f.Cluster.SecretKeyEnv = "BATCHD_TEST_GOSSIP_KEY"
	for _, c := range []struct{ value, want string }{
		{"MDEyMzQ1Njc4OWFiY2RlZg==", ""}, // 16 bytes
		{"c2hvcnQ=", "holds 5 bytes"},
		{"not base64!", "not base64"},
	} {
		t.Setenv("BATCHD_TEST_GOSSIP_KEY", c.value)
		key, err := f.GossipKey()
		switch {
		case c.want == "" && (err != nil || len(key) != 16):
			t.Errorf("%q: key of %d bytes, err %v; want 16 bytes", c.value, len(key), err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: err %v, want %q", c.value, err, c.want)
		}
	}
}
