package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
)

// notInScheme are the kinds of the examples that are no built-in
// Kubernetes API (custom resources, Helm values): the test names them so
// that a built-in kind it cannot check is an error, not a skip.
var notInScheme = map[string]bool{
	"keda.sh/v1alpha1/ScaledObject": true,
}

// manifest is one YAML document of an example.
type manifest struct {
	file string
	obj  map[string]any
}

// manifests reads every YAML document under the examples' folders.
func manifests(t *testing.T) []manifest {
	t.Helper()
	var out []manifest
	for _, dir := range []string{"kubernetes", "kubernetes-cluster"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no manifests in %s (%v)", dir, err)
		}
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
				if d == nil {
					continue
				}
				// As the API server reads it: JSON's types.
				b, err := json.Marshal(d)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				var j map[string]any
				if err := json.Unmarshal(b, &j); err != nil {
					t.Fatal(err)
				}
				out = append(out, manifest{file: p, obj: j})
			}
		}
	}
	return out
}

// TestManifestsMatchSchemas checks every Kubernetes object of the
// examples against its kind's schema as the API server would type it
// (client-go's embedded schemas, Kubernetes 1.34): an unknown field, a
// misplaced one or a value of the wrong type is an error. Documents with
// no apiVersion (Helm values) and the custom resources of notInScheme are
// skipped; any other kind the schemas do not know fails. It checks itself
// first: a StatefulSet with a misspelled field and one with a string for
// a number must fail.
func TestManifestsMatchSchemas(t *testing.T) {
	tc := applyconfigurations.NewTypeConverter(scheme.Scheme)
	check := func(obj map[string]any) error {
		_, err := tc.ObjectToTyped(&unstructured.Unstructured{Object: obj})
		return err
	}
	for _, bad := range []string{
		`{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"a"},"spec":{"serviceName":"a","replica":3}}`,
		`{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"a"},"spec":{"serviceName":"a","template":{"spec":{"terminationGracePeriodSeconds":"60"}}}}`,
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":7946,"protocol":"UDP","udp":true}]}}`,
	} {
		var obj map[string]any
		if err := json.Unmarshal([]byte(bad), &obj); err != nil {
			t.Fatal(err)
		}
		if check(obj) == nil {
			t.Fatalf("the schema check passed a bad object: %s", bad)
		}
	}

	kinds := map[string]int{}
	for _, m := range manifests(t) {
		api, _ := m.obj["apiVersion"].(string)
		kind, _ := m.obj["kind"].(string)
		if api == "" {
			continue // Helm values
		}
		name := api + "/" + kind
		if notInScheme[name] {
			continue
		}
		if err := check(m.obj); err != nil {
			t.Errorf("%s: %s %v: %v", m.file, kind, nameOf(m.obj), err)
			continue
		}
		kinds[name]++
	}
	for _, want := range []string{"apps/v1/StatefulSet", "apps/v1/Deployment", "v1/Service", "v1/ConfigMap", "policy/v1/PodDisruptionBudget", "autoscaling/v2/HorizontalPodAutoscaler"} {
		if kinds[want] == 0 {
			t.Errorf("no %s checked (checked %v)", want, kinds)
		}
	}
}

func nameOf(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	s, _ := md["name"].(string)
	return strings.TrimSpace(s)
}
