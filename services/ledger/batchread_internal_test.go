package ledger

import (
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/natstest"
)

// TestABatchReadIsWitnessedByTheCheckpoint: the entries a batch of the log
// needs are read in one request, as of the checkpoint the instance builds
// on. The records the bucket has and the jobs it lacks are settled by it.
// An answer whose checkpoint is behind the base (a replica that lags)
// settles nothing: every job is read from the leader, and right. One past
// the base (another instance wrote a flush since) is a conflict.
func TestABatchReadIsWitnessedByTheCheckpoint(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 60*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	appendJobs(t, ctx, pub, 0, 6)
	_, stop := run(t, nc, js)
	stop()

	st, err := openStore(ctx, nc, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.loadCheckpoint(); err != nil {
		t.Fatal(err)
	}
	base := st.base.Load()
	jobs := []string{"job-0001", "job-0004", "job-9999"} // two records, one job the bucket lacks
	strict := true
	read := func() (map[string]*entry, []string, error) {
		out := map[string]*entry{}
		rest, err := st.readBatch(jobs, out, strict, decodeEntry)
		return out, rest, err
	}

	out, rest, err := read()
	if err != nil || len(rest) != 0 {
		t.Fatalf("at the base: left %v to the leader (%v), want every job settled", rest, err)
	}
	for _, job := range jobs[:2] {
		if e := out[job]; e == nil || e.Record == nil || e.Record.Job != job {
			t.Errorf("%s: read %+v, want its record", job, e)
		}
	}
	if e, ok := out["job-9999"]; !ok || e != nil {
		t.Errorf("job-9999, which the bucket lacks: read %+v (settled %v), want nil and settled", e, ok)
	}

	// As a replica behind the base answers: the bucket's checkpoint is
	// older than the one the instance builds on.
	st.base.Store(base + 10)
	if out, rest, err := read(); err != nil || len(rest) != len(jobs) || len(out) != 0 {
		t.Errorf("behind the base: settled %v, left %v to the leader (%v); want every job left", out, rest, err)
	}
	loaded, err := st.loadMany(jobs, true, decodeEntry)
	if err != nil || loaded["job-0001"] == nil || loaded["job-0004"] == nil || loaded["job-9999"] != nil {
		t.Errorf("the leader's reads: %v (%v), want the two records and nothing for job-9999", loaded, err)
	}

	// Another instance wrote a flush past the base.
	st.base.Store(base - 1)
	if _, _, err := read(); !isConflict(err) || !st.stale.Load() {
		t.Errorf("past the base: %v (stale %v), want a conflict", err, st.stale.Load())
	}

	// A query reads as of the base: another instance's checkpoint past it
	// is no conflict while the keys read are as they were at the base (the
	// two records were written before the checkpoint, in its flush)...
	strict = false
	st.stale.Store(false)
	out, rest, err = read()
	if err != nil || len(rest) != 0 || out["job-0001"] == nil || out["job-0004"] == nil || st.stale.Load() {
		t.Errorf("a query past the base: read %v, left %v (%v, stale %v); want both records, no conflict", out, rest, err, st.stale.Load())
	}
	// ...and a key written past the base is one.
	st.base.Store(1)
	if _, _, err := read(); !isConflict(err) || !st.stale.Load() {
		t.Errorf("a query of keys written past the base: %v (stale %v), want a conflict", err, st.stale.Load())
	}
}
