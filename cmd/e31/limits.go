package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
)

func limitsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Show your limits (data, queued jobs, submissions a minute, images) and your data usage",
		Long:  help("limits"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			return a.with(ctx, func(c *client.Client) error {
				r, err := c.Limits(ctx)
				if err != nil {
					return err
				}
				return a.show(asJSON, r, r.WriteText)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
