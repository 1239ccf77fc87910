package submit_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/submit"
)

// TestAFullLogRefusesNewJobsAndKeepsTheAcceptedOnes fills a small log. Past
// its reserve, SUBMIT rejects new jobs with the reason, while the jobs it
// accepted before still take their next steps in the reserve; at the hard
// bound the server refuses the client's request itself, which the client
// reports as ErrFull; and nothing accepted before was dropped (DiscardNew).
func TestAFullLogRefusesNewJobsAndKeepsTheAcceptedOnes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 60*time.Second)
	const maxBytes = 96 << 10
	if _, err := js.UpdateStream(ctx, events.StreamConfig(events.StreamOptions{LogMaxBytes: maxBytes})); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, events.DataBucket)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := submit.New(js, submit.Config{Store: stage.NewObjectStore(obs), Logger: slog.New(slog.DiscardHandler), LogCheckEvery: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	pub := bus.NewPublisher(js, "e31/test", nil)

	// finish takes an accepted job to its end as RENT and RUN would: a
	// hold and its release.
	held := map[string]int{}
	finish := func(job string) {
		t.Helper()
		hold := events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 512 << 20, DiskBytes: 1 << 30}
		if _, err := pub.Append(ctx, job, &events.ComputeHeld{Hold: hold, Submitter: "alice", Spec: validSpec()}); err != nil {
			t.Fatalf("hold %s: %v", job, err)
		}
		if _, err := pub.Append(ctx, job, &events.ComputeReleased{Hold: hold, Outcome: events.Succeeded, Final: true}); err != nil {
			t.Fatalf("release %s: %v", job, err)
		}
		held[job] = 4 // request, submitted, held, released
	}

	// Submit until SUBMIT refuses: it must before the server does. Jobs
	// finish as others come, two staying open, as on a busy site.
	var accepted, open []string
	var refusal *events.JobRejected
	for i := 0; refusal == nil; i++ {
		job := fmt.Sprintf("job-%03d", i)
		req, err := pub.Append(ctx, job, &events.JobRequested{Submitter: "alice", Spec: validSpec()}, bus.ExpectLast(0))
		if err != nil {
			t.Fatalf("request %d: the server refused it (%v) before SUBMIT refused any job", i, err)
		}
		if err := svc.Handle(ctx, req); err != nil {
			t.Fatalf("Handle(%s): %v", job, err)
		}
		evs, err := bus.ReadJob(ctx, js, job, req.Seq+1)
		if err != nil || len(evs) != 1 {
			t.Fatalf("job %s led to %v (%v), want one decision", job, evs, err)
		}
		switch e := evs[0].Event.(type) {
		case *events.JobSubmitted:
			accepted, open = append(accepted, job), append(open, job)
			if len(open) > 2 {
				finish(open[0])
				open = open[1:]
			}
		case *events.JobRejected:
			refusal = e
		default:
			t.Fatalf("job %s led to %s", job, evs[0])
		}
	}
	if len(accepted) == 0 || !strings.Contains(refusal.Reason, "event log is nearly full") {
		t.Fatalf("after %d accepted jobs, the refusal says %q, want it to say the log is nearly full", len(accepted), refusal.Reason)
	}

	// The jobs still open finish in the reserve.
	for _, job := range open {
		finish(job)
	}

	// Past the hard bound the server refuses the request itself, and the
	// client says so.
	c, err := client.Connect(ctx, client.Config{URL: srv.ClientURL(), User: "alice", ConfigDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var refused error
	for i := 0; i < 10000 && refused == nil; i++ {
		_, refused = c.Submit(ctx, &jobfile.Job{Spec: validSpec(), Paths: map[int]string{}}, nil)
	}
	if !errors.Is(refused, client.ErrFull) || !events.IsLogFull(refused) || !strings.Contains(refused.Error(), "event log is full") {
		t.Fatalf("a submission to a full log failed with %v, want client.ErrFull saying the event log is full", refused)
	}
	// A full log refuses every event, a release too: the reserve is what
	// keeps accepted jobs going, and it was spent by requests SUBMIT then
	// rejected.
	if _, err := pub.Append(ctx, accepted[0], &events.JobCancelled{Reason: "late"}); !events.IsLogFull(err) {
		t.Errorf("an append to a full log: %v, want it refused as full", err)
	}

	// Nothing accepted was dropped: the log still starts at its first
	// event, and every accepted job's events are all there.
	str, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if info := str.CachedInfo(); info.State.FirstSeq != 1 || info.State.Bytes > maxBytes {
		t.Errorf("the full log starts at #%d and holds %d bytes, want #1 and at most %d", info.State.FirstSeq, info.State.Bytes, maxBytes)
	}
	for job, want := range held {
		evs, err := bus.ReadJob(ctx, js, job, 0)
		if err != nil || len(evs) != want {
			t.Errorf("job %s has %d events (%v), want its %d", job, len(evs), err, want)
		}
	}
}
