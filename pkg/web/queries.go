package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/lease"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
)

// askTimeout bounds one question to a query endpoint: the page renders
// what it has without the answer rather than hang.
const askTimeout = 3 * time.Second

// ask sends req to subject and decodes the answer into reply. The page asks
// as its own user (the operator or the auditor), who is answered about
// every job; it shows each viewer only its part. A service that answers
// busy (at one of its limits, or a ledger that must start again from
// another instance's checkpoint) is asked again, with backoff, until
// askTimeout: the page's own refreshes ask the same services at the same
// time, and a page of records is a question like any other.
func (p *Page) ask(ctx context.Context, subject string, req, reply any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	m, busy, err := query.RequestWhileBusy(ctx, p.js.Conn(), subject, b)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("nothing answers %s: is the service running?", subject)
	case err != nil && busy != "" && ctx.Err() != nil:
		return fmt.Errorf("%s: busy for %s: %s", subject, askTimeout, busy)
	case err != nil:
		return fmt.Errorf("%s: %w", subject, err)
	}
	// A page of records is up to a MiB: it is read twice only if it may
	// be an error.
	var head struct {
		Error string `json:"error"`
	}
	if bytes.Contains(m.Data, errorKey) && gojson.Unmarshal(m.Data, &head) == nil && head.Error != "" {
		return fmt.Errorf("%s: %s", subject, head.Error)
	}
	if err := gojson.Unmarshal(m.Data, reply); err != nil {
		return fmt.Errorf("%s: bad answer: %w", subject, err)
	}
	return nil
}

// errorKey is in every answer that is an error.
var errorKey = []byte(`"error":`)

// user is who the page asks as.
func (p *Page) user() string { return cmpOr(p.cfg.AskAs, events.Operator) }

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// record asks the ledger for a job's hold record, as of what the page has
// read of the log (so that it agrees with the timeline beside it).
func (p *Page) record(ctx context.Context, job string, seq uint64) (*hold.HoldRecord, error) {
	var reply wire.RecordReply
	err := p.ask(ctx, wire.LedgerSubject(p.user(), wire.EndpointRecord), wire.RecordRequest{Job: job, MinSeq: seq, Wait: 2 * time.Second}, &reply)
	if err != nil {
		return nil, err
	}
	if reply.Record == nil {
		return nil, fmt.Errorf("the ledger has no record of %s yet", job)
	}
	return reply.Record, nil
}

// why asks the scheduler why a job waits.
func (p *Page) why(ctx context.Context, job string) (wire.WhyReply, error) {
	var reply wire.WhyReply
	err := p.ask(ctx, wire.RentWhySubject(p.user()), wire.WhyRequest{Job: job}, &reply)
	return reply, err
}

// totals asks the ledger for each submitter's bill for a period.
func (p *Page) totals(ctx context.Context, since, until time.Time, submitter string) (wire.TotalsReply, error) {
	var reply wire.TotalsReply
	err := p.ask(ctx, wire.LedgerSubject(p.user(), wire.EndpointTotals), wire.TotalsRequest{Since: since, Until: until, Submitter: submitter}, &reply)
	return reply, err
}

// head asks the ledger how far it has read and its chain head.
func (p *Page) head(ctx context.Context) (wire.LedgerInfo, error) {
	var info wire.LedgerInfo
	err := p.ask(ctx, wire.LedgerSubject(p.user(), wire.EndpointHead), struct{}{}, &info)
	return info, err
}

// tailLines is how many lines of each stream a job's page shows.
const tailLines = 20

// logTail is the last lines of one attempt's stdout and stderr, as stored.
type logTail struct {
	Attempt        int
	Stdout, Stderr string
	Err            string
}

// logsTail reads the tail of the job's last attempt's logs from its
// submitter's store.
func (p *Page) logsTail(ctx context.Context, rec *hold.HoldRecord) *logTail {
	if len(rec.Attempts) == 0 {
		return nil
	}
	attempt := rec.Attempts[len(rec.Attempts)-1].Attempt
	t := &logTail{Attempt: attempt}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	store, err := stage.NewTenants(p.js, false).For(ctx, rec.Submitter)
	if err != nil {
		t.Err = err.Error()
		return t
	}
	x, err := stage.ReadLogIndexOf(ctx, store, rec.Job, attempt, rec.Attempts[len(rec.Attempts)-1].Logs)
	if errors.Is(err, stage.ErrNotFound) {
		t.Err = "nothing stored yet"
		return t
	}
	if err != nil {
		t.Err = err.Error()
		return t
	}
	for _, s := range []struct {
		name string
		to   *string
	}{{stage.Stdout, &t.Stdout}, {stage.Stderr, &t.Stderr}} {
		st := x.Stream(s.name)
		if st == nil || len(st.Chunks) == 0 {
			continue
		}
		// The last chunk holds the last lines: the tail, or all of a short
		// log.
		b, err := stage.ReadLogChunk(ctx, store, rec.Job, attempt, s.name, st.Chunks[len(st.Chunks)-1])
		if err != nil {
			t.Err = err.Error()
			continue
		}
		lines := strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
		*s.to = strings.Join(lines[max(len(lines)-tailLines, 0):], "\n")
	}
	return t
}

// nodeLease is what the leases bucket says of a node: the boot holding its
// lease and when it was last renewed.
type nodeLease struct {
	Boot    string
	Renewed time.Time
}

// leases reads the pool's leases and the scheduler's leader, with the
// bucket's lease time.
func (p *Page) leases(ctx context.Context) (map[string]nodeLease, string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	kv, err := p.js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		return nil, "", 0, fmt.Errorf("leases: %w", err)
	}
	ttl, _ := lease.TTL(ctx, kv)
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, "", ttl, fmt.Errorf("leases: %w", err)
	}
	out := map[string]nodeLease{}
	leader := ""
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return out, leader, ttl, fmt.Errorf("leases: %s: %w", k, err)
		}
		if node, ok := strings.CutPrefix(k, "node."); ok {
			out[node] = nodeLease{Boot: string(e.Value()), Renewed: e.Created()}
		} else if strings.HasPrefix(k, "leader.") {
			leader = string(e.Value())
		}
	}
	return out, leader, ttl, nil
}

// runAudit replays the log from its first event, as `e31 audit` does, and
// compares with the ledger's records; the result is kept for the audit's
// view.
func (p *Page) runAudit(ctx context.Context, by string) {
	start := p.now()
	res := &auditResult{At: start, By: by}
	defer func() {
		res.Took = p.now().Sub(start).Round(time.Millisecond)
		p.auditMu.Lock()
		p.audit, p.auditOn = res, false
		p.auditMu.Unlock()
		p.notify()
	}()
	info, err := p.head(ctx)
	if err != nil {
		res.Err = err.Error()
		return
	}
	// Forget: the page's audit holds sums of each ended job's record, not
	// every record of the history.
	rep, err := audit.New(audit.Options{LedgerHead: info.Head, Forget: true}).Run(ctx, p.js)
	res.Report = rep
	if err != nil {
		res.Err = err.Error()
		return
	}
	res.Compared = true
}
