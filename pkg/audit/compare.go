package audit

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"

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
		theirs[e.Seq] = true
		m, ok := mine[e.Seq]
		switch {
		case !ok:
			out = append(out, difference{e.Seq, fmt.Sprintf("the record was built from %s #%d, which the log does not have for this job", e.Type, e.Seq)})
		case m.Type != e.Type:
			out = append(out, difference{e.Seq, fmt.Sprintf("event #%d is a %s in the record, a %s in the log", e.Seq, e.Type, m.Type)})
		case e.Digest != "" && m.Digest != e.Digest:
			out = append(out, difference{e.Seq, fmt.Sprintf("%s #%d is not the event the record was built from: its digest is %s, the record's %s", e.Type, e.Seq, m.Digest, e.Digest)})
		}
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
