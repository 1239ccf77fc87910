package audit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// settleLedger is how long Run waits for the ledger's checkpoint to reach
// where it read the log, before it compares the records left as of the
// checkpoint, reading again from the log those the ledger has not brought
// as far: a few of the ledger's flushes, which come every second
// (services/ledger's FlushEvery).
const settleLedger = 5 * time.Second

// bucketBatch is how many of the bucket's entries a worker decodes at a
// time.
const bucketBatch = 64

// compareEntry compares an entry of the ledger's bucket, decoded, with
// the rebuilt record (compareOne). An entry that is no record is a
// finding, and counts as the job's entry: no further finding says the
// ledger has none. It reports whether the entry held anything: an entry
// without a record (a job the ledger has none of yet) is as good as none.
func (a *Auditor) compareEntry(ctx context.Context, js jetstream.JetStream, e *entry, asOf uint64) (bool, error) {
	switch {
	case e.bad != "":
		a.rep.Findings = append(a.rep.Findings, Finding{Job: e.job, Kind: Mismatch, Detail: e.bad})
		delete(a.ended, e.job)
		if _, open := a.rep.Records[e.job]; open {
			if a.openSeen == nil {
				a.openSeen = map[string]bool{}
			}
			a.openSeen[strings.Clone(e.job)] = true // not the message it came in
		}
		return true, nil
	case e.rec == nil:
		return false, nil
	}
	return true, a.compareOne(ctx, js, e.rec, e.sums, e.summed, asOf)
}

// compareUnseen settles the jobs of the log whose record the reading did
// not meet. Their entry may have been written again behind the reading,
// after it began: it is read again, from the leader. A job the log began
// after asOf is not the ledger's to have yet. Any other is a finding.
func (a *Auditor) compareUnseen(ctx context.Context, js jetstream.JetStream, asOf uint64) error {
	for _, id := range a.unseen() {
		a.tick()
		if asOf == 0 {
			// No checkpoint: the ledger has written nothing yet, records
			// and checkpoint being written together.
			a.rep.Moving++
			continue
		}
		had, err := a.compareLeaders(ctx, js, id, asOf)
		if err != nil {
			return err
		}
		if had {
			continue
		}
		if asOf < a.rep.LastSeq {
			first, err := firstSeq(ctx, js, id)
			if err != nil {
				return err
			}
			if first > asOf {
				a.rep.Moving++
				continue
			}
		}
		a.rep.Findings = append(a.rep.Findings, Finding{Job: id, Kind: MissingRec, Detail: "the log has this job but the ledger has no record of it"})
	}
	return nil
}

// compareLeaders compares the entry the bucket's leader holds for job
// now (compareEntry), and reports whether there was one.
func (a *Auditor) compareLeaders(ctx context.Context, js jetstream.JetStream, job string, asOf uint64) (bool, error) {
	m, err := bus.LeaderLast(ctx, js, events.KVStream(events.LedgerBucket), "$KV."+events.LedgerBucket+"."+events.LedgerRecordPrefix+job)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the ledger's record of %s: %w", job, err)
	case deleted(m.Header.Get("KV-Operation")):
		return false, nil
	}
	e := decodeEntry(job, m.Data)
	return a.compareEntry(ctx, js, &e, asOf)
}

// firstSeq is the sequence of job's first message in the log.
func firstSeq(ctx context.Context, js jetstream.JetStream, job string) (uint64, error) {
	for m, err := range bus.StoredJob(ctx, js, job, 1) {
		if err != nil {
			return 0, fmt.Errorf("read job %s again: %w", job, err)
		}
		return m.Sequence, nil
	}
	return 0, nil
}

// checkpointAt is the sequence of the log that the ledger's checkpoint is
// as of, once it is at least want, or after settle, whichever is first (0:
// the ledger has written none). read, if not nil, is told each one read.
//
// The checkpoint is read from the bucket's leader every checkpointPoll: a
// watch would be a consumer, and ending one waits for the server to
// delete it, which the auditor may not do (5 s lost to each audit).
func checkpointAt(ctx context.Context, js jetstream.JetStream, want uint64, settle time.Duration, read func(uint64)) (uint64, error) {
	stream := events.KVStream(events.LedgerBucket)
	subject := "$KV." + events.LedgerBucket + "." + events.LedgerCheckpointKey
	give := time.NewTimer(settle)
	defer give.Stop()
	poll := time.NewTicker(checkpointPoll)
	defer poll.Stop()
	for {
		var applied uint64
		m, err := bus.LeaderLast(ctx, js, stream, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, fmt.Errorf("read the ledger's checkpoint: %w", err)
		default:
			var c hold.Checkpoint
			if err := gojson.Unmarshal(m.Data, &c); err != nil {
				return 0, fmt.Errorf("read the ledger's checkpoint: %w", err)
			}
			applied = c.Applied
		}
		if read != nil {
			read(applied)
		}
		if applied >= want {
			return applied, nil
		}
		select {
		case <-poll.C:
		case <-give.C:
			return applied, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// checkpointPoll is how often checkpointAt reads the checkpoint.
const checkpointPoll = 50 * time.Millisecond

// entry is one entry of the ledger's bucket, decoded.
type entry struct {
	job string
	// rec is the record; nil for none yet, and in an entry parked whose
	// job is over, for which its sums stand (see park).
	rec    *hold.HoldRecord
	sums   sums // the record's, if summed
	summed bool
	last   uint64 // the sequence of the last event the record lists
	bad    string // why the entry is not a record, if it is not
}

// decodeEntry decodes the entry of job as stored (data), and sums its
// record. It is safe to call concurrently.
func decodeEntry(job string, data []byte) entry {
	e := entry{job: job}
	var st hold.Stored
	if err := gojson.Unmarshal(data, &st); err != nil {
		e.bad = fmt.Sprintf("the ledger's entry for this job is not a record: %v", err)
		return e
	}
	if st.Record == nil {
		return e
	}
	if st.Record.Job != job {
		e.bad = fmt.Sprintf("the ledger's entry for this job holds the record of %q", st.Record.Job)
		return e
	}
	e.rec = st.Record
	e.sums, e.summed = ledgerSums(e.rec)
	if n := len(e.rec.Events); n > 0 {
		e.last = e.rec.Events[n-1].Seq
	}
	return e
}

// deleted reports whether a KV-Operation header says the key was deleted.
func deleted(op string) bool { return op == "DEL" || op == "PURGE" }

// readEntries hands every record entry the ledger's bucket holds from its
// sequence from to last to compare, decoded, a batch at a time, in the
// bucket's order: one goroutine reads, a worker per core decodes and
// sums, and compare is called from one goroutine at a time.
func readEntries(ctx context.Context, js jetstream.JetStream, from, last uint64, compare func([]entry) error) error {
	if from > last {
		return nil
	}
	prefix := "$KV." + events.LedgerBucket + "." + events.LedgerRecordPrefix
	what := pull{stream: events.KVStream(events.LedgerBucket), filter: prefix + ">", name: "the ledger's bucket"}
	workers := runtime.GOMAXPROCS(0)
	type work struct {
		batch []Raw
		out   chan<- []entry
	}
	g, ctx := errgroup.WithContext(ctx)
	todo := make(chan work, workers)
	// The batches' results in the order they were read, as the log's
	// (pipeline): Run takes a job's entries in the order the ledger
	// wrote them, its last one last.
	inOrder := make(chan chan []entry, 2*workers+1)
	g.Go(func() error { // the reader
		defer close(todo)
		defer close(inOrder)
		batch := make([]Raw, 0, bucketBatch)
		send := func() error {
			out := make(chan []entry, 1)
			select {
			case inOrder <- out:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case todo <- work{batch, out}:
			case <-ctx.Done():
				return ctx.Err()
			}
			batch = make([]Raw, 0, bucketBatch)
			return nil
		}
		for restarts := 0; ; restarts++ {
			next, err := pullFrom(ctx, js, what, from, last, func(m Raw) error {
				if deleted(m.Headers.Get("KV-Operation")) {
					return nil
				}
				if batch = append(batch, m); len(batch) == bucketBatch {
					return send()
				}
				return nil
			})
			if errors.Is(err, errSkipped) && restarts < pullRestarts {
				from = next
				continue
			}
			if err != nil {
				return err
			}
			break
		}
		if len(batch) > 0 {
			return send()
		}
		return nil
	})
	for range workers {
		g.Go(func() error { // a decoder
			for w := range todo {
				es := make([]entry, len(w.batch))
				for i, m := range w.batch {
					es[i] = decodeEntry(strings.TrimPrefix(m.Subject, prefix), m.Body)
				}
				w.out <- es // buffered: never waits
			}
			return nil
		})
	}
	g.Go(func() error { // the comparer
		for out := range inOrder {
			var es []entry
			select {
			case es = <-out:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := compare(es); err != nil {
				return err
			}
		}
		return nil
	})
	return g.Wait()
}
