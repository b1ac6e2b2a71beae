package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
	"go.yaml.in/yaml/v3"
)

// engineCloseMax is the server's own bound on stopping the engine after
// the drain (engine/server closeEngineMax): a stop's budget must cover it.
const engineCloseMax = 10 * time.Second

// testGossipKey sets the variable env to a fresh gossip key for the test.
func testGossipKey(t *testing.T, env string) {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	t.Setenv(env, base64.StdEncoding.EncodeToString(key))
}

// yamlDocs reads every YAML document of file, by kind/name.
func yamlDocs(t *testing.T, file string) map[string]map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var d map[string]any
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		docs[dig[string](t, d, "kind")+"/"+dig[string](t, d, "metadata", "name")] = d
	}
	return docs
}

// portOf is the port of a host:port.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return n
}

// TestKubernetesClusterExample: the StatefulSet example
// (cluster/deploy/kubernetes-cluster) runs batchd serve with a config that
// loads as serve loads it (its args, its ConfigMap, the pod's name as the
// node, the gossip key from the env the pod gets from the Secret), as a
// node that batches across pods: it joins the headless service, which
// lists pods before they are ready, at the gossip port the pod exposes; its
// data plane's port is exposed too; the readiness probe is
// /v2/health/ready; the job store is on the pod's volume; and the grace
// period covers preStop's sleep, the hand-over and drain
// (http.shutdown_timeout), the leave (cluster.leave_timeout) and the
// engine's stop. The manifests' schemas are checked by cluster/deploy's
// test.
func TestKubernetesClusterExample(t *testing.T) {
	docs := yamlDocs(t, "../../cluster/deploy/kubernetes-cluster/batchd-cluster.yaml")
	for _, want := range []string{"ConfigMap/batchd-cluster", "StatefulSet/batchd", "Service/batchd-peers", "Service/batchd", "PodDisruptionBudget/batchd"} {
		if docs[want] == nil {
			t.Fatalf("no %s in the example (have %v)", want, sortedKeys(docs))
		}
	}
	sts := docs["StatefulSet/batchd"]
	pod := dig[map[string]any](t, sts, "spec", "template", "spec")
	c := dig[map[string]any](t, pod, "containers", 0)

	// The container's environment: the node's name from the pod's, the
	// gossip key from a Secret.
	env := map[string]map[string]any{}
	for _, e := range dig[[]any](t, c, "env") {
		m := e.(map[string]any)
		env[m["name"].(string)] = m
	}
	mounts := map[string]string{}
	for _, v := range dig[[]any](t, c, "volumeMounts") {
		m := v.(map[string]any)
		mounts[m["name"].(string)] = m["mountPath"].(string)
	}

	// The args as the pod runs them: $(POD_NAME) expanded, the
	// ConfigMap's file where the volume mounts it.
	var args []string
	cfgDir := t.TempDir()
	for i, a := range dig[[]any](t, c, "args") {
		s := a.(string)
		if i > 0 && dig[[]any](t, c, "args")[i-1] == "--config" {
			if path.Dir(s) != mounts["config"] {
				t.Errorf("--config %s: not in the config volume (mounted at %s)", s, mounts["config"])
			}
			data := dig[string](t, docs["ConfigMap/batchd-cluster"], "data", path.Base(s))
			s = filepath.Join(cfgDir, path.Base(s))
			if err := os.WriteFile(s, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if strings.Contains(s, "$(") {
			name := strings.TrimSuffix(strings.TrimPrefix(s, "$("), ")")
			if p := dig[string](t, env[name], "valueFrom", "fieldRef", "fieldPath"); p != "metadata.name" {
				t.Errorf("%s from %q, want the pod's name", name, p)
			}
			s = "batchd-0"
		}
		args = append(args, s)
	}
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %v: want serve ...", args)
	}
	// The file's secret_key_env, set as the Secret would set it.
	var head struct {
		Cluster struct {
			SecretKeyEnv string `yaml:"secret_key_env"`
		} `yaml:"cluster"`
	}
	if err := yaml.Unmarshal([]byte(dig[string](t, docs["ConfigMap/batchd-cluster"], "data", "batchd.yaml")), &head); err != nil {
		t.Fatal(err)
	}
	keyEnv := head.Cluster.SecretKeyEnv
	if keyEnv == "" || env[keyEnv] == nil {
		t.Fatalf("cluster.secret_key_env %q: not in the container's env", keyEnv)
	}
	secret := dig[string](t, env[keyEnv], "valueFrom", "secretKeyRef", "name")
	testGossipKey(t, keyEnv)

	opts, err := parseServe(args[1:], io.Discard)
	if err != nil {
		t.Fatalf("batchd %s: %v", strings.Join(args, " "), err)
	}
	cf := opts.file
	if !cf.Clustered() || cf.Cluster.Node != "batchd-0" || cf.Cluster.DataAddr == "" {
		t.Errorf("node %q, data_addr %q: want the pod's name and a data plane", cf.Cluster.Node, cf.Cluster.DataAddr)
	}
	if k, err := cf.GossipKey(); err != nil || len(k) == 0 {
		t.Errorf("gossip key from Secret %s: %v", secret, err)
	}
	if !strings.HasPrefix(cf.HTTP.Addr, "0.0.0.0:") {
		t.Errorf("http.addr %q: want every interface", cf.HTTP.Addr)
	}

	ports := map[string]int{} // "TCP/7946"
	for _, p := range dig[[]any](t, c, "ports") {
		m := p.(map[string]any)
		proto, _ := m["protocol"].(string)
		if proto == "" {
			proto = "TCP"
		}
		ports[proto+"/"+strconv.Itoa(m["containerPort"].(int))]++
	}
	gossip := portOf(t, cf.Cluster.Bind)
	for _, want := range []string{"TCP/" + strconv.Itoa(portOf(t, cf.HTTP.Addr)), "TCP/" + strconv.Itoa(gossip), "UDP/" + strconv.Itoa(gossip), "TCP/" + strconv.Itoa(portOf(t, cf.Cluster.DataAddr))} {
		if ports[want] == 0 {
			t.Errorf("the container does not expose %s (exposes %v)", want, ports)
		}
	}

	// It joins the peers' headless service, which lists unready pods.
	peers := dig[string](t, sts, "spec", "serviceName")
	svc := docs["Service/"+peers]
	if svc == nil {
		t.Fatalf("serviceName %q: no such Service", peers)
	}
	if dig[string](t, svc, "spec", "clusterIP") != "None" || !dig[bool](t, svc, "spec", "publishNotReadyAddresses") {
		t.Errorf("Service %s: want headless and publishNotReadyAddresses (a starting pod joins before it is ready)", peers)
	}
	svcPorts := map[string]bool{}
	for _, p := range dig[[]any](t, svc, "spec", "ports") {
		m := p.(map[string]any)
		svcPorts[m["protocol"].(string)+"/"+strconv.Itoa(m["port"].(int))] = true
	}
	if len(cf.Cluster.Join) != 1 {
		t.Fatalf("cluster.join %v: want the peers' service", cf.Cluster.Join)
	}
	host, port, err := net.SplitHostPort(cf.Cluster.Join[0])
	if err != nil || host != peers || port != strconv.Itoa(gossip) || !svcPorts["TCP/"+port] || !svcPorts["UDP/"+port] {
		t.Errorf("cluster.join %v: want %s:%d, TCP and UDP on the service (%v)", cf.Cluster.Join, peers, gossip, svcPorts)
	}

	if p := dig[string](t, c, "readinessProbe", "httpGet", "path"); p != "/v2/health/ready" {
		t.Errorf("readiness probe %q", p)
	}
	if mounts["state"] != cf.Jobs.Dir {
		t.Errorf("jobs.dir %q, the state volume at %q", cf.Jobs.Dir, mounts["state"])
	}
	preStop := time.Duration(dig[int](t, c, "lifecycle", "preStop", "sleep", "seconds")) * time.Second
	grace := time.Duration(dig[int](t, pod, "terminationGracePeriodSeconds")) * time.Second
	need := preStop + cf.HTTP.ShutdownTimeout + cf.Cluster.LeaveTimeout + engineCloseMax
	if grace <= need {
		t.Errorf("terminationGracePeriodSeconds %v: the stop may take %v (preStop %v, shutdown_timeout %v, leave_timeout %v, the engine's %v): it would be killed",
			grace, need, preStop, cf.HTTP.ShutdownTimeout, cf.Cluster.LeaveTimeout, engineCloseMax)
	}
	if cf.Cluster.HandoverGrace >= cf.HTTP.ShutdownTimeout {
		t.Errorf("handover_grace %v within shutdown_timeout %v leaves no time to drain", cf.Cluster.HandoverGrace, cf.HTTP.ShutdownTimeout)
	}
}

// TestSystemdExample: the systemd example (cluster/deploy/systemd) parses
// as a unit (go-systemd's parser) with the keys a node needs, and its
// ExecStart loads as serve loads it: batchd.yaml as the config, the host's
// name (%H) as the node, the gossip key from the variable the
// EnvironmentFile sets; the stop's timeout covers the hand-over, drain,
// leave and the engine's stop; the state directory is jobs.dir. Where
// systemd-analyze is installed, it verifies the unit too.
func TestSystemdExample(t *testing.T) {
	const dir = "../../cluster/deploy/systemd"
	raw, err := os.ReadFile(filepath.Join(dir, "batchd.service"))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := unit.DeserializeOptions(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("batchd.service: %v", err)
	}
	keys := map[string][]string{}
	for _, o := range opts {
		keys[o.Section+"."+o.Name] = append(keys[o.Section+"."+o.Name], o.Value)
	}
	one := func(k string) string {
		t.Helper()
		if len(keys[k]) != 1 {
			t.Fatalf("batchd.service: %s set %d times, want once", k, len(keys[k]))
		}
		return keys[k][0]
	}
	for _, k := range []string{"Service.PrivateDevices", "Service.KillMode"} {
		if keys[k] != nil {
			t.Errorf("%s=%v: PrivateDevices hides the GPUs; KillMode other than the default cuts the drain", k, keys[k])
		}
	}
	if s := one("Service.KillSignal"); s != "SIGTERM" {
		t.Errorf("KillSignal=%s: SIGTERM is the graceful stop", s)
	}
	if one("Install.WantedBy") == "" || !strings.Contains(one("Unit.After"), "network-online.target") {
		t.Error("want WantedBy= and After=network-online.target")
	}

	// ExecStart as systemd runs it: %H the host's name, the config and
	// the environment file where the example's install lines put them.
	argv := strings.Fields(one("Service.ExecStart"))
	if len(argv) < 2 || path.Base(argv[0]) != "batchd" || argv[1] != "serve" {
		t.Fatalf("ExecStart %v: want batchd serve ...", argv)
	}
	cfgDir := t.TempDir()
	confDir := "/etc/" + one("Service.ConfigurationDirectory")
	for i := range argv {
		switch {
		case argv[i] == "%H":
			argv[i] = "gpu-01"
		case i > 0 && argv[i-1] == "--config":
			if path.Dir(argv[i]) != confDir {
				t.Errorf("--config %s: not in ConfigurationDirectory (%s)", argv[i], confDir)
			}
			data, err := os.ReadFile(filepath.Join(dir, path.Base(argv[i])))
			if err != nil {
				t.Fatalf("--config %s: no %s beside the unit: %v", argv[i], path.Base(argv[i]), err)
			}
			argv[i] = filepath.Join(cfgDir, path.Base(argv[i]))
			if err := os.WriteFile(argv[i], data, 0o600); err != nil {
				t.Fatal(err)
			}
		case strings.Contains(argv[i], "%") || strings.Contains(argv[i], "$"):
			t.Errorf("ExecStart argument %q: a specifier or variable the test does not expand", argv[i])
		}
	}
	envFile := one("Service.EnvironmentFile")
	if path.Dir(envFile) != confDir {
		t.Errorf("EnvironmentFile %s: not in ConfigurationDirectory (%s)", envFile, confDir)
	}
	ef, err := os.Open(filepath.Join(dir, path.Base(envFile)))
	if err != nil {
		t.Fatalf("EnvironmentFile %s: none beside the unit: %v", envFile, err)
	}
	defer ef.Close()
	envs := map[string]bool{}
	sc := bufio.NewScanner(ef)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			k, _, ok := strings.Cut(l, "=")
			if !ok {
				t.Errorf("%s: %q is not KEY=VALUE", envFile, l)
			}
			envs[k] = true
			testGossipKey(t, k) // the operator puts a real key there
		}
	}

	so, err := parseServe(argv[2:], io.Discard)
	if err != nil {
		t.Fatalf("batchd %s: %v", strings.Join(argv[1:], " "), err)
	}
	cf := so.file
	if cf.Cluster.Node != "gpu-01" || len(cf.Cluster.Join) == 0 || cf.Cluster.DataAddr == "" {
		t.Errorf("node %q, join %v, data_addr %q: want the host's name, members to join and a data plane", cf.Cluster.Node, cf.Cluster.Join, cf.Cluster.DataAddr)
	}
	if !envs[cf.Cluster.SecretKeyEnv] {
		t.Errorf("cluster.secret_key_env %q: not set by %s (sets %v)", cf.Cluster.SecretKeyEnv, envFile, sortedKeys(envs))
	}
	if want := "/var/lib/" + one("Service.StateDirectory"); cf.Jobs.Dir != want {
		t.Errorf("jobs.dir %q, StateDirectory at %s", cf.Jobs.Dir, want)
	}
	stopSec, err := strconv.Atoi(one("Service.TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec: want seconds: %v", err)
	}
	need := cf.HTTP.ShutdownTimeout + cf.Cluster.LeaveTimeout + engineCloseMax
	if time.Duration(stopSec)*time.Second <= need {
		t.Errorf("TimeoutStopSec=%d: the stop may take %v (shutdown_timeout %v, leave_timeout %v, the engine's %v): it would be killed",
			stopSec, need, cf.HTTP.ShutdownTimeout, cf.Cluster.LeaveTimeout, engineCloseMax)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze (Debian's systemd): the unit is parsed, not verified")
		return
	}
	// systemd-analyze verify checks the unit's directives and that
	// ExecStart's binary exists: the test's own binary stands in.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	udir := t.TempDir()
	u := strings.Replace(string(raw), "ExecStart="+argv[0], "ExecStart="+self, 1)
	if err := os.WriteFile(filepath.Join(udir, "batchd.service"), []byte(u), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", filepath.Join(udir, "batchd.service")).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
