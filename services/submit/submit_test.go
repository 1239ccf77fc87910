package submit_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/submit"
)

type fixture struct {
	ctx    context.Context
	js     jetstream.JetStream
	pub    *bus.Publisher
	store  stage.Store
	submit *submit.Service
}

func start(t *testing.T) *fixture {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 15*time.Second)
	obs, err := js.ObjectStore(ctx, events.DataBucket)
	if err != nil {
		t.Fatal(err)
	}
	store := stage.NewObjectStore(obs)
	svc, err := submit.New(js, submit.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/cli", nil), store: store, submit: svc}
}

func validSpec() events.JobSpec {
	return events.JobSpec{
		Name:    "count-clips",
		Work:    events.Work{Command: []string{"/bin/sh", "-c", "wc -l /data/in > /out/count.txt"}},
		Request: events.Request{CPU: 1, MemoryBytes: 512 << 20, DiskBytes: 1 << 30, LimitSeconds: 600},
		Output:  []events.OutputDecl{{Path: "count.txt", Required: true}},
	}
}

// request logs a JobRequested as a client would.
func (f *fixture) request(t *testing.T, job, submitter string, spec events.JobSpec) events.Envelope {
	t.Helper()
	env, err := f.pub.Append(f.ctx, job, &events.JobRequested{Submitter: submitter, Spec: spec}, bus.ExpectLast(0))
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// decided delivers the request to SUBMIT twice and returns what it
// appended after it.
func (f *fixture) decided(t *testing.T, req events.Envelope) []events.Envelope {
	t.Helper()
	for range 2 {
		if err := f.submit.Handle(f.ctx, req); err != nil {
			t.Fatalf("Handle(%s): %v", req, err)
		}
	}
	evs, err := bus.ReadJob(f.ctx, f.js, req.Subject, req.Seq+1)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// theOne returns the single event a request led to, of type T.
func theOne[T any](t *testing.T, evs []events.Envelope) *T {
	t.Helper()
	if len(evs) != 1 {
		t.Fatalf("the request led to %d events %v, want exactly one", len(evs), evs)
	}
	ev, ok := any(evs[0].Event).(*T)
	if !ok {
		t.Fatalf("the request led to %s, want a %T", evs[0], *new(T))
	}
	return ev
}

func TestHandleSubmitsOnceWhenARequestIsDeliveredTwice(t *testing.T) {
	t.Parallel()
	f := start(t)
	spec := validSpec()
	sub := theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "job-1", "alice", spec)))
	if sub.Submitter != "alice" || !reflect.DeepEqual(sub.Spec, spec) {
		t.Errorf("submitted %+v, want alice's spec as requested", sub)
	}
}

func TestHandleRejectsAnInvalidRequestOnceWithEveryReason(t *testing.T) {
	t.Parallel()
	f := start(t)
	spec := validSpec()
	spec.Request.CPU = 0
	spec.Request.LimitSeconds = 0
	rej := theOne[events.JobRejected](t, f.decided(t, f.request(t, "job-1", "alice", spec)))
	for _, want := range []string{"request.cpu", "request.limit_seconds"} {
		if !strings.Contains(rej.Reason, want) {
			t.Errorf("reason %q does not name %s", rej.Reason, want)
		}
	}
	if len(rej.Problems) != 2 {
		t.Errorf("problems = %q, want the two, one each", rej.Problems)
	}
}

// TestARequestWithoutASubmitterCannotBePublished: the submitter is the
// subject's last token, which the server's permissions bind to who
// authenticated, so a request without one has no subject to go to.
func TestARequestWithoutASubmitterCannotBePublished(t *testing.T) {
	t.Parallel()
	if _, err := events.SubjectOf("job-1", &events.JobRequested{Submitter: " ", Spec: validSpec()}); err == nil {
		t.Fatal("a request with a blank submitter has a subject")
	}
}

// TestHandleRefusesASecondRequestUnderAUsedID: a request that reuses a job's
// id (here from a client that did not check, past the duplicate window) is
// poison: recording anything on that job's log would corrupt its record.
func TestHandleRefusesASecondRequestUnderAUsedID(t *testing.T) {
	t.Parallel()
	f := start(t)
	theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "job-1", "alice", validSpec())))

	other := events.New("job-1", &events.JobRequested{Submitter: "mallory", Spec: validSpec()}, "e31/cli", time.Now())
	other.ID += "-again" // another client's id: JetStream does not take it for a retry
	second, err := f.pub.AppendEnvelope(f.ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	err = f.submit.Handle(f.ctx, second)
	if !bus.IsPermanent(err) || !errors.Is(err, submit.ErrIDInUse) {
		t.Fatalf("Handle of a second request for job-1: err = %v, want a permanent ErrIDInUse", err)
	}
	if after, _ := bus.ReadJob(f.ctx, f.js, "job-1", second.Seq+1); len(after) != 0 {
		t.Errorf("job-1's log moved on after the second request: %v", after)
	}
}

func TestHandleChecksStagedData(t *testing.T) {
	t.Parallel()
	f := start(t)
	local := filepath.Join(t.TempDir(), "clips.txt")
	if err := os.WriteFile(local, []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	staged, err := stage.Upload(f.ctx, f.store, local, nil)
	if err != nil {
		t.Fatal(err)
	}
	staged.Name = "in"
	never := events.DataRef{Name: "in", Kind: stage.KindFile, Bytes: 8, Digest: "sha256:" + strings.Repeat("1", 64)}

	t.Run("intact: submitted", func(t *testing.T) {
		spec := validSpec()
		spec.Data = []events.DataRef{staged}
		sub := theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "staged", "alice", spec)))
		if !slices.Equal(sub.Spec.Data, spec.Data) {
			t.Errorf("submitted data %+v, want %+v", sub.Spec.Data, spec.Data)
		}
	})
	t.Run("never uploaded: rejected, naming it", func(t *testing.T) {
		spec := validSpec()
		spec.Data = []events.DataRef{never}
		rej := theOne[events.JobRejected](t, f.decided(t, f.request(t, "missing", "alice", spec)))
		if !strings.Contains(rej.Reason, `data[0] "in"`) || !strings.Contains(rej.Reason, "not intact") {
			t.Errorf("reason = %q, want it to say data[0] \"in\" is not intact", rej.Reason)
		}
	})
}

// TestHandleResolvesAnEarlierJobsOutput: data from_job becomes the returned
// output of that job, if it succeeded.
func TestHandleResolvesAnEarlierJobsOutput(t *testing.T) {
	t.Parallel()
	f := start(t)
	local := filepath.Join(t.TempDir(), "model.bin")
	if err := os.WriteFile(local, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref, err := stage.Upload(f.ctx, f.store, local, nil)
	if err != nil {
		t.Fatal(err)
	}
	file := events.OutputFile{Path: "model.bin", Bytes: ref.Bytes, Digest: ref.Digest}
	h := events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 512 << 20}
	life := func(job string, outcome events.Outcome, final bool) {
		for _, ev := range []events.Event{
			&events.JobSubmitted{Submitter: "alice", Spec: validSpec()},
			&events.ComputeHeld{Hold: h, Submitter: "alice", Spec: validSpec()},
			&events.RunStarted{Hold: h},
			&events.RunStopped{Hold: h, Outcome: outcome},
			&events.OutputReturned{Hold: h, Outcome: outcome, Files: []events.OutputFile{file}, Bytes: file.Bytes, Missing: []string{}},
			&events.ComputeReleased{Hold: h, Outcome: outcome, Final: final},
		} {
			if _, err := f.pub.Append(f.ctx, job, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	life("trained", events.Succeeded, true)
	life("crashed", events.Failed, true)
	life("retrying", events.NodeLost, false)
	if _, err := f.pub.Append(f.ctx, "refused", &events.JobRequested{Submitter: "alice", Spec: validSpec()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.Append(f.ctx, "refused", &events.JobRejected{Reason: "request.cpu: required"}); err != nil {
		t.Fatal(err)
	}
	// Bob's job, as alice sees it: no job at all.
	if _, err := f.pub.Append(f.ctx, "bobs", &events.JobRequested{Submitter: "bob", Spec: validSpec()}); err != nil {
		t.Fatal(err)
	}

	from := func(job string) events.JobSpec {
		spec := validSpec()
		spec.Data = []events.DataRef{{Name: "model", FromJob: job}}
		return spec
	}
	t.Run("succeeded: its output, as a folder", func(t *testing.T) {
		sub := theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "uses-trained", "alice", from("trained"))))
		got := sub.Spec.Data[0]
		if got.Name != "model" || got.FromJob != "trained" || got.Kind != stage.KindDir || got.Files != 1 || got.Bytes != file.Bytes {
			t.Fatalf("resolved data = %+v, want trained's one file as folder \"model\"", got)
		}
		if err := stage.Verify(f.ctx, f.store, got); err != nil {
			t.Errorf("the resolved folder is not in the store intact: %v", err)
		}
	})
	t.Run("not finished yet: submitted to run after it, resolved when it runs", func(t *testing.T) {
		sub := theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "uses-retrying", "alice", from("retrying"))))
		if !slices.Equal(sub.Spec.After, []string{"retrying"}) {
			t.Errorf("after = %q, want [retrying]", sub.Spec.After)
		}
		if want := (events.DataRef{Name: "model", FromJob: "retrying"}); !reflect.DeepEqual(sub.Spec.Data[0], want) {
			t.Errorf("data = %+v, want %+v, left for RUN to resolve", sub.Spec.Data[0], want)
		}
	})
	for _, tt := range []struct{ job, reason string }{
		{"crashed", `data[0] "model": from_job crashed did not succeed (failed)`},
		{"refused", `data[0] "model": from_job refused did not succeed (rejected)`},
		{"nosuchjob", `data[0] "model": from_job nosuchjob: no such job`},
		{"bobs", `data[0] "model": from_job bobs: no such job`},
	} {
		t.Run(tt.job+": rejected", func(t *testing.T) {
			rej := theOne[events.JobRejected](t, f.decided(t, f.request(t, "uses-"+tt.job, "alice", from(tt.job))))
			if !strings.Contains(rej.Reason, tt.reason) {
				t.Errorf("reason = %q, want it to say %q", rej.Reason, tt.reason)
			}
		})
	}
}

func TestHandleChecksTheJobsItRunsAfter(t *testing.T) {
	t.Parallel()
	f := start(t)
	theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "first", "alice", validSpec())))
	after := func(jobs ...string) events.JobSpec {
		spec := validSpec()
		spec.After = jobs
		return spec
	}

	t.Run("an existing job: submitted", func(t *testing.T) {
		sub := theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "second", "alice", after("first"))))
		if !slices.Equal(sub.Spec.After, []string{"first"}) {
			t.Errorf("after = %q, want [first]", sub.Spec.After)
		}
	})
	for _, tt := range []struct{ name, job, after, reason string }{
		{"no such job", "third", "typo", "after[0]: no such job typo"},
		{"itself", "fourth", "fourth", "after[0]: a job cannot wait for itself"},
	} {
		t.Run(tt.name+": rejected", func(t *testing.T) {
			rej := theOne[events.JobRejected](t, f.decided(t, f.request(t, tt.job, "alice", after(tt.after))))
			if rej.Reason != tt.reason {
				t.Errorf("reason = %q, want %q", rej.Reason, tt.reason)
			}
		})
	}
}
