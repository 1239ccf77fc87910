package audit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// An audit's memory is bounded by the jobs still open, not by the jobs
// ever run, because Run reads the ledger's records in step with the log
// and lets go of each job that ended as soon as its record is compared.
//
// The two come in nearly the same order. Each of the ledger's flushes
// writes again every record that changed since the last one, and the
// bucket keeps only a key's last write: so the bucket holds the records
// in the order of their jobs' last change in the log, a flush at a time.
// After each batch of the log, Run takes the entries whose record lists
// no event past where the replay is (entry.last), and holds each against
// the job's tomb:
//
//   - a record that lists the same last event and has the same sums is
//     the same: the job is compared, and let go of;
//   - one that lists an earlier last event was written before the job's
//     later events (retention's deletions): the ledger wrote it again
//     later in the bucket, or the end reads it again;
//   - one that lists a later event, or of a job not over yet in the
//     replay, is parked until the replay catches up with it;
//   - anything else (sums that differ, an entry that is no record) is
//     parked, and settled at the end as before, reading the job again.
//
// What Run holds is then the jobs open, the jobs that ended since about
// a batch and a flush (those whose record the ledger has not rewritten
// yet), and those whose later events are still ahead in the log (a
// retention's deletion): not a tomb for every job that ever ended.
//
// A job let go of may still be named by the log: a request to delete or
// cancel it, a request repeated, an event stored again, or the events the
// ledger wrote it again for while the audit read. Nothing but a request
// begins a job, so any other event of a job the audit does not know has
// the job's earlier history read again from the log (reviveInStep),
// which gives its tomb back; a request of a job that seems new, and that
// SUBMIT never answered by the end, has it too (reviveOpen).

// inStep is what Run reads the ledger's bucket in step with the log by.
type inStep struct {
	ctx     context.Context
	js      jetstream.JetStream
	entries <-chan []entry // the bucket's, in order; closed at its end
	held    []entry        // taken from entries, not yet settled
	ended   bool           // entries is closed
	err     error          // the first error of a read again from the log
}

// Run is a whole audit with Options.Forget, as `e31 audit` and the
// page's audit run it. It replays the log from its first event and, in
// step with the replay, reads the ledger's records where the ledger keeps
// them, its bucket (events.LedgerBucket): every entry once, in the
// bucket's order, decoded and summed on every core, and not through the
// ledger's listing, whose serving cost more CPU than the whole audit may
// take. Each ended job is compared as soon as the replay has passed the
// last event its record lists, and let go of. Then Run checks what was
// not read (Finish), waits, at most settleLedger, for the ledger's
// checkpoint to reach where it read the log, and settles what is left:
// the records the ledger wrote meanwhile, those that differ, the jobs
// still open.
//
// Those left are compared as of the ledger's checkpoint: if it does not
// reach the replay (the ledger is behind, or stopped), a record that does
// not agree with the audit's is held against the job's record rebuilt up
// to the checkpoint, and a job the log began after it is not yet the
// ledger's to have (Report.Moving). Any job of the log without a record
// is a finding, whatever the ledger writes meanwhile.
func (a *Auditor) Run(ctx context.Context, js jetstream.JetStream) (*Report, error) {
	return a.run(ctx, js, settleLedger)
}

func (a *Auditor) run(ctx context.Context, js jetstream.JetStream, settle time.Duration) (*Report, error) {
	if !a.opts.Forget {
		return nil, errors.New("audit: Run compares through sums: it needs Options.Forget")
	}
	info, err := js.Stream(ctx, events.KVStream(events.LedgerBucket))
	if err != nil {
		return nil, fmt.Errorf("read the ledger's bucket: %w", err)
	}
	last := info.CachedInfo().State.LastSeq
	if err := a.readInStep(ctx, js, last); err != nil {
		return nil, err
	}
	if err := a.reviveOpen(ctx, js); err != nil {
		return nil, err
	}
	rep := a.Finish()
	if err := a.compareRest(ctx, js, last, settle); err != nil {
		return rep, fmt.Errorf("the log was replayed, but it could not be compared with the ledger's records: %w", err)
	}
	return rep, nil
}

// readInStep replays the log (ReadStream) and reads the ledger's bucket,
// up to its sequence last, in step with it.
func (a *Auditor) readInStep(ctx context.Context, js jetstream.JetStream, last uint64) error {
	g, ctx := errgroup.WithContext(ctx)
	entries := make(chan []entry, 1)
	g.Go(func() error { // the bucket
		defer close(entries)
		return readEntries(ctx, js, 1, last, func(es []entry) error {
			select {
			case entries <- es:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	})
	a.inStep = &inStep{ctx: ctx, js: js, entries: entries}
	a.parked = map[string]*entry{}
	defer func() { a.inStep = nil }()
	g.Go(func() error { // the log
		if err := a.ReadStream(ctx, js); err != nil {
			return err
		}
		return a.stepTo(^uint64(0)) // the rest of the bucket
	})
	return g.Wait()
}

// stepTo takes every entry of the bucket whose record lists no event
// past seq, in the bucket's order, up to the first that does, waiting
// for the bucket's reading to bring them.
func (a *Auditor) stepTo(seq uint64) error {
	s := a.inStep
	for s.err == nil {
		for len(s.held) > 0 && s.held[0].last <= seq {
			a.take(&s.held[0])
			s.held = s.held[1:]
		}
		if len(s.held) > 0 || s.ended {
			break
		}
		select {
		case es, ok := <-s.entries:
			s.held, s.ended = es, !ok
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
	}
	a.maxHeld = max(a.maxHeld, len(a.ended)+len(a.parked))
	return s.err
}

// take takes one of the ledger's entries, the job's latest read: it
// settles the job, or is parked until it can.
func (a *Auditor) take(e *entry) {
	if e.rec == nil && e.bad == "" {
		return // no record yet: as good as none
	}
	delete(a.parked, e.job) // an earlier entry of the job, written again since
	if t, over := a.ended[e.job]; over {
		a.meet(e, t)
		return
	}
	a.park(e)
}

// meet holds the ledger's entry of a job over against the job's tomb.
func (a *Auditor) meet(e *entry, t tomb) {
	if e.bad == "" && e.summed {
		switch {
		case e.last < t.last:
			// Written before the job's later events: the ledger writes
			// it again, and the end reads it again if that is not read.
			delete(a.parked, e.job)
			return
		case e.last == t.last && e.sums == t.sums:
			delete(a.parked, e.job)
			delete(a.ended, e.job)
			delete(a.after, e.job)
			a.rep.Compared++
			a.letGo++
			return
		}
	}
	a.park(e)
}

// park keeps an entry until the replay can settle it, or the end does.
// The record of a job the ledger has as over goes, its sums standing for
// it: it is compared through them, or read again at the end. That of a
// job open stays: the end compares the jobs open field by field, and
// there are only so many.
func (a *Auditor) park(e *entry) {
	if a.parked[e.job] == e {
		return
	}
	p := *e
	p.job = strings.Clone(e.job) // not the subject it came in
	if p.bad == "" && p.summed && p.rec.Over() {
		p.rec = nil
	}
	a.parked[p.job] = &p
}

// tombChanged settles the entry parked for a job whose tomb was made, or
// changed by an event after its end.
func (a *Auditor) tombChanged(job string) {
	if a.inStep == nil {
		return
	}
	if e, ok := a.parked[job]; ok {
		a.meet(e, a.ended[job])
	}
}

// reviveInStep gives back the tomb of a job let go of, from its history
// in the log before seq, if the job was over then: the log names it
// again. A read that fails ends the audit at the end of the batch.
func (a *Auditor) reviveInStep(job string, seq uint64) (tomb, bool) {
	s := a.inStep
	if s == nil || s.err != nil {
		return tomb{}, false
	}
	sub, err := replayJob(s.ctx, s.js, job, seq-1, Options{Forget: true})
	if err != nil {
		s.err = err
		return tomb{}, false
	}
	return a.revive(job, sub)
}

// revive gives the tomb a job's history replayed on its own (sub) ends
// with back to the job, let go of after it was compared, with what a
// repeat after its end is told by; false if the history did not end.
func (a *Auditor) revive(job string, sub *Auditor) (tomb, bool) {
	t, over := sub.ended[job]
	if !over {
		return tomb{}, false
	}
	id := strings.Clone(job)
	a.ended[id] = t
	if ids := sub.after[job]; len(ids) > 0 {
		if a.after == nil {
			a.after = map[string][]stored{}
		}
		a.after[id] = ids
	}
	a.rep.Compared-- // compared when let go of: it is compared again
	a.revived++
	return t, true
}

// replayJob replays a job's history in the log, up to sequence upTo, on
// its own: what the job is without the rest of the log.
func replayJob(ctx context.Context, js jetstream.JetStream, job string, upTo uint64, opts Options) (*Auditor, error) {
	sub := New(opts)
	for m, err := range bus.StoredJob(ctx, js, job, 1) {
		if err != nil {
			return nil, fmt.Errorf("read job %s again: %w", job, err)
		}
		if m.Sequence > upTo {
			break
		}
		sub.Add(Raw{Seq: m.Sequence, Subject: m.Subject, Headers: m.Header, Body: m.Data, Stored: m.Time})
	}
	return sub, nil
}

// reviveOpen gives back their tombs to the jobs open at the end of the
// replay that are jobs let go of, requested again: a job SUBMIT never
// answered (no JobSubmitted, JobRejected or JobCancelled) whose log
// begins before the replay first met it this time. It takes, for what the
// log said of such a job after it was let go of, what its whole history
// says instead: what comes after a job's end is judged as such.
func (a *Auditor) reviveOpen(ctx context.Context, js jetstream.JetStream) error {
	if a.letGo == 0 {
		return nil
	}
	for id, j := range a.open {
		if answered(j.facts) {
			continue
		}
		from := j.facts[0].seq
		// Replayed whole, a job begun at from ends no more than the
		// replay found: only one with a history before from can end.
		sub, err := replayJob(ctx, js, id, a.rep.LastSeq, Options{Forget: true})
		if err != nil {
			return err
		}
		if _, over := a.revive(id, sub); !over {
			continue // new
		}
		// What the replay found of it since (a request stored again)
		// goes; what its whole history finds after its end (an event
		// stored again, one the end does not allow) comes instead.
		kept := a.rep.Findings[:0]
		for _, f := range a.rep.Findings {
			if f.Job != id || f.Seq < from || f.Kind != Duplicate {
				kept = append(kept, f)
			}
		}
		a.rep.Findings = kept
		for _, f := range sub.rep.Findings {
			if f.Seq >= from && (f.Kind == Duplicate || f.Kind == Order) {
				a.find(f)
			}
		}
		for _, f := range j.facts {
			if f.typ == events.TypeJobRequested {
				a.rep.SetAside++ // as a request after the end is
			}
		}
		delete(a.open, id)
		delete(a.unreadable, id)
		a.jobs--
	}
	return nil
}

// tick counts a job settled at the end, for Options.Progress.
func (a *Auditor) tick() {
	if a.settled != nil {
		a.settled()
	}
}

// answered reports whether SUBMIT answered a job's request in facts.
func answered(facts []fact) bool {
	for _, f := range facts {
		switch f.typ {
		case events.TypeJobSubmitted, events.TypeJobRejected, events.TypeJobCancelled:
			return true
		}
	}
	return false
}

// compareRest settles what the replay left, once Finish has been called:
// it waits for the ledger's checkpoint, takes the entries the ledger
// wrote since the bucket's sequence last (where the reading in step
// ended), and compares every entry still parked, every job over still
// held, and every job open, reading again from the ledger's leader the
// records it has no entry of at hand.
func (a *Auditor) compareRest(ctx context.Context, js jetstream.JetStream, last uint64, settle time.Duration) error {
	asOf, err := checkpointAt(ctx, js, a.rep.LastSeq, settle, a.readCheckpoint)
	if err != nil {
		return err
	}
	info, err := js.Stream(ctx, events.KVStream(events.LedgerBucket))
	if err != nil {
		return fmt.Errorf("read the ledger's bucket: %w", err)
	}
	if a.parked == nil {
		a.parked = map[string]*entry{}
	}
	err = readEntries(ctx, js, last+1, info.CachedInfo().State.LastSeq, func(es []entry) error {
		for i := range es {
			a.take(&es[i])
		}
		return nil
	})
	if err != nil {
		return err
	}
	before := len(a.rep.Findings)
	ids := make([]string, 0, len(a.parked))
	for id := range a.parked {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if p := a.opts.Progress; p != nil {
		// What is left to settle: each job once, whichever way.
		left := len(a.ended) + len(a.rep.Records)
		for _, id := range ids {
			_, over := a.ended[id]
			_, open := a.rep.Records[id]
			if !over && !open {
				left++
			}
		}
		p.Start(int64(left), "comparing with the ledger")
		defer p.Done()
		a.settled = func() { p.Add(1) }
		defer func() { a.settled = nil }()
	}
	var absent []string // entries of jobs the audit has not
	for _, id := range ids {
		e := a.parked[id]
		_, over := a.ended[id]
		_, open := a.rep.Records[id]
		if !over && !open && a.letGo > 0 {
			sub, err := replayJob(ctx, js, id, a.rep.LastSeq, Options{Forget: true})
			if err != nil {
				return err
			}
			// Let go of, and written again with nothing new?
			_, over = a.revive(id, sub)
		}
		switch {
		case e.rec == nil && e.bad == "" && (over || open):
			// Its sums did not settle it: read again whole, with the
			// jobs not seen (compareUnseen).
		case e.rec == nil && e.bad == "":
			a.tick()
			absent = append(absent, id)
		default:
			a.tick()
			if _, err := a.compareEntry(ctx, js, e, asOf); err != nil {
				return err
			}
		}
	}
	a.parked = nil
	if err := a.compareUnseen(ctx, js, asOf); err != nil {
		return err
	}
	for _, id := range absent {
		if _, err := a.compareLeaders(ctx, js, id, asOf); err != nil {
			return err
		}
	}
	// In the order of jobs: the bucket's is the order the ledger last
	// wrote them in.
	sortFindings(a.rep.Findings[before:])
	return nil
}
