package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
)

func logsCmd(a *app) *cobra.Command {
	var attempt, tail int
	var follow, failed, asJSON bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Write a job's stdout to stdout and its stderr to stderr (a sweep's failed jobs' stderr with --failed)",
		Long:  help("logs"),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.with(ctx, func(c *client.Client) error {
				if failed {
					return a.failedLogs(ctx, c, args[0], tail, asJSON)
				}
				err := c.Logs(ctx, args[0], client.LogsOptions{Attempt: attempt, Follow: follow, Stdout: a.out, Stderr: a.errOut})
				if sweepOf(ctx, c, args[0], err) {
					return usageErr("%s is a sweep: e31 logs %s --failed shows the stderr of each of its jobs that failed; a job's logs take its id", args[0], args[0])
				}
				var partial *client.PartialLogsError
				if !errors.As(err, &partial) {
					return err
				}
				// All that is stored is written: say why that is not all.
				if partial.NodeStopped {
					fmt.Fprintf(a.errOut, "e31: %v\n", partial)
				} else {
					fmt.Fprintf(a.errOut, "e31: %v (e31 logs --follow %s)\n", partial, partial.Job)
				}
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&attempt, "attempt", 0, "the attempt whose logs to write (default: the last)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "write them as the job writes them, until its compute is released")
	cmd.Flags().BoolVar(&failed, "failed", false, "ID is a sweep's: the last lines of the stderr of each of its jobs that did not succeed, to stdout")
	cmd.Flags().IntVar(&tail, "tail", 10, "with --failed: how many lines of each")
	cmd.Flags().BoolVar(&asJSON, "json", false, "with --failed: print them as JSON")
	return cmd
}
