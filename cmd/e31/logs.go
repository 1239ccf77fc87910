package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
)

func logsCmd(a *app) *cobra.Command {
	var attempt int
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Write a job's stdout to stdout and its stderr to stderr",
		Long:  help("logs"),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.with(cmd.Context(), func(c *client.Client) error {
				err := c.Logs(cmd.Context(), args[0], client.LogsOptions{Attempt: attempt, Follow: follow, Stdout: a.out, Stderr: a.errOut})
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
	return cmd
}
