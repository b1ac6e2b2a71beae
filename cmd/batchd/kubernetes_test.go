package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/batchd/batchd/engine/config"
)

const kubernetesDir = "../../cluster/deploy/kubernetes"

// kubeDocs reads every YAML document of the Kubernetes example, by kind
// and name.
func kubeDocs(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubernetesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Kubernetes example in %s (%v)", kubernetesDir, err)
	}
	docs := map[string]map[string]any{}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var d map[string]any
			if err := dec.Decode(&d); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			kind, _ := d["kind"].(string)
			if kind == "" {
				kind = "values:" + filepath.Base(p) // the Helm values
			} else {
				kind += "/" + dig[string](t, d, "metadata", "name")
			}
			docs[kind] = d
		}
	}
	return docs
}

// dig walks d by keys (a map key, or an index for a list) to a T.
func dig[T any](t *testing.T, d any, path ...any) T {
	t.Helper()
	cur := d
	for _, k := range path {
		switch k := k.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a map at %q", path, k)
			}
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", path, k)
			}
			cur = l[k]
		}
	}
	v, ok := cur.(T)
	if !ok {
		t.Fatalf("%v: %T, not %T", path, cur, v)
	}
	return v
}

// TestKubernetesExample: the deploy example hangs together. Its batchd
// config loads as batchd serve would load it, with autoscale on and
// listening beyond loopback; the Deployment mounts it and probes batchd's
// health routes; the Service is headless; the HPA targets the external
// metric prometheus-adapter defines (a ratio, at 1); KEDA's threshold is
// a pod's devices. The series names are checked with the dashboard's
// (engine/httpapi/metrics TestOpsFilesNameRealSeries), and KEDA's query
// by promtool where it is installed.
func TestKubernetesExample(t *testing.T) {
	docs := kubeDocs(t)
	for _, want := range []string{"ConfigMap/batchd", "Deployment/batchd", "Service/batchd", "HorizontalPodAutoscaler/batchd", "ScaledObject/batchd", "values:prometheus-adapter.yaml"} {
		if docs[want] == nil {
			t.Fatalf("no %s in the example (have %v)", want, sortedKeys(docs))
		}
	}
	f, err := config.Load("batchd.yaml (ConfigMap)", []byte(dig[string](t, docs["ConfigMap/batchd"], "data", "batchd.yaml")))
	if err != nil {
		t.Fatalf("the ConfigMap's batchd.yaml: %v", err)
	}
	if f.Autoscale == nil || !strings.HasPrefix(f.HTTP.Addr, "0.0.0.0:") {
		t.Errorf("config: autoscale %v, addr %q: want autoscale on and every interface", f.Autoscale, f.HTTP.Addr)
	}

	c := dig[map[string]any](t, docs["Deployment/batchd"], "spec", "template", "spec", "containers", 0)
	args := dig[[]any](t, c, "args")
	if len(args) != 3 || args[0] != "serve" || args[2] != "/etc/batchd/batchd.yaml" {
		t.Errorf("container args %v", args)
	}
	if p := dig[string](t, c, "readinessProbe", "httpGet", "path"); p != "/v2/health/ready" {
		t.Errorf("readiness probe %q", p)
	}
	grace := dig[int](t, docs["Deployment/batchd"], "spec", "template", "spec", "terminationGracePeriodSeconds")
	if float64(grace) <= f.HTTP.ShutdownTimeout.Seconds() {
		t.Errorf("terminationGracePeriodSeconds %d within http.shutdown_timeout %v: the drain would be killed", grace, f.HTTP.ShutdownTimeout)
	}
	if ip := dig[string](t, docs["Service/batchd"], "spec", "clusterIP"); ip != "None" {
		t.Errorf("Service clusterIP %q, want None (headless)", ip)
	}

	m := dig[map[string]any](t, docs["HorizontalPodAutoscaler/batchd"], "spec", "metrics", 0)
	name := dig[string](t, m, "external", "metric", "name")
	rule := dig[map[string]any](t, docs["values:prometheus-adapter.yaml"], "rules", "external", 0)
	if as := dig[string](t, rule, "name", "as"); as != name {
		t.Errorf("the HPA targets %q, prometheus-adapter serves %q", name, as)
	}
	if q := dig[string](t, rule, "metricsQuery"); !strings.Contains(q, "batchd_autoscale_devices_recommended") || !strings.Contains(q, "/ sum(batchd_autoscale_devices_current") {
		t.Errorf("adapter query %q: want recommended over current", q)
	}
	if ty, v := dig[string](t, m, "external", "target", "type"), dig[string](t, m, "external", "target", "value"); ty != "Value" || v != "1" {
		t.Errorf("HPA target %s %s, want Value 1 (the ratio)", ty, v)
	}

	trig := dig[map[string]any](t, docs["ScaledObject/batchd"], "spec", "triggers", 0, "metadata")
	if th := dig[string](t, trig, "threshold"); th != "4" || f.Devices.Count != 4 {
		t.Errorf("KEDA threshold %s, devices.count %d: want them equal", th, f.Devices.Count)
	}
	query := dig[string](t, trig, "query")
	if !strings.Contains(query, "batchd_autoscale_devices_recommended") {
		t.Errorf("KEDA query %q", query)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		promtool = "../../bin/opstools/usr/bin/promtool" // install-promtool.sh's
		if _, err := os.Stat(promtool); err != nil {
			t.Log("no promtool (make test unpacks it): KEDA's query is not parsed")
			return
		}
	}
	rules := filepath.Join(t.TempDir(), "keda.yml")
	if err := os.WriteFile(rules, []byte("groups:\n  - name: keda\n    rules:\n      - record: keda:query\n        expr: '"+query+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Errorf("KEDA's query is not PromQL: %v\n%s", err, out)
	}
}
