package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeSubmitter is the submitter deploy/README.md's commands submit as.
const readmeSubmitter = "alice"

// promQuery asks Prometheus' API for query now and returns the samples:
// their labels and values.
func (c *cluster) promQuery(ctx context.Context, query string) ([]promSample, error) {
	var r struct {
		Status string
		Error  string
		Data   struct{ Result []promSample }
	}
	if err := c.promGet(ctx, "/api/v1/query?query="+url.QueryEscape(query), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s: %s", query, r.Error)
	}
	return r.Data.Result, nil
}

// promSample is one sample of an instant vector.
type promSample struct {
	Metric map[string]string
	Value  [2]any // time, value as a string
}

func (s promSample) value() string { v, _ := s.Value[1].(string); return v }

func (c *cluster) promGet(ctx context.Context, path string, into any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.promURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("prometheus %s: %d: %w", path, resp.StatusCode, err)
	}
	return nil
}

// firing is the names of the alerts firing now.
func (c *cluster) firing(ctx context.Context) ([]string, error) {
	var r struct {
		Data struct {
			Alerts []struct {
				State  string
				Labels map[string]string
			}
		}
	}
	if err := c.promGet(ctx, "/api/v1/alerts", &r); err != nil {
		return nil, err
	}
	var names []string
	for _, a := range r.Data.Alerts {
		if a.State == "firing" {
			names = append(names, a.Labels["alertname"])
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// eventually calls check every half second until it returns nil, or
// fails the test with its last error after d.
func eventually(ctx context.Context, t *testing.T, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitScraped waits until Prometheus scrapes every instance the cluster
// runs, and itself, and each answers (up == 1): deploy/prometheus's
// configuration finds every one of them by compose.yaml's names.
func (c *cluster) waitScraped(ctx context.Context, t *testing.T) {
	t.Helper()
	want := map[string]int{"prometheus": 1}
	for class, ctrs := range c.svcs {
		want[class] = len(ctrs)
	}
	start := time.Now()
	eventually(ctx, t, 90*time.Second, "every instance scraped, up == 1", func() error {
		samples, err := c.promQuery(ctx, "up")
		if err != nil {
			return err
		}
		got := map[string]int{}
		var down []string
		for _, s := range samples {
			svc := s.Metric["service"]
			if s.Metric["job"] == "prometheus" {
				svc = "prometheus"
			}
			if s.value() == "1" {
				got[svc]++
			} else {
				down = append(down, svc+" "+s.Metric["instance"])
			}
		}
		for svc, n := range want {
			if got[svc] != n {
				return fmt.Errorf("up == 1 for %d of %d %s instances (all up: %v; down: %v)", got[svc], n, svc, got, down)
			}
		}
		return nil
	})
	t.Logf("prometheus: every instance scraped, up == 1, %s after the cluster started", time.Since(start).Round(time.Millisecond))
}

// checkFigures checks, once the jobs are over, that what the services told
// reached Prometheus: the handlers of every step, one RENT leading, the
// consumers' lag, the figures of the log and the audit.
func (c *cluster) checkFigures(ctx context.Context, t *testing.T) {
	t.Helper()
	checks := map[string]func([]promSample) error{
		`sum by (service) (e31_handler_seconds_count)`: func(s []promSample) error {
			var seen []string
			for _, x := range s {
				seen = append(seen, x.Metric["service"])
			}
			for _, svc := range []string{"submit", "rent", "run", "output", "release"} {
				if !slices.Contains(seen, svc) {
					return fmt.Errorf("no handling of %s counted: %v", svc, seen)
				}
			}
			return nil
		},
		`sum(e31_scheduler_leader)`:                                             one,
		`count(max by (service) (e31_consumer_pending))`:                        atLeast(5),
		`max(e31_jobs{state="released"})`:                                       atLeast(1),
		`max(e31_audit_runs_total{result="ok"})`:                                atLeast(1),
		`count(e31_scheduler_decision_seconds_count)`:                           atLeast(1),
		`max(e31_hold_max_overrun_seconds)`:                                     exists,
		`count(max by (instance) (e31_consumer_ack_pending))`:                   atLeast(1),
		`max(e31_log_applied_sequence)`:                                         atLeast(1),
		`count(process_cpu_seconds_total{job=~"e31|e31-run"})`:                  atLeast(1),
		`max(e31_nodes{state="up"})`:                                            atLeast(1),
		`count(e31_node_capacity{resource="cpu"})`:                              atLeast(1),
		`service:e31_consumer_pending:sum`:                                      exists,
		`e31:cpu_held:ratio`:                                                    exists,
		`max(e31_audit_last_completed_timestamp_seconds) > 1700000000`:          exists,
		`max(e31_held_cpu_core_seconds_total{submitter="cluster"}) > 0`:         exists,
		`count(e31_events_total{type="e31.job.submitted.v1"})`:                  atLeast(1),
		`max(e31_job_wait_seconds_count)`:                                       atLeast(1),
		`max(e31_job_start_seconds_count) + max(e31_job_release_seconds_count)`: atLeast(1),
		// E31LedgerMended's count is there to alert on, mends or none.
		`count(e31_ledger_mended_total{service="ledger", kind="entry_ahead"})`: atLeast(1),
	}
	for q, check := range checks {
		eventually(ctx, t, 30*time.Second, q, func() error {
			s, err := c.promQuery(ctx, q)
			if err != nil {
				return err
			}
			return check(s)
		})
	}
}

func exists(s []promSample) error {
	if len(s) == 0 {
		return fmt.Errorf("no sample")
	}
	return nil
}

func one(s []promSample) error {
	if len(s) != 1 || s[0].value() != "1" {
		return fmt.Errorf("%v, want 1", s)
	}
	return nil
}

func atLeast(n float64) func([]promSample) error {
	return func(s []promSample) error {
		if len(s) == 0 {
			return fmt.Errorf("no sample, want at least %g", n)
		}
		var v float64
		if _, err := fmt.Sscan(s[0].value(), &v); err != nil || v < n {
			return fmt.Errorf("%s, want at least %g", s[0].value(), n)
		}
		return nil
	}
}

// killNodeAndWaitForThePage kills a run node for good, as a machine that
// dies, and waits for the alerts an operator is paged by: the node's
// endpoint no longer answers (E31RunNodeDown) and the log records it lost
// (E31NodeLost).
func (c *cluster) killNodeAndWaitForThePage(ctx context.Context, t *testing.T) {
	t.Helper()
	victim := c.svcs["run"][len(c.svcs["run"])-1]
	start := time.Now()
	if err := c.kill(ctx, victim); err != nil {
		t.Fatalf("kill a run node: %v", err)
	}
	want := []string{"E31NodeLost", "E31RunNodeDown"}
	eventually(ctx, t, 2*time.Minute, fmt.Sprintf("alerts %v firing once a run node is killed", want), func() error {
		firing, err := c.firing(ctx)
		if err != nil {
			return err
		}
		for _, w := range want {
			if !slices.Contains(firing, w) {
				return fmt.Errorf("firing: %v", firing)
			}
		}
		return nil
	})
	t.Logf("prometheus: %v firing %s after a run node was killed", want, time.Since(start).Round(time.Millisecond))
}

// runReadme runs deploy/README.md's blocks of commands, as written, against
// the cluster: in a folder laid out as the repository's root, whose deploy/
// holds the cluster's secrets and bin/e31 is the e31 the test built, with
// the environment an operator on this host would have set (where NATS and
// Prometheus are: the test's ports, not compose's). A block marked
// `<!-- not run: why -->` is skipped, logged with its reason.
func (c *cluster) runReadme(ctx context.Context, t *testing.T) {
	t.Helper()
	root := t.TempDir()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "deploy"), 0o755))
	must(os.Symlink(e31Bin, filepath.Join(root, "bin", "e31")))
	must(os.Symlink(filepath.Join(repo, "examples"), filepath.Join(root, "examples")))
	entries, err := os.ReadDir(filepath.Join(repo, "deploy"))
	must(err)
	for _, e := range entries {
		if e.Name() == "secrets" || e.Name() == ".build" {
			continue
		}
		must(os.Symlink(filepath.Join(repo, "deploy", e.Name()), filepath.Join(root, "deploy", e.Name())))
	}
	must(os.Symlink(c.secrets, filepath.Join(root, "deploy", "secrets")))
	env := append(os.Environ(), "E31_NATS="+c.hostURL, "E31_PROMETHEUS="+c.promURL, "E31_TAG="+imageTag)
	blocks := shellBlocks(t, "../deploy/README.md")
	ran := 0
	for _, b := range blocks {
		if b.NotRun != "" {
			t.Logf("%s: not run: %s", b, b.NotRun)
			continue
		}
		if b.Background {
			t.Fatalf("%s: deploy/README.md has no server to start in the background", b)
		}
		if strings.Contains(b.Commands, "docker-compose") || strings.Contains(b.Commands, "docker compose") {
			// Run here, it would start compose's own servers beside the
			// test's cluster (and leave them running), and pass or fail
			// by how fast they form a cluster, not by the README.
			t.Errorf("%s: starts the compose deployment, which the test does not run: mark it <!-- not run: why -->", b)
			continue
		}
		start := time.Now()
		bctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		cmd := exec.CommandContext(bctx, b.Shell, "-e", "-c", b.Commands)
		cmd.Dir, cmd.Env = root, env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: the block as written fails: %v\n--- block\n%s--- output\n%s", b, err, b.Commands, out)
			continue
		}
		ran++
		t.Logf("%s: ran in %s:\n%s", b, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
	}
	if ran == 0 {
		t.Error("deploy/README.md: no block of commands was run")
	}
}
