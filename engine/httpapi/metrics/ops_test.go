package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/jobs"
)

// The operator's files over these series: the Grafana dashboard, the alert
// rules and their promtool tests, and the Kubernetes example's queries.
const (
	dashboardFile  = "grafana/batchd.json"
	alertsFile     = "alerts.yml"
	alertsTestFile = "alerts_test.yml"
	kubernetesDir  = "../../../cluster/deploy/kubernetes"
)

type fixedJobs struct{}

func (fixedJobs) Stats() jobs.Stats { return jobs.Stats{} }

type fixedScale struct{}

func (fixedScale) DevicesRecommended() int      { return 2 }
func (fixedScale) DevicesCurrent() int          { return 1 }
func (fixedScale) Decisions() (up, down uint64) { return 1, 0 }

// seriesNames is every series name the registry can serve: each family
// with every optional part configured and each vector given a series, and
// a histogram's _bucket, _sum and _count.
func seriesNames(t *testing.T) map[string]bool {
	t.Helper()
	m := New(Config{
		ModelLabelsMax: 4,
		Signals: func(context.Context) (actors.Signals, error) {
			return actors.Signals{
				Keys:    []actors.KeySignal{{Key: actors.Key{Model: "m"}, Depth: 1}},
				Devices: []actors.DeviceSignal{{Device: actors.Address{ID: 1}, Healthy: true}},
			}, nil
		},
		ScrapeTimeout: time.Second,
		Jobs:          fixedJobs{},
		Autoscale:     fixedScale{},
	})
	m.Observe("m", "t", "completed", ReasonNone, actors.Reply{Outcome: actors.Completed, BatchSize: 1, Arrival: 1, Dispatch: 2, Done: 3}, time.Millisecond)
	m.Response("/metrics", 200)
	m.GRPCResponse("ModelInfer", "OK")
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+s] = true
			}
		}
	}
	return names
}

// seriesRE finds batchd's series names in a query (recording rules'
// names, batchd:..., are not series of the registry).
var seriesRE = regexp.MustCompile(`\bbatchd_[a-zA-Z0-9_]+`)

// dashboard is the part of Grafana's model the checks read.
type dashboard struct {
	UID        string
	Templating struct {
		List []struct {
			Name, Type string
			Definition string
		}
	}
	Panels []struct {
		ID         int
		Type       string
		Title      string
		Datasource *struct{ Type, UID string }
		GridPos    *struct{ X, Y, W, H int }
		Targets    []struct {
			RefID string `json:"refId"`
			Expr  string
		}
	}
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// dashboardExprs are the dashboard's queries, by panel title.
func dashboardExprs(d dashboard) map[string][]string {
	out := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			out["variable "+v.Name] = append(out["variable "+v.Name], v.Definition)
		}
	}
	return out
}

// rulesFile is a Prometheus rules file, the parts read here.
type rulesFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Record, Alert, Expr string
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestOpsFilesNameRealSeries: every batchd_ series the dashboard, the alert
// rules, their tests' input series and the Kubernetes example name is one
// batchd serves, so renaming a series breaks this test, not a page.
func TestOpsFilesNameRealSeries(t *testing.T) {
	names := seriesNames(t)
	uses := map[string][]string{} // file: what → text
	for title, exprs := range dashboardExprs(readDashboard(t)) {
		uses[dashboardFile+": "+title] = exprs
	}
	var rules rulesFile
	readYAML(t, alertsFile, &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			uses[alertsFile+": "+r.Record+r.Alert] = []string{r.Expr}
		}
	}
	var tests struct {
		Tests []struct {
			InputSeries []struct{ Series string } `yaml:"input_series"`
		}
	}
	readYAML(t, alertsTestFile, &tests)
	for i, tc := range tests.Tests {
		for _, s := range tc.InputSeries {
			k := fmt.Sprintf("%s: test %d", alertsTestFile, i)
			uses[k] = append(uses[k], s.Series)
		}
	}
	kube, err := filepath.Glob(filepath.Join(kubernetesDir, "*.yaml"))
	if err != nil || len(kube) == 0 {
		t.Fatalf("no Kubernetes example in %s (%v)", kubernetesDir, err)
	}
	for _, p := range kube {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		uses[filepath.Base(p)] = []string{string(data)}
	}
	used := map[string]bool{}
	for _, where := range sortedKeys(uses) {
		for _, text := range uses[where] {
			for _, n := range seriesRE.FindAllString(text, -1) {
				used[n] = true
				if !names[n] {
					t.Errorf("%s names %s, which batchd does not serve", where, n)
				}
			}
		}
	}
	// The list: what an operator looks at must be on the dashboard.
	for _, n := range []string{
		"batchd_requests_total", "batchd_latency_seconds_bucket", "batchd_queue_wait_seconds_bucket",
		"batchd_compute_seconds_bucket", "batchd_batch_size_bucket", "batchd_queue_depth",
		"batchd_queue_slack_min_seconds", "batchd_device_busy_seconds_total", "batchd_device_healthy",
		"batchd_autoscale_devices_recommended", "batchd_autoscale_devices_current",
	} {
		if !used[n] {
			t.Errorf("nothing in the operator's files reads %s", n)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestDashboardModel: the dashboard is one Grafana can import: panels with
// unique ids, a place on the grid and the datasource variable, targets with
// unique refIds and a query.
func TestDashboardModel(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no uid or no panels", dashboardFile)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		hasDS = hasDS || (v.Name == "datasource" && v.Type == "datasource")
	}
	if !hasDS {
		t.Error("no datasource variable: the dashboard would be tied to one Prometheus")
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d repeated", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W < 1 || p.GridPos.H < 1 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: grid position %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want ${datasource}", p.Title, p.Datasource)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] || strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: target %+v: empty or repeated refId, or no query", p.Title, tg)
			}
			refs[tg.RefID] = true
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
}

// unpackedPromtool is where install-promtool.sh puts Debian's promtool.
const unpackedPromtool = "../../../bin/opstools/usr/bin/promtool"

// promtool finds Prometheus's promtool, on PATH or where `make test`
// unpacks it, or skips saying how to get it.
func promtool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if p, err := filepath.Abs(unpackedPromtool); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("no promtool on PATH or in bin/opstools: `make test` unpacks Debian's (engine/httpapi/metrics/install-promtool.sh) where apt allows; skipping the check")
	return ""
}

func runPromtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("promtool: %v", err)
		}
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestAlertRules: promtool accepts the rules (PromQL, templates) and their
// unit tests pass: each alert fires on the series that should fire it and
// stays quiet on a healthy service.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	runPromtool(t, bin, "check", "rules", alertsFile)
	runPromtool(t, bin, "test", "rules", alertsTestFile)
}

// grafanaVars stand in for the dashboard's variables, so that promtool
// can parse its queries as PromQL.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")

// TestDashboardQueriesParse: every dashboard query is PromQL that promtool
// accepts (each checked as a recording rule).
func TestDashboardQueriesParse(t *testing.T) {
	bin := promtool(t)
	var f struct {
		Groups []map[string]any `yaml:"groups"`
	}
	var rules []map[string]string
	exprs := dashboardExprs(readDashboard(t))
	for _, title := range sortedKeys(exprs) {
		if strings.HasPrefix(title, "variable ") {
			continue // label_values() is Grafana's, not PromQL
		}
		for i, e := range exprs[title] {
			rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:panel_%d:%d", len(rules), i), "expr": grafanaVars.Replace(e)})
		}
	}
	f.Groups = []map[string]any{{"name": "dashboard", "rules": rules}}
	data, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, bin, "check", "rules", p)
}
