package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// TestANearlyFullLogRejectsNewJobs: through the CLI, the operator cannot
// bound the log below what it holds; bounded just above it, the next job
// is rejected with the reason (the reserve is for the jobs accepted
// before), nothing is dropped, and once the operator lifts the bound jobs
// are accepted again.
func TestANearlyFullLogRejectsNewJobs(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	if _, errOut, code := ts.setup("--log-max-bytes", "1KiB"); code != exitUsage || !strings.Contains(errOut, "the log holds") {
		t.Fatalf("e31 setup --log-max-bytes 1KiB: exit %d %q, want refused: the log holds more", code, errOut)
	}
	// The job runs a while, so that SUBMIT's last look at the log is
	// older than the next request.
	job := writeJob(t, "work: {command: [/bin/sh, -c, \"sleep 0.5\"]}\nrequest: {limit: 1m, cpu: 0.1}\n", nil)
	first := ts.submit(job)
	if rec, _ := ts.wait(first); rec.Outcome != events.Succeeded {
		t.Fatalf("the first job: %s (%s)", rec.Outcome, rec.Reason)
	}

	js := ts.c.JetStream()
	info := streamInfo(t, js)
	limit := int64(info.State.Bytes) + events.LogReserve(1) + 512
	if out, errOut, code := ts.setup("--log-max-bytes", fmt.Sprint(limit)); code != 0 {
		t.Fatalf("e31 setup --log-max-bytes %d: exit %d\n%s%s", limit, code, out, errOut)
	}
	if cfg := streamInfo(t, js).Config; cfg.MaxBytes != limit || cfg.Discard != jetstream.DiscardNew {
		t.Fatalf("the log is bounded at %d (discard %v), want %d, refusing new events", cfg.MaxBytes, cfg.Discard, limit)
	}
	refused := ts.submit(job)
	if rec, code := ts.wait(refused); code == 0 || rec.Outcome != events.Rejected || !strings.Contains(rec.Reason, "event log is nearly full") {
		t.Errorf("a job submitted to a nearly full log: %s (%q), want rejected because the log is nearly full", rec.Outcome, rec.Reason)
	}
	if got := streamInfo(t, js).State.FirstSeq; got != 1 {
		t.Errorf("the log starts at #%d, want #1: nothing dropped", got)
	}

	if out, errOut, code := ts.setup("--log-max-bytes", "unlimited"); code != 0 {
		t.Fatalf("e31 setup --log-max-bytes unlimited: exit %d\n%s%s", code, out, errOut)
	}
	if rec, _ := ts.wait(ts.submit(job)); rec.Outcome != events.Succeeded {
		t.Errorf("a job once the bound is lifted: %s (%s)", rec.Outcome, rec.Reason)
	}
}

func streamInfo(t *testing.T, js jetstream.JetStream) *jetstream.StreamInfo {
	t.Helper()
	str, err := js.Stream(context.Background(), events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	return str.CachedInfo()
}
