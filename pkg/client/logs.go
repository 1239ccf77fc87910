package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/stage"
)

// LogsOptions say which logs Logs writes, and where.
type LogsOptions struct {
	// Attempt is the attempt whose logs to write; 0 is the last.
	Attempt int
	// Follow writes them as the job writes them, until the attempt's
	// compute is released.
	Follow bool
	// Stdout and Stderr take the job's two streams.
	Stdout, Stderr io.Writer
}

// PartialLogsError says that Logs wrote all that is stored of an attempt's
// logs, and that this is not all of them.
type PartialLogsError struct {
	Job     string
	Attempt int
	// State is the job's state when the logs were read.
	State string
	// NodeStopped: the attempt is over, and its node stopped before it
	// stored the rest. Otherwise the attempt still runs.
	NodeStopped bool
}

func (e *PartialLogsError) Error() string {
	if e.NodeStopped {
		return fmt.Sprintf("the logs of %s attempt %d end early: its node stopped before it stored the rest", e.Job, e.Attempt)
	}
	return fmt.Sprintf("job %s is %s: this is only what is stored so far", e.Job, e.State)
}

// Logs writes what a job's attempt wrote to its stdout and stderr, as its
// node kept them in the submitter's data store: all of it up to the node's
// cap, past it the head and the tail. Without Follow, a log the node has
// not stored whole is written as far as it is, and *PartialLogsError says
// so. With Follow, it writes them as the job writes them (the node
// publishes what is new where only the submitter may listen), until the
// attempt's compute is released; a job that waits is followed from when it
// is held. A job that never ran, or whose output (with its logs) was
// deleted, wraps ErrNoLogs.
func (c *Client) Logs(ctx context.Context, job string, o LogsOptions) error {
	rec, err := c.Record(ctx, job)
	if err != nil {
		return err
	}
	attempt, follow := o.Attempt, o.Follow
	for attempt == 0 && len(rec.Attempts) == 0 {
		if !follow || rec.Over() {
			return kind(ErrNoLogs, fmt.Errorf("job %s is %s: it never ran, and has no logs", rec.Job, rec.State))
		}
		// Following a job that waits: its logs begin when it is held.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if rec, err = c.Record(ctx, job); err != nil {
			return err
		}
	}
	if attempt == 0 {
		attempt = rec.Attempts[len(rec.Attempts)-1].Attempt
	}
	if at := rec.Output.DeletedAt; at != nil {
		// The logs are part of the output: retention removes them with it.
		return kind(ErrNoLogs, fmt.Errorf("the logs of job %s were deleted with its output at %s", rec.Job, at.Format(time.RFC3339)))
	}
	store, err := c.Store(ctx, rec.Submitter)
	if err != nil {
		return err
	}
	f := &logFollower{store: store, job: rec.Job, attempt: attempt, out: o.Stdout, errOut: o.Stderr}
	if !follow {
		x, err := stage.ReadLogIndexOf(ctx, store, rec.Job, attempt, attemptLogs(rec, attempt))
		if err == nil {
			return f.fromIndex(ctx, x)
		}
		if !errors.Is(err, stage.ErrNotFound) {
			return err
		}
		// No index: the job runs (or its node was lost before it stored
		// the end). What its head has filled so far is there.
		if err := f.head(ctx); err != nil {
			return err
		}
		return &PartialLogsError{Job: rec.Job, Attempt: attempt, State: rec.State, NodeStopped: attemptOver(rec, attempt)}
	}
	// The node publishes what the job writes as it comes, where only the
	// submitter may listen, and under its own name, which no other node
	// may publish under: listen to the node the attempt is held on. Subscribe
	// first, then catch up with what is stored, so that nothing falls
	// between.
	live := make(chan *nats.Msg, 256)
	sub, err := c.nc.ChanSubscribe(events.LogSubject(rec.Submitter, rec.Job, attempt, attemptNode(rec, attempt)), live)
	if err != nil {
		return fmt.Errorf("follow the logs of %s: %w", rec.Job, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if x, err := stage.ReadLogIndexOf(ctx, store, rec.Job, attempt, attemptLogs(rec, attempt)); err == nil {
		return f.fromIndex(ctx, x)
	}
	if err := f.head(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-live:
			if err := f.live(ctx, m); err != nil {
				return err
			}
		case <-tick.C:
			if c.nc.IsClosed() {
				return fmt.Errorf("follow the logs of %s: the connection to e31 is closed", job)
			}
			// Over once the attempt's compute is released: then its
			// node has stored all of it.
			rec, err := c.Record(ctx, job)
			if err != nil || !attemptOver(rec, attempt) {
				continue
			}
			x, err := stage.ReadLogIndexOf(ctx, store, rec.Job, attempt, attemptLogs(rec, attempt))
			if err != nil {
				return &PartialLogsError{Job: rec.Job, Attempt: attempt, State: rec.State, NodeStopped: true}
			}
			return f.fromIndex(ctx, x)
		}
	}
}

// attemptLogs is what the record says the attempt wrote (its stop's logs),
// nil if it does not say.
func attemptLogs(rec *hold.HoldRecord, attempt int) *events.Logs {
	for _, a := range rec.Attempts {
		if a.Attempt == attempt {
			return a.Logs
		}
	}
	return nil
}

// attemptNode is the node attempt was held on.
func attemptNode(rec *hold.HoldRecord, attempt int) string {
	for _, a := range rec.Attempts {
		if a.Attempt == attempt {
			return a.Node
		}
	}
	return rec.Node
}

// attemptOver reports whether the attempt's compute is released (or the
// job is over without it).
func attemptOver(rec *hold.HoldRecord, attempt int) bool {
	for _, a := range rec.Attempts {
		if a.Attempt == attempt {
			return a.ReleasedAt != nil || rec.Over()
		}
	}
	return rec.Over()
}

// logFollower writes an attempt's logs, each byte once, from what is
// stored and what the node publishes.
type logFollower struct {
	store       stage.Store
	job         string
	attempt     int
	out, errOut io.Writer
	stdout      int64 // where each stream goes on
	stderr      int64
}

func (f *logFollower) at(stream string) (*int64, io.Writer) {
	if stream == stage.Stderr {
		return &f.stderr, f.errOut
	}
	return &f.stdout, f.out
}

// fromIndex writes the rest of a complete log.
func (f *logFollower) fromIndex(ctx context.Context, x stage.LogIndex) error {
	for _, stream := range []string{stage.Stdout, stage.Stderr} {
		pos, w := f.at(stream)
		var err error
		if *pos, err = stage.CopyLog(ctx, f.store, f.job, f.attempt, x, stream, *pos, w); err != nil {
			return err
		}
	}
	return nil
}

// head writes what the head of each stream has stored beyond what was
// written.
func (f *logFollower) head(ctx context.Context) error {
	for _, stream := range []string{stage.Stdout, stage.Stderr} {
		pos, _ := f.at(stream)
		pieces, err := stage.ReadLogHead(ctx, f.store, f.job, f.attempt, stream, *pos)
		if err != nil {
			return err
		}
		for _, p := range pieces {
			if err := f.write(p, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// live writes a piece the node published; what fell between it and what
// was written is looked for in the stored head first.
func (f *logFollower) live(ctx context.Context, m *nats.Msg) error {
	off, err := strconv.ParseInt(m.Header.Get(stage.LogOffsetHeader), 10, 64)
	if err != nil {
		return nil
	}
	p := stage.LogPiece{Stream: m.Header.Get(stage.LogStreamHeader), Offset: off, Bytes: m.Data}
	if pos, _ := f.at(p.Stream); p.Offset > *pos {
		if err := f.head(ctx); err != nil {
			return err
		}
	}
	return f.write(p, true)
}

// write writes what p has beyond what was written of its stream; with
// gaps, it says how much it skipped to reach p.
func (f *logFollower) write(p stage.LogPiece, gaps bool) error {
	pos, w := f.at(p.Stream)
	end := p.Offset + int64(len(p.Bytes))
	if end <= *pos || (p.Offset > *pos && !gaps) {
		return nil
	}
	if p.Offset > *pos {
		if _, err := fmt.Fprintf(w, "\n[e31: %d bytes of %s skipped]\n", p.Offset-*pos, p.Stream); err != nil {
			return err
		}
		*pos = p.Offset
	}
	if _, err := w.Write(p.Bytes[*pos-p.Offset:]); err != nil {
		return err
	}
	*pos = end
	return nil
}

// StderrTail returns the last n lines the job's last attempt wrote to
// stderr, or none if it wrote nothing or they cannot be read: what a user
// asks first about a job that failed.
func (c *Client) StderrTail(ctx context.Context, rec *hold.HoldRecord, n int) []string {
	if rec.Logs == nil || rec.Logs.StderrBytes == 0 || len(rec.Attempts) == 0 {
		return nil
	}
	store, err := c.Store(ctx, rec.Submitter)
	if err != nil {
		return nil
	}
	attempt := rec.Attempts[len(rec.Attempts)-1].Attempt
	x, err := stage.ReadLogIndexOf(ctx, store, rec.Job, attempt, attemptLogs(rec, attempt))
	if err != nil || len(x.Stderr.Chunks) == 0 {
		return nil
	}
	// The last chunk holds the last lines: the tail, or all of a short log.
	last := x.Stderr.Chunks[len(x.Stderr.Chunks)-1]
	b, err := stage.ReadLogChunk(ctx, store, rec.Job, attempt, stage.Stderr, last)
	if err != nil {
		return nil
	}
	lines := strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
	return lines[max(len(lines)-n, 0):]
}
