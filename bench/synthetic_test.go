package bench

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/output/retention"
)

// TestASyntheticHistoryIsMadeOverTime: the synthetic log spreads its jobs
// over time up to now, and carries what OUTPUT records of them, so that
// OUTPUT's projection of it keeps only the jobs still within their
// retention: a job whose retention passed before now holds nothing, a
// failed job of the last days still holds its log, and a deletion its
// submitter asked for is recorded.
func TestASyntheticHistoryIsMadeOverTime(t *testing.T) {
	ctx := natstest.Context(t, time.Minute)
	ls, err := startLogServer(ctx, "synthetic", false, events.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	// An hour between jobs: 480 jobs span 20 days, 168 of them the last
	// week, the default retention.
	const jobs, gap = 480, time.Hour
	before := time.Now()
	if _, wrote, err := writeHistory(ctx, ls.js, jobs, gap, func(_, n int) bool { return n >= jobs }); err != nil || wrote != jobs {
		t.Fatalf("wrote %d jobs (%v), want %d", wrote, err, jobs)
	}

	refs := retention.NewRefs()
	var first, last time.Time
	causes := map[string]int{}
	for env := range readLog(ctx, t, ls.js) {
		if first.IsZero() {
			first = env.Time
		}
		if env.Time.Before(last) {
			t.Fatalf("event #%d at %s, before the one it follows (%s)", env.Seq, env.Time, last)
		}
		last = env.Time
		if d, ok := env.Event.(*events.Deleted); ok {
			causes[d.Cause]++
		}
		refs.Apply(env)
	}
	if span := last.Sub(first); span < (jobs-1)*gap || last.After(time.Now()) || last.Before(before.Add(-perBatchSpan(gap))) {
		t.Errorf("the log runs from %s to %s (%s), want %d jobs an hour apart up to now", first, last, span, jobs)
	}
	holding := 0
	for _, h := range refs.Jobs() {
		if len(h.Data)+len(h.Output)+len(h.Logs) == 0 {
			continue
		}
		holding++
		if !h.Over || !h.Expires().After(before) {
			t.Errorf("job %s holds %d logs, over %v, its retention passed at %s: OUTPUT would have deleted them", h.Job, len(h.Logs), h.Over, h.Expires())
		}
	}
	// A third of the jobs store a log (a failure's, a cancelled run's):
	// those of the last week still hold it.
	if want := 168 / 3; holding < want-8 || holding > want+8 {
		t.Errorf("%d jobs hold something, want about %d (a third of the last week's)", holding, want)
	}
	if causes[events.CauseExpired] < (jobs-168)/3-8 || causes[events.CauseRequested] < (jobs-8)/6 {
		t.Errorf("deletions by cause %v: want the expiries of the jobs before the last week and every requested deletion", causes)
	}
}

// perBatchSpan is the time one batch of writeHistory's jobs takes: the
// most its log's end may fall short of now.
func perBatchSpan(gap time.Duration) time.Duration { return 48 * gap }

// readLog yields every event of the log, in order, decoded.
func readLog(ctx context.Context, t *testing.T, js jetstream.JetStream) func(func(events.Envelope) bool) {
	return func(yield func(events.Envelope) bool) {
		for m, err := range bus.Stored(ctx, js, "", 1) {
			if err != nil {
				t.Fatal(err)
			}
			env, err := events.Decode(m.Subject, m.Header, m.Data)
			if err != nil {
				t.Fatalf("event #%d: %v", m.Sequence, err)
			}
			env.Seq = m.Sequence
			if !yield(env) {
				return
			}
		}
	}
}
