package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/cmd/e31/internal/audit"
	"github.com/e31net/e31/pkg/api"
	"github.com/e31net/e31/pkg/events"
)

func auditCmd(a *app) *cobra.Command {
	var asJSON bool
	var from string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Rebuild every hold record from the event log and compare with the ledger",
		Long: `Replay the event log from its first event, rebuild every hold record
independently of the ledger, and compare them field by field with the ledger's.
Also checks that the log is whole: every job's events in a legal order, no
event stored twice, every hold of a finished job released, and no node ever
held beyond its capacity. Exit status 0 only if nothing was found.

With --from FILE, audits an export made with 'e31 events --json' with no server
at all (records are then rebuilt and the log checked, but there is no ledger to
compare with).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			au := audit.New()
			var rep *audit.Report
			if from != "" {
				f, err := os.Open(from)
				if err != nil {
					return usageErr("--from: %v", err)
				}
				defer f.Close()
				sc := bufio.NewScanner(f)
				sc.Buffer(make([]byte, 1<<20), 4<<20)
				line := 0
				for sc.Scan() {
					line++
					var m rawEvent
					if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
						return usageErr("%s:%d: not an exported event: %v", from, line, err)
					}
					au.Add(audit.Raw{Seq: m.Seq, Subject: m.Subject, Headers: natsHeader(m.Headers), Body: m.Body})
				}
				if err := sc.Err(); err != nil {
					return usageErr("%s: %v", from, err)
				}
				rep = au.Finish()
			} else {
				c, err := a.dial(ctx)
				if err != nil {
					return err
				}
				defer c.close()
				err = c.scan(ctx, []string{events.JobSubjects, events.NodeSubjects}, false, func(m rawEvent) error {
					au.Add(audit.Raw{Seq: m.Seq, Subject: m.Subject, Headers: natsHeader(m.Headers), Body: m.Body})
					return nil
				})
				if err != nil {
					return err
				}
				rep = au.Finish()
				recs, err := c.allRecords(ctx, api.ListRequest{})
				if err != nil {
					return err
				}
				rep.Compare(recs)
			}
			if asJSON {
				if err := writeJSON(a.out, rep); err != nil {
					return err
				}
			} else {
				for _, f := range rep.Findings {
					where := f.Job
					if f.Seq > 0 {
						where += fmt.Sprintf(" #%d", f.Seq)
					}
					fmt.Fprintf(a.out, "%-14s %s: %s\n", f.Kind, where, f.Detail)
				}
				fmt.Fprintln(a.out, rep.Summary())
			}
			if !rep.OK() {
				return silent(exitFailed)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&from, "from", "", "audit an export from 'e31 events --json' instead of the server")
	return cmd
}
