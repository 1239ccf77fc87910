package audit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// Compare checks the ledger's records against the rebuilt ones, field by
// field, and adds a finding for every difference: a changed event shows as
// a different digest at its sequence, with whatever it changed in the
// record beside it. With all, ledger is every record the ledger has, and a
// job of the log without one is a finding too.
func (r *Report) Compare(ledger []*hold.HoldRecord, all bool) {
	seen := map[string]bool{}
	for _, l := range ledger {
		seen[l.Job] = true
		if n := len(l.Events); n > 0 && l.Events[n-1].Seq > r.LastSeq {
			r.Moving++
			continue
		}
		mine, ok := r.Records[l.Job]
		if !ok {
			r.Findings = append(r.Findings, Finding{Job: l.Job, Kind: ExtraRec, Detail: "the ledger has a record for a job with no events in the log"})
			continue
		}
		r.Compared++
		for _, d := range differences(l, mine) {
			r.Findings = append(r.Findings, Finding{Job: l.Job, Seq: d.seq, Kind: Mismatch, Detail: d.text})
		}
	}
	ids := make([]string, 0, len(r.Records))
	for id := range r.Records {
		if all && !seen[id] && r.Moving == 0 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		r.Findings = append(r.Findings, Finding{Job: id, Kind: MissingRec, Detail: "the log has this job but the ledger has no record of it"})
	}
}

// difference is one field where the records disagree, and the event it is
// about when it is one of the record's events.
type difference struct {
	seq  uint64
	text string
}

// differences compares two records as their JSON, the public form.
func differences(ledger, audit *hold.HoldRecord) []difference {
	var out []difference
	// Events first, by sequence: a changed, removed or added event is named
	// as such rather than as a shifted list.
	mine := map[uint64]hold.EventRef{}
	for _, e := range audit.Events {
		mine[e.Seq] = e
	}
	theirs := map[uint64]bool{}
	for _, e := range ledger.Events {
		m, ok := mine[e.Seq]
		switch {
		case theirs[e.Seq]:
			// Named, where comparing by sequence alone would hide it and
			// leave only an events_digest that differs.
			out = append(out, difference{e.Seq, fmt.Sprintf("the record lists %s #%d more than once", e.Type, e.Seq)})
		case !ok:
			out = append(out, difference{e.Seq, fmt.Sprintf("the record was built from %s #%d, which the log does not have for this job", e.Type, e.Seq)})
		case m.Type != e.Type:
			out = append(out, difference{e.Seq, fmt.Sprintf("event #%d is a %s in the record, a %s in the log", e.Seq, e.Type, m.Type)})
		case e.Digest != "" && m.Digest != e.Digest:
			out = append(out, difference{e.Seq, fmt.Sprintf("%s #%d is not the event the record was built from: its digest is %s, the record's %s", e.Type, e.Seq, m.Digest, e.Digest)})
		case m.SetAside && !e.SetAside:
			out = append(out, difference{e.Seq, fmt.Sprintf("the record counts %s #%d, which must be set aside: a node the attempt was not held on published it, or it came after the job's end", e.Type, e.Seq)})
		case !m.SetAside && e.SetAside:
			out = append(out, difference{e.Seq, fmt.Sprintf("the record sets aside %s #%d, which the node the attempt was held on published", e.Type, e.Seq)})
		}
		theirs[e.Seq] = true
	}
	for _, e := range audit.Events {
		if !theirs[e.Seq] {
			out = append(out, difference{e.Seq, fmt.Sprintf("the log has %s #%d for this job, which the record was not built from", e.Type, e.Seq)})
		}
	}
	l, a := toMap(ledger), toMap(audit)
	delete(l, "events")
	delete(a, "events")
	for _, d := range diff(l, a, "") {
		out = append(out, difference{0, d})
	}
	return out
}

func toMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// diff lists the paths where ledger and audit disagree.
func diff(ledger, audit any, path string) []string {
	lm, lok := ledger.(map[string]any)
	am, aok := audit.(map[string]any)
	if lok && aok {
		keys := map[string]bool{}
		for k := range lm {
			keys[k] = true
		}
		for k := range am {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		var out []string
		for _, k := range sorted {
			out = append(out, diff(lm[k], am[k], join(path, k))...)
		}
		return out
	}
	ll, lok := ledger.([]any)
	al, aok := audit.([]any)
	if lok && aok && len(ll) == len(al) {
		var out []string
		for i := range ll {
			out = append(out, diff(ll[i], al[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	if closeEnough(ledger, audit) {
		return nil
	}
	return []string{fmt.Sprintf("%s: ledger has %s, the log gives %s", path, show(ledger), show(audit))}
}

// closeEnough compares leaves. Numbers agree to a microsecond's worth,
// finer than any clock that stamped them, relative to their size: both
// sides compute the meter the same way, but a record that went through
// JSON may round in the last digit.
func closeEnough(a, b any) bool {
	fa, aok := a.(float64)
	fb, bok := b.(float64)
	if aok && bok {
		return math.Abs(fa-fb) <= 1e-6*max(1, math.Abs(fa), math.Abs(fb))
	}
	return reflect.DeepEqual(a, b)
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func show(v any) string {
	if v == nil {
		return "nothing"
	}
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// sums stand for a record let go of (Options.Forget) in a comparison with
// the ledger's: digests of what it says, in a few dozen bytes, where the
// record takes a kilobyte or more. What the log may add after the job's
// end (events listed, deletions) is kept apart, so that it can be added
// without the record.
type sums struct {
	core   [16]byte // the record but for its events and deletions
	events eventSum // its events
	// dataDeleted and outputDeleted are the record's data_deleted_at and
	// output.deleted_at in Unix nanoseconds, 0 for none.
	dataDeleted, outputDeleted int64
}

// eventSum is the sum, lane by lane, of a digest of each event a record
// lists: an event listed later is added on.
type eventSum [2]uint64

// add adds an event, by its sequence, its type's name as a record lists
// it, and its digest.
func (s *eventSum) add(seq uint64, name string, digest [32]byte) {
	var buf [128]byte
	b := binary.BigEndian.AppendUint64(buf[:0], seq)
	b = append(append(b, name...), digest[:]...)
	d := sha256.Sum256(b)
	s[0] += binary.BigEndian.Uint64(d[0:8])
	s[1] += binary.BigEndian.Uint64(d[8:16])
}

// sumsOf sums a record derived without its list of events, from the facts
// it was derived from (those it lists: all but a request repeated).
func sumsOf(rec *hold.HoldRecord, facts []fact) sums {
	s := sums{core: coreSum(rec)}
	for _, f := range facts {
		if f.repeat && f.typ == events.TypeJobRequested {
			continue
		}
		s.events.add(f.seq, events.Name(f.typ), f.digest)
	}
	if rec.DataDeletedAt != nil {
		s.dataDeleted = rec.DataDeletedAt.UnixNano()
	}
	if rec.Output.DeletedAt != nil {
		s.outputDeleted = rec.Output.DeletedAt.UnixNano()
	}
	return s
}

// coreSum digests a record's JSON but for what sums keeps apart.
func coreSum(rec *hold.HoldRecord) [16]byte {
	r := *rec
	r.Events, r.EventsDigest, r.DataDeletedAt, r.Output.DeletedAt = nil, "", nil, nil
	// goccy/go-json writes what encoding/json does, at twice the speed, and
	// an encoder writes from its own pooled buffer straight into the hash:
	// a sum is taken of every record as its job ends, in the fold.
	h := sha256.New()
	if err := gojson.NewEncoder(h).Encode(&r); err != nil {
		return [16]byte{} // matches no record: the comparison derives it again
	}
	var d [32]byte
	h.Sum(d[:0])
	return [16]byte(d[:16])
}

// ledgerSums takes the sums of a ledger's record, as sumsOf takes them of
// a rebuilt one; false if the record cannot stand for any rebuilt one (an
// event's digest that is not one, events out of order, an events_digest
// that is not theirs). It is safe to call concurrently.
func ledgerSums(l *hold.HoldRecord) (sums, bool) {
	var s sums
	for i, e := range l.Events {
		d, err := hex.DecodeString(strings.TrimPrefix(e.Digest, "sha256:"))
		if err != nil || len(d) != 32 || i > 0 && e.Seq <= l.Events[i-1].Seq {
			return sums{}, false
		}
		s.events.add(e.Seq, e.Type, [32]byte(d))
	}
	listed := ""
	if len(l.Events) > 0 {
		listed = eventsDigest(l.Events)
	}
	if l.EventsDigest != listed {
		return sums{}, false
	}
	s.core = coreSum(l)
	if l.DataDeletedAt != nil {
		s.dataDeleted = l.DataDeletedAt.UnixNano()
	}
	if l.Output.DeletedAt != nil {
		s.outputDeleted = l.Output.DeletedAt.UnixNano()
	}
	return s, true
}

// compareOne compares one of the ledger's records with the rebuilt one,
// with Options.Forget. The record is as of asOf at least: the sequence of
// the log the ledger had applied when it was read. ls are its sums
// (ledgerSums), if it has any.
//
// A record whose events go past where the audit read is moving: not
// compared. One as of a point before it (asOf, the ledger's checkpoint,
// behind the audit) is held against the job's record rebuilt as of asOf,
// read again from the log, once it does not agree with the audit's own:
// what the job did since is not the ledger's to know yet.
func (a *Auditor) compareOne(ctx context.Context, js jetstream.JetStream, l *hold.HoldRecord, ls sums, summed bool, asOf uint64) error {
	r := &a.rep
	if a.openSeen == nil {
		a.openSeen = map[string]bool{}
	}
	// A tomb is let go of once its record is seen: those left at the end
	// are the jobs the ledger has no record of. Stored again, it would be
	// stored under l.Job, and keep the entry it came in.
	t, ended := a.ended[l.Job]
	if ended {
		delete(a.ended, l.Job)
	}
	_, isOpen := r.Records[l.Job]
	if isOpen {
		a.openSeen[strings.Clone(l.Job)] = true
	}
	if n := len(l.Events); n > 0 && l.Events[n-1].Seq > r.LastSeq {
		r.Moving++
		return nil
	}
	if ended && summed && ls == t.sums {
		r.Compared++
		return nil
	}
	if !ended && !isOpen {
		r.Findings = append(r.Findings, Finding{Job: l.Job, Kind: ExtraRec, Detail: "the ledger has a record for a job with no events in the log"})
		return nil
	}
	r.Compared++
	var diffs []difference
	if isOpen {
		diffs = differences(l, r.Records[l.Job])
	}
	if ended || asOf < r.LastSeq && len(diffs) > 0 {
		mine, err := a.again(ctx, js, l.Job, min(asOf, r.LastSeq))
		if err != nil {
			return err
		}
		if mine == nil {
			r.Findings = append(r.Findings, Finding{Job: l.Job, Kind: Mismatch, Detail: "the ledger's record is not the one rebuilt from the log, whose events for this job could not be read again to say how"})
			return nil
		}
		diffs = differences(l, mine)
	}
	for _, d := range diffs {
		r.Findings = append(r.Findings, Finding{Job: l.Job, Seq: d.seq, Kind: Mismatch, Detail: d.text})
	}
	return nil
}

// unseen lists, in order, the jobs of the log whose ledger's record the
// comparison has not seen.
func (a *Auditor) unseen() []string {
	var ids []string
	for id := range a.ended {
		ids = append(ids, id)
	}
	for id := range a.rep.Records {
		if !a.openSeen[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// again derives one job's record anew from its history in the log, up to
// sequence upTo (where the audit read it, or before).
func (a *Auditor) again(ctx context.Context, js jetstream.JetStream, job string, upTo uint64) (*hold.HoldRecord, error) {
	a.readAgain++
	one, err := replayJob(ctx, js, job, upTo, Options{})
	if err != nil {
		return nil, err
	}
	return one.Finish().Records[job], nil
}

// sortFindings puts findings in the order of their jobs, and of the log
// within a job.
func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].Job != fs[j].Job {
			return fs[i].Job < fs[j].Job
		}
		return fs[i].Seq < fs[j].Seq
	})
}
