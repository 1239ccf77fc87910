package client

import (
	"context"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/query/wire"
)

// Audit replays the event log from its first event with pkg/audit,
// rebuilding every hold record independently of the ledger, checks the
// hash chain passes through the ledger's head and through each of heads,
// and compares the rebuilt records with the ledger's. It reads the log
// itself: only the auditor and the operator may (ErrNotPermitted for
// others). The report's OK says whether nothing was found.
func (c *Client) Audit(ctx context.Context, heads []chain.Head) (*audit.Report, error) {
	if err := c.NeedLog("an audit"); err != nil {
		return nil, err
	}
	// The ledger's head is taken before the log is read, so the log read
	// covers it: the two chains must agree there.
	info, err := c.Head(ctx)
	if err != nil {
		return nil, err
	}
	au := audit.New(audit.Options{Heads: heads, LedgerHead: info.Head})
	if err := au.ReadStream(ctx, c.js); err != nil {
		return nil, err
	}
	rep := au.Finish()
	recs, err := c.AllRecords(ctx, wire.ListRequest{})
	if err != nil {
		return nil, err
	}
	rep.Compare(recs, true)
	return rep, nil
}
