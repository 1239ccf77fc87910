package retention

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// Root is stored data a job holds: one file, or one folder (by the digest
// of its manifest). A job's staged inputs and its output are roots; the
// objects they are stored in are found by expanding them (stage.Expander).
type Root struct {
	// Tenant is the submitter in whose store the root is.
	Tenant string
	Kind   string // stage.KindFile or stage.KindDir
	Digest string
}

// Held is what one job keeps in the store, as the log tells it. Its maps
// are nil until something is put in them: most jobs hold little, and the
// projection holds every job still within its retention. Nothing in it
// shares memory with the events it was folded from: a string of a decoded
// event may share the buffer the whole event was read into, which would
// then stay as long as the job.
type Held struct {
	Job       string
	Name      string
	Submitter string
	// Retention is how long the job's data and output live after its end.
	Retention time.Duration
	// Over is set once the job ended, at End.
	Over bool
	End  time.Time

	// Data and Output are the roots the job holds, until they are deleted.
	Data, Output map[Root]bool
	// Logs are the attempts that ran, in order, whose logs (what they
	// wrote to stdout and stderr, stage.JobLog) may be stored: they are
	// part of the output, and go with it. Logs are not shared, so they are
	// not counted.
	Logs []int
	// What the submitter sees: the staged inputs, and what the last
	// attempt returned.
	DataFiles, OutputFiles int
	DataBytes, OutputBytes int64

	// Requested says what a DeleteRequested asked to delete (and who).
	Requested Requests
	// Deleted says when each of data and output was deleted.
	Deleted Deletions
	// Dropped are the roots deleted: their objects go at the next sweep,
	// unless another job holds them.
	Dropped map[Root]bool
	// DroppedLogs are the attempts, in order, whose logs were deleted
	// with the output: they leave the store at the next sweep.
	DroppedLogs []int

	// holder is the node the last attempt held (holderAttempt) was held
	// on: only it speaks for the attempt (events.FromHolder).
	holder        string
	holderAttempt int
	// running says the attempt held last has started and nothing ended it
	// yet: only then does a save of it count (events.Saves).
	running bool
	// saves is the root of each attempt's last checkpoint save that
	// counts: part of the output, kept and deleted with it. A save
	// replaces its attempt's one before; once the job succeeded, only the
	// last save of all is kept.
	saves map[int]Root

	// tombstone says the job is over, holds nothing and waits in
	// Refs.deleted to be forgotten.
	tombstone bool
	// first is the sequence of the job's first event here: a projection
	// that reads the log from the least first of the jobs it keeps
	// knows all they hold (see Checkpoint).
	first uint64
}

// Requests says what DeleteRequested events asked to delete of a job:
// its data, its output, and who asked first for each.
type Requests struct {
	Data, Output     bool
	DataBy, OutputBy string
}

// By is who asked to delete what (WhatData or WhatOutput), and whether
// anyone did.
func (q *Requests) By(what string) (by string, asked bool) {
	switch what {
	case events.WhatData:
		return q.DataBy, q.Data
	case events.WhatOutput:
		return q.OutputBy, q.Output
	}
	return "", false
}

// ask records that by asked to delete what, unless someone did first.
func (q *Requests) ask(what, by string) {
	switch {
	case what == events.WhatData && !q.Data:
		q.Data, q.DataBy = true, strings.Clone(by)
	case what == events.WhatOutput && !q.Output:
		q.Output, q.OutputBy = true, strings.Clone(by)
	}
}

// Deletions says when each of a job's data and output was deleted: zero
// while it was not.
type Deletions struct {
	Data, Output time.Time
}

// At is when what (WhatData or WhatOutput) was deleted, and whether it was.
func (d *Deletions) At(what string) (time.Time, bool) {
	at := d.Output
	if what == events.WhatData {
		at = d.Data
	}
	return at, !at.IsZero()
}

// record records that what (WhatData or WhatOutput) was deleted at at, and
// reports whether that is news: not for a second deletion, nor for one that
// names neither.
func (d *Deletions) record(what string, at time.Time) bool {
	switch {
	case what == events.WhatData && d.Data.IsZero():
		d.Data = at
	case what == events.WhatOutput && d.Output.IsZero():
		d.Output = at
	default:
		return false
	}
	return true
}

// Any reports whether anything was deleted.
func (d *Deletions) Any() bool { return !d.Data.IsZero() || !d.Output.IsZero() }

// Last is when the last deletion was; zero if there was none.
func (d *Deletions) Last() time.Time {
	if d.Data.After(d.Output) {
		return d.Data
	}
	return d.Output
}

// Expires is when the job's data and output are due to be deleted; zero
// while the job runs.
func (h *Held) Expires() time.Time {
	if !h.Over {
		return time.Time{}
	}
	return h.End.Add(h.Retention)
}

// holds reports whether the job still holds something of what (WhatData or
// WhatOutput) that is not deleted.
func (h *Held) holds(what string) bool {
	if _, gone := h.Deleted.At(what); gone {
		return false
	}
	return len(h.roots(what)) > 0 || what == events.WhatOutput && len(h.Logs) > 0
}

func (h *Held) roots(what string) map[Root]bool {
	if what == events.WhatData {
		return h.Data
	}
	return h.Output
}

// Timer kinds OUTPUT schedules.
const (
	// timerExpire fires when a job's retention passes.
	timerExpire = "expire"
	// timerDelete fires at once for a deletion a submitter asked for.
	timerDelete = "delete"
	// timerSweep fires a grace period after a deletion: the objects no
	// live job holds any more leave the store.
	timerSweep = "sweep"
)

// Timer asks for work on a job at a time: a scheduled message.
type Timer struct {
	Kind string
	Job  string
	At   time.Time
}

// Refs is OUTPUT's projection of the log: for every job, the stored data it
// holds, and for every root, how many (job, data or output) hold it — the
// reference counts that say what a deletion may remove, since one blob may
// belong to many jobs. It is rebuilt from the log on every start. Applying
// an event at or below the last applied sequence changes nothing. It is not
// safe for concurrent use.
type Refs struct {
	jobs    map[string]*Held
	count   map[Root]int
	applied uint64

	// forget, once set (Forget), drops the jobs retention needs no more.
	forget      bool
	keepDeleted time.Duration
	// deleted lists the jobs that are over and hold nothing any more,
	// with the time of their last deletion, oldest first: each is
	// forgotten keepDeleted after it.
	deleted []tombstone
}

// tombstone is a job whose data and output are all deleted, kept a while
// so that what was deleted, and when, can still be asked of OUTPUT.
type tombstone struct {
	job string
	at  time.Time
}

// NewRefs returns an empty projection that keeps every job it sees.
func NewRefs() *Refs {
	return &Refs{jobs: map[string]*Held{}, count: map[Root]int{}}
}

// Forget makes r keep only what retention still needs, so that it is
// bounded by the jobs within their retention rather than by every job
// there ever was. A job that is over and holds nothing is forgotten: at
// once if nothing of it was ever deleted (it never stored anything), or
// keepDeleted after its last deletion, until when the stored endpoint
// still shows what was deleted and when. Events about a job it does not
// know that do not start one (a late request to delete, a deletion, a
// cancel) are ignored: the job holds nothing. A sweep of a job forgotten
// reads what to sweep from the job's log (Service.Sweep).
func (r *Refs) Forget(keepDeleted time.Duration) {
	r.forget, r.keepDeleted = true, keepDeleted
}

// Tracked is how many jobs r keeps: what its heap grows with.
func (r *Refs) Tracked() int { return len(r.jobs) }

// Applied is the last sequence applied.
func (r *Refs) Applied() uint64 { return r.applied }

// Job returns what a job holds, or nil.
func (r *Refs) Job(id string) *Held { return r.jobs[id] }

// Count is how many (job, data or output) hold root.
func (r *Refs) Count(root Root) int { return r.count[root] }

// Live returns every root some job holds.
func (r *Refs) Live() map[Root]bool {
	live := make(map[Root]bool, len(r.count))
	for root := range r.count {
		live[root] = true
	}
	return live
}

// Jobs returns every job, in no order.
func (r *Refs) Jobs() []*Held { return slices.Collect(maps.Values(r.jobs)) }

// Apply folds one event in and returns the timers it calls for: the
// retention of a job that ended, a deletion asked for a job that is over.
// The caller schedules them when it follows the log live, and ignores them
// while it replays history (see Pending).
func (r *Refs) Apply(env events.Envelope) []Timer {
	if env.Seq != 0 && env.Seq <= r.applied {
		return nil
	}
	r.applied = max(r.applied, env.Seq)
	if events.IsNodeEvent(env.Event) {
		return nil
	}
	h := r.jobs[env.Subject]
	if h == nil {
		switch env.Event.(type) {
		case *events.JobRequested, *events.JobSubmitted:
		default:
			if r.forget {
				return nil // a job forgotten, or never started: it holds nothing
			}
		}
		// Strings kept are copied: a decoded event's strings share the
		// buffers it was read into, which would stay as long as the job.
		h = &Held{Job: strings.Clone(env.Subject), Retention: events.DefaultRetention, first: env.Seq}
		r.jobs[h.Job] = h
	}
	timers := r.apply(h, env)
	if r.forget {
		r.settle(h)
		r.prune(env.Time)
	}
	return timers
}

// settle forgets h, or marks it to be forgotten, once it is over and holds
// nothing: see Forget.
func (r *Refs) settle(h *Held) {
	if !h.Over || h.holds(events.WhatData) || h.holds(events.WhatOutput) || r.jobs[h.Job] != h {
		return
	}
	last := h.Deleted.Last()
	if last.IsZero() {
		delete(r.jobs, h.Job)
		return
	}
	if !h.tombstone {
		h.tombstone = true
		r.deleted = append(r.deleted, tombstone{job: h.Job, at: last})
	}
}

// prune forgets the jobs whose last deletion is keepDeleted before now.
func (r *Refs) prune(now time.Time) {
	n := 0
	for n < len(r.deleted) && !now.Before(r.deleted[n].at.Add(r.keepDeleted)) {
		if h := r.jobs[r.deleted[n].job]; h != nil && h.tombstone {
			delete(r.jobs, h.Job)
		}
		n++
	}
	if n > 0 {
		r.deleted = slices.Delete(r.deleted, 0, n)
	}
}

// Swept tells r that what job dropped left the store: past its deletion, a
// job that holds nothing more needs nothing of retention but its
// tombstone (see Forget).
func (r *Refs) Swept(job string, roots []Root, logs []int, now time.Time) {
	h := r.jobs[job]
	if h == nil {
		return
	}
	for _, root := range roots {
		delete(h.Dropped, root)
	}
	h.DroppedLogs = slices.DeleteFunc(h.DroppedLogs, func(attempt int) bool { return slices.Contains(logs, attempt) })
	if len(h.Dropped) == 0 {
		h.Dropped = nil
	}
	if len(h.DroppedLogs) == 0 {
		h.DroppedLogs = nil
	}
	if r.forget {
		r.settle(h)
		r.prune(now)
	}
}

// fromHolder reports whether ev, a node's event about the attempt of
// hold, came from the node that attempt was held on.
func (h *Held) fromHolder(ev events.Event, hold events.Hold) bool {
	return hold.Attempt == h.holderAttempt && events.FromHolder(ev, h.holder)
}

// apply folds env into h, what its job holds.
func (r *Refs) apply(h *Held, env events.Envelope) []Timer {
	switch e := env.Event.(type) {
	case *events.JobRequested:
		// Only the job's first request says whose it is: anyone may
		// publish another under its id, and must not make it theirs.
		if h.Submitter != "" {
			return nil
		}
		h.Submitter, h.Name, h.Retention = strings.Clone(e.Submitter), strings.Clone(e.Spec.Name), e.Spec.Retention()
		r.holdData(h, e.Spec.Data)
	case *events.JobSubmitted:
		h.Submitter, h.Name, h.Retention = strings.Clone(e.Submitter), strings.Clone(e.Spec.Name), e.Spec.Retention()
		r.holdData(h, e.Spec.Data)
	case *events.ComputeHeld:
		h.holder, h.holderAttempt, h.running = strings.Clone(e.Node), e.Attempt, false
	case *events.RunStarted:
		if !h.fromHolder(e, e.Hold) {
			return nil
		}
		h.running = true
		holdLogs(h, e.Attempt)
	case *events.CheckpointSaved:
		if !h.fromHolder(e, e.Hold) || !h.running {
			return nil // another node's, or too late: it counts for nothing
		}
		r.holdSave(h, e.Attempt, e.Manifest)
	case *events.HoldLost, *events.HoldExpired:
		h.running = false
	case *events.RunStopped:
		if !h.fromHolder(e, e.Hold) {
			// A node's word about an attempt held elsewhere: the output
			// and logs it names are no part of the job.
			return nil
		}
		h.running = false
		if stage.EmptyLog(e.Logs) {
			// An attempt that wrote nothing stored no log (stage.JobLog):
			// there is nothing of it to keep, and a job that holds
			// nothing else needs no retention timer, one durable write
			// fewer for every trivial job.
			h.Logs = slices.DeleteFunc(h.Logs, func(attempt int) bool { return attempt == e.Attempt })
		} else {
			holdLogs(h, e.Attempt)
		}
		r.holdOutput(h, e.Output.Manifest, e.Output.Files)
	case *events.OutputReturned:
		r.holdOutput(h, e.Manifest, e.Files)
		h.OutputFiles, h.OutputBytes = e.FileCount(), e.Bytes
	case *events.DeleteRequested:
		if !events.MayCancel(e.By, h.Submitter) {
			// Only the submitter (or the operator) decides; anyone else's
			// request is in the log and changes nothing.
			return nil
		}
		for _, what := range whats(e.What) {
			h.Requested.ask(what, e.By)
		}
		if h.Over {
			return []Timer{{Kind: timerDelete, Job: h.Job, At: env.Time}}
		}
	case *events.Deleted:
		if !h.Deleted.record(e.What, env.Time) {
			return nil
		}
		for root := range h.roots(e.What) {
			r.release(root)
			h.Dropped = put(h.Dropped, root, true)
		}
		if e.What == events.WhatData {
			h.Data = nil
		} else {
			h.Output = nil
		}
		if e.What == events.WhatOutput {
			for _, attempt := range h.Logs {
				h.DroppedLogs = insertSorted(h.DroppedLogs, attempt)
			}
			h.Logs = nil
		}
	default:
		if rel, ok := env.Event.(*events.ComputeReleased); ok {
			h.running = false
			if rel.Final && rel.Outcome == events.Succeeded {
				r.keepLastSave(h)
			}
		}
		if !events.Terminal(env.Event) || h.Over {
			return nil
		}
		h.Over, h.End = true, env.Time
		return r.Pending(h)
	}
	return nil
}

// holdSave holds an attempt's checkpoint save as part of the output, in
// place of the attempt's save before it, which is dropped: a later attempt
// resumes from, and checkpoint_of stages, the last save alone.
func (r *Refs) holdSave(h *Held, attempt int, manifest string) {
	if _, gone := h.Deleted.At(events.WhatOutput); gone || manifest == "" {
		return
	}
	root := Root{Tenant: h.Submitter, Kind: stage.KindDir, Digest: manifest}
	if old, ok := h.saves[attempt]; ok && old != root {
		delete(h.saves, attempt)
		r.dropOutput(h, old)
	}
	h.Output = r.hold(h.Output, root)
	h.saves = put(h.saves, attempt, root)
}

// keepLastSave drops every checkpoint save but the last once the job
// succeeded: nothing will resume from them.
func (r *Refs) keepLastSave(h *Held) {
	last := 0
	for a := range h.saves {
		last = max(last, a)
	}
	for a, root := range h.saves {
		if a != last {
			delete(h.saves, a)
			r.dropOutput(h, root)
		}
	}
}

// dropOutput lets go of one root of the output: its objects go at the
// job's next sweep, unless another root (of this job or another) holds
// them.
func (r *Refs) dropOutput(h *Held, root Root) {
	if !h.Output[root] {
		return
	}
	for _, other := range h.saves {
		if other == root {
			return // still another attempt's last save
		}
	}
	delete(h.Output, root)
	r.release(root)
	h.Dropped = put(h.Dropped, root, true)
}

// Pending is the timers a job that is over needs: its retention, while it
// holds anything, and at once a deletion it was asked for.
func (r *Refs) Pending(h *Held) []Timer {
	if !h.Over {
		return nil
	}
	var out []Timer
	if h.holds(events.WhatData) || h.holds(events.WhatOutput) {
		out = append(out, Timer{Kind: timerExpire, Job: h.Job, At: h.Expires()})
	}
	for _, what := range []string{events.WhatData, events.WhatOutput} {
		if _, asked := h.Requested.By(what); asked && h.holds(what) {
			out = append(out, Timer{Kind: timerDelete, Job: h.Job, At: h.End})
			break
		}
	}
	return out
}

// whats is what a request names: WhatAll is both.
func whats(what string) []string {
	if what == events.WhatAll {
		return []string{events.WhatData, events.WhatOutput}
	}
	return []string{what}
}

// holdData records the job's staged inputs. A request and the submission
// name the same data, except that SUBMIT resolves from_job into a folder;
// what either names is held. What the submitter sees is the submission's.
func (r *Refs) holdData(h *Held, data []events.DataRef) {
	if _, gone := h.Deleted.At(events.WhatData); gone {
		return
	}
	h.DataFiles, h.DataBytes = 0, 0
	for _, d := range data {
		if d.Digest == "" {
			continue // from_job, not resolved yet
		}
		h.Data = r.hold(h.Data, Root{Tenant: h.Submitter, Kind: d.Kind, Digest: d.Digest})
		h.DataBytes += d.Bytes
		if d.Kind == stage.KindDir {
			h.DataFiles += d.Files
		} else {
			h.DataFiles++
		}
	}
}

// holdLogs records that an attempt ran, and so may have stored its log,
// unless the output (which the logs are part of) was deleted already.
func holdLogs(h *Held, attempt int) {
	if _, gone := h.Deleted.At(events.WhatOutput); gone || attempt <= 0 {
		return
	}
	h.Logs = insertSorted(h.Logs, attempt)
}

// insertSorted adds n to the sorted set s, unless it is in it already,
// and returns s.
func insertSorted(s []int, n int) []int {
	i, found := slices.BinarySearch(s, n)
	if found {
		return s
	}
	return slices.Insert(s, i, n)
}

// holdOutput records output: its manifest, which names every file, or the
// files listed, for an event written before manifests.
func (r *Refs) holdOutput(h *Held, manifest string, files []events.OutputFile) {
	if _, gone := h.Deleted.At(events.WhatOutput); gone {
		return
	}
	if manifest != "" {
		h.Output = r.hold(h.Output, Root{Tenant: h.Submitter, Kind: stage.KindDir, Digest: manifest})
		return
	}
	for _, f := range files {
		h.Output = r.hold(h.Output, Root{Tenant: h.Submitter, Kind: stage.KindFile, Digest: f.Digest})
	}
}

// hold adds root to set, made if nil, and counts it once; it returns set.
func (r *Refs) hold(set map[Root]bool, root Root) map[Root]bool {
	if root.Digest == "" || set[root] {
		return set
	}
	switch root.Kind { // the same strings for every root, not the event's
	case stage.KindDir:
		root.Kind = stage.KindDir
	case stage.KindFile:
		root.Kind = stage.KindFile
	default:
		root.Kind = strings.Clone(root.Kind)
	}
	root.Digest = strings.Clone(root.Digest)
	set = put(set, root, true)
	r.count[root]++
	return set
}

// put sets m[k] = v, making m if it is nil, and returns m.
func put[K comparable, V any](m map[K]V, k K, v V) map[K]V {
	if m == nil {
		m = map[K]V{}
	}
	m[k] = v
	return m
}

func (r *Refs) release(root Root) {
	if r.count[root]--; r.count[root] <= 0 {
		delete(r.count, root)
	}
}
