package events

import (
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
)

// Retention: what a job stored (its staged data and its output) is kept
// until the job's declared retention passes after its end, or until the
// submitter deletes it. Either way OUTPUT records Deleted: a deletion is a
// fact in the log like any other, and the hold record stays for ever.
//
//	(job over) ──▶ DeleteRequested ──▶ Deleted{cause: requested}
//	(job over) ── end + retention ──▶ Deleted{cause: expired}
//
// Both may come after the job's last event (see AfterEnd).

// DefaultRetention is how long a job's data and output are kept after it
// ends when its spec does not say.
const DefaultRetention = 7 * 24 * time.Hour

// What a deletion is about.
const (
	// WhatData is the job's staged input: what it declared under data:.
	WhatData = "data"
	// WhatOutput is what the job returned (every attempt's).
	WhatOutput = "output"
	// WhatAll, in a DeleteRequested only, is both.
	WhatAll = "all"
)

// Why something was deleted.
const (
	// CauseRequested: a DeleteRequested asked for it.
	CauseRequested = "requested"
	// CauseExpired: the job's retention passed.
	CauseExpired = "expired"
)

// DeleteRequested records that someone asked to delete what a job stored
// before its retention passes. OUTPUT deletes it once the job is over (at
// once if it is) and records Deleted. Asking again changes nothing.
type DeleteRequested struct {
	// What is WhatData, WhatOutput or WhatAll.
	What string `json:"what"`
	// By is who asked: the subject's last token, e31.job.<job>.delete.<by>,
	// bound by the server's permissions. Honoured only from the job's
	// submitter or the operator.
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// Deleted records that a job's staged data or its output was deleted: it
// can no longer be fetched, nor staged for another job with from_job. The
// bytes are removed from the store shortly after, except what other jobs
// still hold: the store is content addressed, so one blob may belong to
// several jobs.
type Deleted struct {
	// What is WhatData or WhatOutput.
	What string `json:"what"`
	// Cause is CauseRequested or CauseExpired.
	Cause string `json:"cause"`
	// By is who asked, for a requested deletion.
	By string `json:"by,omitempty"`
	// Files and Bytes are what the job held: its staged inputs, or the
	// output its last attempt returned.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// The versioned type names of retention events.
const (
	TypeDeleteRequested = "e31.job.delete_requested.v1"
	TypeDeleted         = "e31.job.deleted.v1"
)

func (*DeleteRequested) Type() string { return TypeDeleteRequested }
func (*Deleted) Type() string         { return TypeDeleted }

func (*DeleteRequested) sealed() {}
func (*Deleted) sealed()         {}

// A deletion's id names what it deletes, so that deleting the output and
// later the data are two events, and each is stored once.
func (d DeleteRequested) what() string { return d.What }
func (d Deleted) what() string         { return d.What }

// AfterEnd reports whether ev may follow its job's end: a request to delete
// what the job stored, and the deletion itself, come after the job is over
// (up to its retention later).
func AfterEnd(ev Event) bool {
	switch ev.(type) {
	case *DeleteRequested, *Deleted:
		return true
	}
	return false
}

// Retention is how long the job's data and output are kept after it ends.
func (s JobSpec) Retention() time.Duration {
	if s.RetentionSeconds <= 0 {
		return DefaultRetention
	}
	return time.Duration(s.RetentionSeconds * float64(time.Second))
}

// MaxListedFiles bounds how many files one output event lists. An event is
// at most MaxBodyBytes, and a job may return hundreds of thousands of files:
// the event lists the first ones and names the manifest that has them all.
const MaxListedFiles = 1000

// maxListedBytes bounds the JSON of the files an event lists, so that the
// rest of the event (the declaration, what is missing) still fits.
const maxListedBytes = 96 << 10

// Listed returns the first of files that one event lists: at most
// MaxListedFiles, and no more than fit in 96 KiB of an event's 256.
func Listed(files []OutputFile) []OutputFile {
	size := 0
	for i, f := range files {
		// The field names, quotes, separators and the size take under 64.
		size += jsonLen(f.Path) + len(f.Digest) + len(f.Mode) + 64
		if i == MaxListedFiles || size > maxListedBytes {
			return files[:i]
		}
	}
	return files
}

// jsonLen is how long s is as a JSON string's content, the way
// encoding/json escapes it.
func jsonLen(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			n += 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029' || r == utf8.RuneError:
			n += 6
		default:
			n += utf8.RuneLen(r)
		}
	}
	return n
}

// FileCount is the number of files collected, whether Files lists all of
// them or not.
func (c Collected) FileCount() int { return max(c.Count, len(c.Files)) }

// FileCount is the number of files returned, whether Files lists all of
// them or not.
func (r OutputReturned) FileCount() int { return max(r.Count, len(r.Files)) }

// Timers. The E31 stream holds facts and may not be purged, which message
// schedules need; so e31's timers live in a stream of their own. A timer is
// a scheduled message (ADR-51): stored on TimerSubjects under a schedule
// subject, it is published by the server at its time on the timer's due
// subject, where OUTPUT consumes it. Nothing polls.
const (
	// TimerStream holds e31's timers.
	TimerStream = "E31_TIMERS"
	// TimerDueTTL is how long a fired timer is kept. A service that was
	// down for longer rebuilds what it missed from the log.
	TimerDueTTL = 30 * 24 * time.Hour
)

// TimerStreamConfig is the configuration of the timer stream: message
// schedules need roll-ups (a new schedule for a subject replaces the old
// one) and per-message TTLs for the fired timers.
func TimerStreamConfig(o StreamOptions) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              TimerStream,
		Description:       "e31 timers: scheduled messages, such as a job's retention running out",
		Subjects:          []string{TimerSubjects},
		Storage:           jetstream.FileStorage,
		Replicas:          max(o.Replicas, 1),
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		AllowMsgSchedules: true,
		AllowRollup:       true,
		AllowMsgTTL:       true,
		Duplicates:        DuplicateWindow,
	}
}

// DeletedOf finds the deletion of what (WhatData or WhatOutput) in one
// job's history: a job whose output was deleted cannot be used as from_job.
func DeletedOf(history []Envelope, what string) (Envelope, bool) {
	for _, e := range history {
		if d, ok := e.Event.(*Deleted); ok && d.What == what {
			return e, true
		}
	}
	return Envelope{}, false
}

// DeletedReason says, for people, that and when something was deleted.
func DeletedReason(e Envelope) string {
	d, _ := e.Event.(*Deleted)
	if d == nil {
		return ""
	}
	why := "its retention passed"
	if d.Cause == CauseRequested {
		why = "on request"
		if d.By != "" {
			why += " of " + d.By
		}
	}
	return "its " + d.What + " was deleted at " + e.Time.UTC().Format(time.RFC3339) + ", " + why
}
