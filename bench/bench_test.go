package bench

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/run"
)

// The summary lines are read by scripts: their formats must not change.
var (
	lifeSummary      = regexp.MustCompile(`^bench jobs=\d+ jobs_per_s=\d+\.\d floor_per_s=\d+ ratio=\d+\.\d{3} start_p50_ms=\d+\.\d\d start_p99_ms=\d+\.\d\d released_p50_ms=\d+\.\d\d burst_start_p50_ms=\d+ burst_released_p99_ms=\d+ sync=interval executor=process failed=0 cpu_per_job_ms=\d+\.\d\d executor_floor_per_s=\d+ executor_ratio=\d+\.\d{3} writes_per_job=\d+\.\d\d$`)
	lifeSteps        = regexp.MustCompile(`stopped→returned (\d+\.\d) ms \(the stop logged after (\d+\.\d) ms\)`)
	schedulerSummary = regexp.MustCompile(`^bench scheduler jobs=\d+ nodes=\d+ decisions_per_s=\d+ fill_s=\d+\.\d\d bytes_per_queued_job=\d+ decide_us_short=\d+\.\d decide_us_deep=\d+\.\d total_s=\d+\.\d cpu_us_per_decision=\d+$`)
	observeSummary   = regexp.MustCompile(`^bench-observe pairs=1 jobs=\d+ off_jobs_per_s=\d+\.\d on_jobs_per_s=\d+\.\d cost_pct=-?\d+\.\d spread_pct=\d+\.\d off_median=\d+\.\d on_median=\d+\.\d otlp_bytes=(\d+) sync=interval executor=process off_cpu_ms_per_job=\d+\.\d\d on_cpu_ms_per_job=\d+\.\d\d cpu_cost_pct=-?\d+\.\d$`)
	ledgerSummary    = regexp.MustCompile(`^bench-ledger events=\d+ jobs=\d+ write_per_s=\d+ read_only_per_s=\d+ audit_s=\d+\.\d{3} audit_per_s=\d+ ledger_rebuild_s=\d+\.\d{3} ledger_per_s=\d+ audit_cpu_s=\d+\.\d\d ledger_cpu_s=\d+\.\d\d ledger_restart_s=\d+\.\d{3} cores=\d+ audit_heap_mib=\d+\.\d whole_audit_s=\d+\.\d{3} whole_audit_rss_mib=\d+\.\d$`)
)

// TestLifeOfAFewJobs runs the whole-life measure small, with jobs run as
// processes, and checks every job succeeded and the summary's format.
func TestLifeOfAFewJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole e31")
	}
	ctx := natstest.Context(t, 3*time.Minute)
	var out bytes.Buffer
	if err := Life(ctx, &out, LifeOptions{Jobs: 20, Idle: 3, Sync: "interval", Executor: run.ExecProcess, Nodes: 1}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if l := lastLine(out.String()); !lifeSummary.MatchString(l) {
		t.Errorf("summary %q does not match %s", l, lifeSummary)
	}
	// The stop's time to the log is a part of its time to its return,
	// and never nothing: a stop's storing stamp read wrong would show.
	m := lifeSteps.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no line of the burst's steps matches %s:\n%s", lifeSteps, out.String())
	}
	returned, _ := strconv.ParseFloat(m[1], 64)
	logged, _ := strconv.ParseFloat(m[2], 64)
	if logged <= 0 || logged > returned {
		t.Errorf("the stop logged after %.1f ms of the %.1f ms to its return: %s", logged, returned, m[0])
	}
}

// TestObserveSendsSpans runs the cost measure small and checks that the
// "on" run exported spans over OTLP (a run whose spans went nowhere would
// measure nothing) and that the summary keeps its format.
func TestObserveSendsSpans(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole e31 twice")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	ctx := natstest.Context(t, 3*time.Minute)
	var out bytes.Buffer
	if err := Observe(ctx, &out, ObserveOptions{Pairs: 1, Jobs: 10, Sync: "interval", Executor: run.ExecProcess}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m := observeSummary.FindStringSubmatch(lastLine(out.String()))
	if m == nil {
		t.Fatalf("summary %q does not match %s", lastLine(out.String()), observeSummary)
	}
	t.Log(m[0])
	// Ten jobs' spans, several per job, are kilobytes of OTLP.
	if n, _ := strconv.Atoi(m[1]); n < 1000 {
		t.Errorf("the receiver got %d bytes of spans, want the spans of 10 jobs", n)
	}
}

// TestSchedulerLedgerAndStageSmall runs the other measures small and
// checks their summaries.
func TestSchedulerLedgerAndStageSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("writes logs and files")
	}
	ctx := natstest.Context(t, 3*time.Minute)
	var out bytes.Buffer
	if err := Scheduler(ctx, &out, SchedulerOptions{Jobs: 400, Nodes: 10, Decisions: 100}); err != nil {
		t.Fatalf("scheduler: %v\n%s", err, out.String())
	}
	if l := lastLine(out.String()); !schedulerSummary.MatchString(l) {
		t.Errorf("scheduler summary %q does not match %s", l, schedulerSummary)
	}
	out.Reset()
	// The ledger's measure times `e31 audit` in a process of its own.
	e31 := filepath.Join(t.TempDir(), "e31")
	if b, err := exec.Command("go", "build", "-o", e31, "github.com/e31net/e31/cmd/e31").CombinedOutput(); err != nil {
		t.Fatalf("build e31: %v\n%s", err, b)
	}
	if err := Ledger(ctx, &out, LedgerOptions{Events: 2000, E31: e31}); err != nil {
		t.Fatalf("ledger: %v\n%s", err, out.String())
	}
	if l := lastLine(out.String()); !ledgerSummary.MatchString(l) {
		t.Errorf("ledger summary %q does not match %s", l, ledgerSummary)
	}
	out.Reset()
	if err := Stage(ctx, &out, StageOptions{Large: 1 << 20, SmallFiles: 20, SmallSize: 4 << 10, Sync: "interval"}); err != nil {
		t.Fatalf("stage: %v\n%s", err, out.String())
	}
	var sum stageSummary
	if err := json.Unmarshal([]byte(lastLine(out.String())), &sum); err != nil || sum.Sync != "interval" || sum.Large["upload"].Bytes != 1<<20 {
		t.Errorf("stage summary %q: %+v, %v", lastLine(out.String()), sum, err)
	}
}

// renewSummary is the scheduler's summary with the nodes renewing.
var renewSummary = regexp.MustCompile(`^bench scheduler jobs=\d+ nodes=\d+ decisions_per_s=\d+ fill_s=\d+\.\d\d bytes_per_queued_job=\d+ decide_us_short=\d+\.\d decide_us_deep=\d+\.\d total_s=\d+\.\d cpu_us_per_decision=\d+ renew=1 lease_writes_per_s=(\d+) lease_cores=\d+\.\d\d renewer_cores=\d+\.\d\d nodes_lost=(\d+)$`)

// TestSchedulerWithRenewals runs the scheduler's measure small with the
// nodes renewing their leases: each renewal and its copy are counted, as
// many as the nodes renew at the production lease time, and RENT finds
// no node lost.
func TestSchedulerWithRenewals(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a log and waits for renewals")
	}
	ctx := natstest.Context(t, 3*time.Minute)
	var out bytes.Buffer
	const nodes = 40
	if err := Scheduler(ctx, &out, SchedulerOptions{Jobs: 400, Nodes: nodes, Decisions: 100, Renew: true, Sync: "always"}); err != nil {
		t.Fatalf("scheduler: %v\n%s", err, out.String())
	}
	m := renewSummary.FindStringSubmatch(lastLine(out.String()))
	if m == nil {
		t.Fatalf("scheduler summary %q does not match %s", lastLine(out.String()), renewSummary)
	}
	writes, _ := strconv.Atoi(m[1])
	// Two writes (the renewal, its copy) every 2.5 s per node.
	if want := 2 * nodes * 2 / 5; writes < want*3/4 || writes > want*5/4 {
		t.Errorf("%d lease writes/s, want about %d\n%s", writes, want, out.String())
	}
	if m[2] != "0" {
		t.Errorf("%s nodes found lost\n%s", m[2], out.String())
	}
}

// lastLine is the last line of out: a measure's summary.
func lastLine(out string) string {
	out = strings.TrimSpace(out)
	return out[strings.LastIndexByte(out, '\n')+1:]
}
