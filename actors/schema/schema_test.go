package schema

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// file is a surface as a config or scenario embeds the schema.
type file struct {
	Name    string            `yaml:"name"`
	Policy  Policy            `yaml:"policy"`
	Models  []Model           `yaml:"models"`
	Tenants []tenant          `yaml:"tenants"`
	Shares  map[string]int    `yaml:"shares"`
	Devices devices           `yaml:"devices"`
	Extra   map[string]string `yaml:"extra"`
}

type tenant struct {
	Tenant   `yaml:",inline"`
	Priority string `yaml:"priority"`
}

type devices struct {
	Supervision `yaml:",inline"`
	Latency     LatencyModel `yaml:"latency"`
}

func decode(t *testing.T, text string) (*file, map[string]int, error) {
	t.Helper()
	f := &file{Policy: PolicyOf(actors.DefaultBatcherConfig())}
	lines, err := Decode("f.yaml", []byte(text), f)
	return f, lines, err
}

// TestDecodeStrict: unknown keys anywhere (inline fields, list items, map
// values) are errors naming line and path with a hint; every key's line is
// recorded; type errors name their key and how to write a duration.
func TestDecodeStrict(t *testing.T) {
	f, lines, err := decode(t, "name: x\npolicy:\n  slo: 300ms\nmodels:\n  - name: m\ntenants:\n  - {name: a, weight: 2, priority: high}\nshares: {a: 1}\ndevices: {watchdog_multiple: 4, latency: {base: 1ms}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if f.Policy.SLO != 300*time.Millisecond || f.Policy.BatchMax != actors.DefaultBatcherConfig().BatchMax {
		t.Errorf("policy %+v: want the file's SLO over the defaults", f.Policy)
	}
	if len(f.Models) != 1 || !reflect.DeepEqual(f.Models[0].Versions, []Version{{Name: "v1", Weight: 1}}) {
		t.Errorf("models %+v: want one version v1 by default", f.Models)
	}
	if f.Tenants[0].Weight != 2 || f.Tenants[0].Priority != "high" || f.Devices.WatchdogMultiple != 4 {
		t.Errorf("inline fields: %+v %+v", f.Tenants, f.Devices)
	}
	for p, l := range map[string]int{"policy.slo": 3, "models[0]": 5, "tenants[0].weight": 7, "shares.a": 8, "devices.latency.base": 9} {
		if lines[p] != l {
			t.Errorf("line of %s: %d, want %d", p, lines[p], l)
		}
	}
	for _, c := range []struct{ text, want string }{
		{"nme: x\n", `f.yaml:1: nme: unknown key (did you mean "name"?)`},
		{"tenants:\n  - {name: a, wieght: 2}\n", `f.yaml:2: tenants[0].wieght: unknown key (did you mean "weight"?)`},
		{"devices:\n  colour: red\n", "f.yaml:2: devices.colour: unknown key (known: latency, quarantine_after,"},
		{"policy:\n  slo: 100\n", "f.yaml:2: policy.slo: cannot unmarshal !!int `100` into a duration (write it with a unit"},
		{"shares: {a: lots}\n", "f.yaml:1: shares.a: cannot unmarshal !!str `lots` into int"},
		{"- a\n", "f.yaml:1: invalid configuration: the file must be a mapping of keys (devices, extra, models,"},
		{"a: 1\nb: 2\n", "f.yaml:1: a: unknown key (known: devices, extra, models, name, policy, shares, tenants)\nf.yaml:2: b: unknown key"},
	} {
		_, _, err := decode(t, c.text)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q wrapping ErrInvalid", c.text, err, c.want)
		}
	}
	for _, empty := range []string{"", "# nothing\n", "---\n"} {
		if f, _, err := decode(t, empty); err != nil || f.Policy != PolicyOf(actors.DefaultBatcherConfig()) {
			t.Errorf("%q: %v, %+v; want the defaults", empty, err, f)
		}
	}
}

// TestPolicyMapping: PolicyOf and Apply are inverse, so a policy read
// from a file reaches the batcher whole, and the defaults validate.
func TestPolicyMapping(t *testing.T) {
	p := PolicyOf(actors.DefaultBatcherConfig())
	p.BatchMax, p.KeyPolicy, p.LearnOverrun, p.PoisonMemoryAge = 7, "slack", true, time.Minute
	var b actors.BatcherConfig
	p.Apply(&b)
	if got := PolicyOf(b); got != p {
		t.Errorf("PolicyOf(Apply(p)) = %+v, want %+v", got, p)
	}
	v := &Validator{Default: "(default)"}
	PolicyOf(actors.DefaultBatcherConfig()).Check(v, "policy")
	SupervisionOf(actors.DefaultDeviceConfig()).Check(v, "devices")
	DefaultLimits().Check(v, "default_tenant")
	if err := v.Err(); err != nil {
		t.Errorf("the owners' defaults do not validate: %v", err)
	}
}

// TestValidator: mistakes come in line order, each where its value (or
// its nearest enclosing key) came from, else the default's name.
func TestValidator(t *testing.T) {
	v := &Validator{Src: map[string]string{"models[0]": "f.yaml:5", "policy.slo": "--slo", "policy.batch_max": "f.yaml:2"}, Default: "(default)"}
	p := PolicyOf(actors.DefaultBatcherConfig())
	p.SLO, p.BatchMax, p.AttemptMax, p.Margin, p.OverrunMax = 0, 0, 0, 0, 0
	p.Check(v, "policy")
	CheckModels(v, "models", []Model{{Name: "a/b", Versions: []Version{{Name: "v1"}}}}, p, 100)
	want := "--slo: policy.slo: 0s: want 1ms to 1m0s\n" +
		"(default): policy.attempt_max: 0: want 1 to 100\n" +
		"f.yaml:2: policy.batch_max: 0: want 1 to 65536\n" +
		"f.yaml:5: models[0].name: \"a/b\": must not hold '/', '?', '#', '%' or spaces (it is a URL path segment)\n" +
		"f.yaml:5: models[0].versions: no version has a weight above 0, so requests that name no version have nowhere to go"
	if err := v.Err(); err == nil || err.Error() != want {
		t.Errorf("errors:\n%v\nwant:\n%s", err, want)
	}
}

// TestKeys: every key of a schema type and those under it.
func TestKeys(t *testing.T) {
	keys := Keys(reflect.TypeOf(file{}))
	for _, k := range []string{"slo", "versions", "weight", "priority", "quarantine_for", "table", "batch_size"} {
		if !strings.Contains(" "+strings.Join(keys, " ")+" ", " "+k+" ") {
			t.Errorf("Keys leaves out %q: %v", k, keys)
		}
	}
}
