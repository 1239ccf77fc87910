package release_test

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/release"
)

func hold(attempt int) events.Hold {
	return events.Hold{Attempt: attempt, Node: "n1", CPU: 1, MemoryBytes: 1 << 30, DiskBytes: 1 << 20}
}

func returned(attempt int, outcome events.Outcome) *events.OutputReturned {
	return &events.OutputReturned{Hold: hold(attempt), Outcome: outcome, Files: []events.OutputFile{}, Missing: []string{}}
}

func lost(attempt int) *events.HoldLost {
	return &events.HoldLost{Hold: hold(attempt), Reason: "node n1 stopped renewing its lease"}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	released := func(attempt int, outcome events.Outcome, final bool) []events.Event {
		return []events.Event{&events.ComputeReleased{Hold: hold(attempt), Outcome: outcome, Final: final}}
	}
	type test struct {
		name    string
		attempt int
		outcome events.Outcome
		after   []events.Event
		want    []events.Event
	}
	var tests []test
	// Every outcome but a lost node is the job's own: the job is over.
	for _, o := range []events.Outcome{events.Succeeded, events.Failed, events.LimitExceeded, events.OutOfMemory, events.Cancelled} {
		tests = append(tests, test{name: string(o) + " is final", attempt: 1, outcome: o, want: released(1, o, true)})
	}
	// A lost node is not the job's fault: it is held again, up to MaxAttempts.
	for a := 1; a < events.MaxAttempts; a++ {
		tests = append(tests, test{name: fmt.Sprintf("node lost on attempt %d is held again", a),
			attempt: a, outcome: events.NodeLost, want: released(a, events.NodeLost, false)})
	}
	tests = append(tests,
		test{name: "node lost on the last attempt is final",
			attempt: events.MaxAttempts, outcome: events.NodeLost, want: released(events.MaxAttempts, events.NodeLost, true)},
		test{name: "already released: nothing",
			attempt: 1, outcome: events.Succeeded, after: released(1, events.Succeeded, true), want: nil},
		test{name: "a release of another attempt does not count",
			attempt: 2, outcome: events.Succeeded, after: released(1, events.NodeLost, false), want: released(2, events.Succeeded, true)},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var after []events.Envelope
			for i, ev := range tt.after {
				env := events.New("job-1", ev, "e31/test", time.Unix(int64(i), 0))
				env.Seq = uint64(10 + i)
				after = append(after, env)
			}
			if got := release.Decide(hold(tt.attempt), tt.outcome, after); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decide =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

// TestLostAttemptsThatSavedDoNotCount: a lost attempt that saved a new
// checkpoint is not counted towards MaxAttempts, up to AttemptsCap.
func TestLostAttemptsThatSavedDoNotCount(t *testing.T) {
	t.Parallel()
	var history []events.Envelope
	add := func(ev events.Event) {
		env := events.New("job-1", ev, "e31/test", time.Unix(int64(len(history)), 0))
		env.Seq = uint64(len(history) + 1)
		history = append(history, env)
	}
	lostAttempt := func(a int, resumed string, manifest string) {
		add(&events.ComputeHeld{Hold: hold(a)})
		add(&events.RunStarted{Hold: hold(a), ResumedFrom: resumed})
		if manifest != "" {
			add(&events.CheckpointSaved{Hold: hold(a), N: 1, Manifest: manifest})
		}
		add(&events.HoldLost{Hold: hold(a)})
		add(&events.ComputeReleased{Hold: hold(a), Outcome: events.NodeLost})
	}
	lostAttempt(1, "", "sha256:a")    // saved: not counted
	lostAttempt(2, "1.1", "sha256:b") // saved anew: not counted
	lostAttempt(3, "2.1", "sha256:b") // saved nothing new: counted
	lostAttempt(4, "2.1", "")         // saved nothing: counted
	if got := events.CountedAttempts(history); got != 2 {
		t.Fatalf("CountedAttempts = %d, want 2", got)
	}
	if got := release.DecideCounted(hold(4), events.NodeLost, nil, 2); got[0].(*events.ComputeReleased).Final {
		t.Error("attempt 4 lost, 2 counted: final, want held again")
	}
	if got := release.DecideCounted(hold(5), events.NodeLost, nil, events.MaxAttempts); !got[0].(*events.ComputeReleased).Final {
		t.Error("MaxAttempts counted: not final")
	}
	if got := release.DecideCounted(hold(events.AttemptsCap), events.NodeLost, nil, 1); !got[0].(*events.ComputeReleased).Final {
		t.Error("AttemptsCap attempts: not final")
	}
}

type fixture struct {
	ctx context.Context
	js  jetstream.JetStream
	pub *bus.Publisher
	svc *release.Service
}

func start(t *testing.T) *fixture {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	svc, err := release.New(js, release.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ctx: natstest.Context(t, 15*time.Second), js: js, pub: bus.NewPublisher(js, "e31/test", nil), svc: svc}
}

// log appends evs to job-1's log and returns the last as stored.
func (f *fixture) log(t *testing.T, evs ...events.Event) events.Envelope {
	t.Helper()
	var last events.Envelope
	for _, ev := range evs {
		var err error
		if last, err = f.pub.Append(f.ctx, "job-1", ev); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// deliverTwice hands trigger to RELEASE twice and returns job-1's releases.
func (f *fixture) deliverTwice(t *testing.T, trigger events.Envelope) []*events.ComputeReleased {
	t.Helper()
	for range 2 {
		if err := f.svc.Handle(f.ctx, trigger); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := bus.ReadJob(f.ctx, f.js, "job-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []*events.ComputeReleased
	for _, e := range evs {
		if r, ok := e.Event.(*events.ComputeReleased); ok {
			out = append(out, r)
		}
	}
	return out
}

func TestHandleReleasesOnceWhenAReturnIsDeliveredTwice(t *testing.T) {
	t.Parallel()
	f := start(t)
	trigger := f.log(t,
		&events.ComputeHeld{Hold: hold(1), Submitter: "alice"},
		&events.RunStarted{Hold: hold(1)},
		&events.RunStopped{Hold: hold(1), Outcome: events.NodeLost},
		returned(1, events.NodeLost))

	rel := f.deliverTwice(t, trigger)
	want := events.ComputeReleased{Hold: hold(1), Outcome: events.NodeLost, Final: false}
	if len(rel) != 1 || !reflect.DeepEqual(*rel[0], want) {
		t.Fatalf("released %+v, want once: %+v", rel, want)
	}
}

// TestHandleReleasesALostHoldOnce: RENT records HoldLost when a node's lease
// lapses; RELEASE gives the compute back so that the job is held again.
func TestHandleReleasesALostHoldOnce(t *testing.T) {
	t.Parallel()
	f := start(t)
	trigger := f.log(t,
		&events.ComputeHeld{Hold: hold(1), Submitter: "alice"},
		&events.RunStarted{Hold: hold(1)},
		lost(1))

	rel := f.deliverTwice(t, trigger)
	want := events.ComputeReleased{Hold: hold(1), Outcome: events.NodeLost, Final: false}
	if len(rel) != 1 || !reflect.DeepEqual(*rel[0], want) {
		t.Fatalf("released %+v, want once: %+v", rel, want)
	}
}

// TestHandleReleasesAnExpiredHoldForGood: RENT ends an attempt whose node
// never reported its stop by its limit plus grace; RELEASE gives the
// compute back as limit_exceeded, and the job is over: the node kept
// quiet, but the job had its limit's worth, and is not held again for it.
func TestHandleReleasesAnExpiredHoldForGood(t *testing.T) {
	t.Parallel()
	f := start(t)
	trigger := f.log(t,
		&events.ComputeHeld{Hold: hold(1), Submitter: "alice"},
		&events.RunStarted{Hold: hold(1)},
		&events.HoldExpired{Hold: hold(1), Deadline: time.Now().UTC(), Reason: "node n1 had not reported its stop"})

	rel := f.deliverTwice(t, trigger)
	want := events.ComputeReleased{Hold: hold(1), Outcome: events.LimitExceeded, Final: true}
	if len(rel) != 1 || !reflect.DeepEqual(*rel[0], want) {
		t.Fatalf("released %+v, want once: %+v", rel, want)
	}
}
