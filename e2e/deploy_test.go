package e2e

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/e31net/e31/pkg/metrics"
)

var (
	prometheusOnce sync.Once
	prometheusDir  string
	prometheusErr  error
)

// prometheusBin is the folder holding prometheus and promtool, built by
// deploy/build-prometheus.sh from the Go module, once per version: a warm
// cache (the script keeps them beside Go's) builds nothing.
func prometheusBin(t *testing.T) string {
	t.Helper()
	prometheusOnce.Do(func() {
		out, err := exec.Command("../deploy/build-prometheus.sh").Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			prometheusErr = fmt.Errorf("deploy/build-prometheus.sh: %v\n%s", err, stderr)
			return
		}
		prometheusDir = strings.TrimSpace(string(out))
	})
	if prometheusErr != nil {
		t.Fatal(prometheusErr)
	}
	return prometheusDir
}

// promtool runs promtool with args in dir and fails the test unless it
// succeeds.
func promtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(prometheusBin(t), "promtool"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestPrometheusConfig checks deploy/prometheus with promtool: the
// configuration as the image has it, the rules, and the rules' unit tests
// (each alert fires on the series it is meant for, and not before).
func TestPrometheusConfig(t *testing.T) {
	t.Parallel()
	src, err := filepath.Abs("../deploy/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	promtool(t, src, "check", "rules", "rules.yml")
	promtool(t, src, "test", "rules", "rules_test.yml")

	// The configuration names the image's paths: lay them out in a
	// folder of the test's, the token as deploy/init.sh makes it.
	conf, err := os.ReadFile(filepath.Join(src, "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "metrics.token"), []byte("token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(filepath.Join(src, "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	conf = []byte(strings.ReplaceAll(string(conf), "/etc/prometheus/", dir+"/"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "config", "prometheus.yml")
}

// dashboardQueries is every query of deploy/grafana/e31.json.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../deploy/grafana/e31.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("deploy/grafana/e31.json: %v", err)
	}
	var qs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, tg.Expr)
		}
	}
	if len(qs) == 0 {
		t.Fatal("deploy/grafana/e31.json has no queries")
	}
	return qs
}

// TestDashboardQueriesParse hands every query of the dashboard to promtool
// as a recording rule: one that is not valid PromQL fails.
func TestDashboardQueriesParse(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range dashboardQueries(t) {
		qj, _ := json.Marshal(q) // a JSON string is a YAML string
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", i, qj)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "rules", "dashboard.yml")
}

// exposed is the name of every metric e31's processes can expose: every
// collector pkg/metrics has, described, and the series Prometheus makes
// of a histogram.
func exposed(t *testing.T) map[string]bool {
	t.Helper()
	cs := []prometheus.Collector{
		metrics.NewLogCollector(nil, slog.New(slog.DiscardHandler)),
		metrics.NewStreamCollector(nil),
		metrics.NewConsumerCollector(nil, metrics.NewHandlers()),
		metrics.NewHandlers(),
		metrics.NewScheduler(),
		metrics.NewLedger(),
		metrics.NewAudit(),
	}
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names[m[1]] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			names[m[1]+suffix] = true
		}
	}
	return names
}

// metricName is an e31 metric's name where a query uses it: not the tail
// of a recording rule's name (service:e31_…).
var metricName = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])(e31_[a-zA-Z0-9_]+)`)

// TestDeployNamesMetricsThatExist: every e31 metric the rules, their
// tests and the dashboard name is one e31 exposes: a renamed metric must
// not leave an alert that can never fire.
func TestDeployNamesMetricsThatExist(t *testing.T) {
	t.Parallel()
	names := exposed(t)
	for _, want := range []string{"e31_handler_seconds", "e31_scheduler_leader", "e31_consumer_pending", "e31_jobs", "e31_audit_findings", "e31_ledger_mended_total"} {
		if !names[want] {
			t.Fatalf("%s is not among the described metrics: %v", want, slices.Sorted(func(yield func(string) bool) {
				for n := range names {
					if !yield(n) {
						return
					}
				}
			}))
		}
	}
	texts := map[string]string{"deploy/grafana/e31.json": strings.Join(dashboardQueries(t), "\n")}
	for _, f := range []string{"deploy/prometheus/rules.yml", "deploy/prometheus/rules_test.yml"} {
		b, err := os.ReadFile("../" + f)
		if err != nil {
			t.Fatal(err)
		}
		texts[f] = string(b)
	}
	for f, text := range texts {
		seen := 0
		for _, m := range metricName.FindAllStringSubmatch(text, -1) {
			seen++
			if !names[m[1]] {
				t.Errorf("%s names %s, which no e31 process exposes", f, m[1])
			}
		}
		if seen == 0 {
			t.Errorf("%s names no e31 metric", f)
		}
	}
}
