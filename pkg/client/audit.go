package client

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/metrics"
)

// Audit replays the event log from its first event with pkg/audit,
// rebuilding every hold record independently of the ledger, checks the
// hash chain passes through the ledger's head and through each of heads,
// and compares the rebuilt records with the ledger's. It reads the log
// itself: only the auditor and the operator may (ErrNotPermitted for
// others). The report's OK says whether nothing was found.
func (c *Client) Audit(ctx context.Context, heads []chain.Head) (*audit.Report, error) {
	return c.AuditShowing(ctx, heads, nil)
}

// AuditShowing is Audit telling progress, if not nil, how far it has come:
// the log's messages read, then the ledger's records compared (of as many
// as the log has jobs).
func (c *Client) AuditShowing(ctx context.Context, heads []chain.Head, progress audit.Progress) (*audit.Report, error) {
	if err := c.NeedLog("an audit"); err != nil {
		return nil, err
	}
	// The ledger's head is taken before the log is read, so the log read
	// covers it: the two chains must agree there.
	info, err := c.Head(ctx)
	if err != nil {
		return nil, err
	}
	// Forget: the audit keeps sums of each record once its job is over,
	// not the record, and compares through them (audit.Auditor.Run).
	au := audit.New(audit.Options{Heads: heads, LedgerHead: info.Head, Forget: true, Progress: progress, CardsKey: c.cardsKey})
	// Credentials issued before the audit read the ledger's bucket are
	// refused there: said at once, and how to mend it. Its first request
	// is the bucket's stream info; the checkpoint's get from the bucket's
	// leader comes later.
	bucket := events.KVStream(events.LedgerBucket)
	gctx, done := c.Guard(ctx, "$JS.API.STREAM.MSG.GET."+bucket, "$JS.API.STREAM.INFO."+bucket)
	rep, err := au.Run(gctx, c.js)
	done()
	if errors.Is(context.Cause(gctx), nats.ErrPermissionViolation) {
		return nil, fmt.Errorf("%w; an auditor's credentials issued before e31 audit read the ledger's bucket must be issued again (e31 creds user --role auditor)",
			c.refused(gctx, "compare with the ledger's records", err))
	}
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// SetCardsKey gives the operator's card key (cards.pub of `e31 creds
// init`) to the audits this client makes: each node's card is checked
// against it, and each stop against the key of its node's card. Without
// it, an audit takes each card's key as the node's. Call it before
// auditing, not while an audit runs.
func (c *Client) SetCardsKey(key ed25519.PublicKey) { c.cardsKey = key }

// AuditEvery audits every interval until ctx ends: what a deployment runs
// so that a log or ledger gone wrong pages someone (e31_audit_findings in
// m). Each audit's summary and findings go to log; an audit that cannot
// run to its end is tried again at the next interval.
func (c *Client) AuditEvery(ctx context.Context, heads []chain.Head, every time.Duration, m *metrics.Audit, log *slog.Logger) {
	for {
		rep, err := c.Audit(ctx, heads)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			m.Audited(0, time.Now(), err)
			log.Warn("the audit could not run to its end; trying again at the next", "in", every, "err", err)
		default:
			m.Audited(len(rep.Findings), time.Now(), nil)
			for _, f := range rep.Findings {
				log.Error("audit finding", "kind", f.Kind, "job", f.Job, "seq", f.Seq, "detail", f.Detail)
			}
			log.Info("audited", "ok", rep.OK(), "summary", rep.Summary(), "last_seq", rep.LastSeq)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
