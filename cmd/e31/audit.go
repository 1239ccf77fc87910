package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/nodecard"
	"github.com/e31net/e31/pkg/ops"
)

func auditCmd(a *app) *cobra.Command {
	var asJSON bool
	var from, records, cardsKey string
	var sinceHeads []string
	var every time.Duration
	var httpOpts httpOptions
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Rebuild every hold record from the event log, check the log is whole, compare with the ledger",
		Long:  help("audit"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The process audits and does little else.
			defer audit.TuneGC()()
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return usageErr("--cpuprofile: %v", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			ctx := cmd.Context()
			var heads []chain.Head
			for _, s := range sinceHeads {
				h, err := chain.ParseHead(s)
				if err != nil {
					return usageErr("--since-head: %v", err)
				}
				heads = append(heads, h)
			}
			var cards ed25519.PublicKey
			if cardsKey != "" {
				k, err := nodecard.ReadPublic(cardsKey)
				if err != nil {
					return usageErr("--cards-key: %v", err)
				}
				cards = k
			}
			var rep *audit.Report
			if from != "" {
				f, err := os.Open(from)
				if err != nil {
					return usageErr("--from: %v", err)
				}
				defer f.Close()
				au := audit.New(audit.Options{Heads: heads, Forget: records == "", Progress: countsFor(a.errOut), CardsKey: cards})
				if err := au.ReadExport(f); err != nil {
					var bad *audit.ExportError
					if errors.As(err, &bad) {
						return usageErr("%s: %v", from, err)
					}
					return fmt.Errorf("%s: %w", from, err)
				}
				rep = au.Finish()
				if records != "" {
					b, err := os.ReadFile(records)
					if err != nil {
						return usageErr("--records: %v", err)
					}
					recs, all, err := audit.ParseRecords(b)
					if err != nil {
						return usageErr("--records %s: %v", records, err)
					}
					rep.Compare(recs, all)
				}
			} else {
				if records != "" {
					return usageErr("--records compares a copy of the records with a copy of the log: give --from too")
				}
				err := a.with(ctx, func(c *client.Client) error {
					if err := c.NeedLog("e31 audit"); err != nil {
						return err
					}
					c.SetCardsKey(cards)
					if every > 0 {
						return c.AuditEveryServed(ctx, heads, every, a.log, func(g prometheus.Gatherer, ready map[string]ops.Check) (*ops.Server, error) {
							return httpOpts.listen(a.log, g, ready)
						})
					}
					var err error
					rep, err = c.AuditShowing(ctx, heads, countsFor(a.errOut))
					return err
				})
				if every > 0 || err != nil {
					return err
				}
			}
			if err := a.show(asJSON, rep, func(w io.Writer) error { return client.WriteAuditText(w, rep) }); err != nil {
				return err
			}
			if !rep.OK() {
				return silent(exitFailed)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&from, "from", "", "audit an export from 'e31 events --json' instead of the server")
	cmd.Flags().StringVar(&records, "records", "", "with --from: compare with these records ('e31 ledger --json')")
	cmd.Flags().StringVar(&cardsKey, "cards-key", "", "the operator's card key (cards.pub of 'e31 creds init', or its text ed25519:...): check every node's card against it")
	cmd.Flags().StringArrayVar(&sinceHeads, "since-head", nil, "SEQ:HASH from 'e31 ledger --head': prove nothing at or before SEQ changed (repeatable)")
	cmd.Flags().DurationVar(&every, "every", 0, "audit again and again, this long apart, until interrupted, telling each result in the log and on --http's /metrics (e31_audit_*)")
	httpOpts.flags(cmd.Flags(), "")
	// For `e31 bench ledger --cpuprofile`, which runs this command in a
	// process of its own: not something an auditor needs to see.
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the audit to this file")
	_ = cmd.Flags().MarkHidden("cpuprofile")
	return cmd
}
