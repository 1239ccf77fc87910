package main

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/auth"
)

// credsTLSCmd is `e31 creds tls`: flags and printing over auth.LoadOrMakeCA
// and CA.IssueServerCert.
func credsTLSCmd(a *app) *cobra.Command {
	var dir, out string
	var hosts []string
	var days int
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Make the TLS authority and the NATS servers' certificate, offline",
		Long:  help("creds-tls", "{ca}", auth.TLSCAOutFile, "{cert}", auth.TLSCertFile, "{key}", auth.TLSCertKeyFile),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || len(hosts) == 0 {
				return usageErr("--dir and --hosts are required")
			}
			if days < 1 {
				return usageErr("--days must be positive")
			}
			out = cmp.Or(out, dir)
			now := time.Now()
			ca, made, err := auth.LoadOrMakeCA(dir, now)
			if err != nil {
				return err
			}
			certPEM, keyPEM, err := ca.IssueServerCert(hosts, now, time.Duration(days)*24*time.Hour)
			if errors.Is(err, auth.ErrNoHosts) {
				return usageErr("--hosts: no host name or address")
			}
			if err != nil {
				return err
			}
			if err := auth.WriteServerTLS(out, ca, certPEM, keyPEM); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s the TLS authority in %s\n", madeOrKept[made], filepath.Join(dir, auth.TLSCAFile))
			fmt.Fprintf(a.out, "%s: for %s, valid until %s\n", filepath.Join(out, auth.TLSCertFile), strings.Join(hosts, ", "),
				now.Add(time.Duration(days)*24*time.Hour).UTC().Format(time.DateOnly))
			fmt.Fprintf(a.out, "clients: --tls-ca %s (or E31_TLS_CA)\n", filepath.Join(out, auth.TLSCAOutFile))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the keys directory: the authority's key is kept there")
	f.StringSliceVar(&hosts, "hosts", nil, "the servers' host names and IP addresses (comma separated)")
	f.StringVarP(&out, "out", "o", "", "where the certificate, its key and the authority's certificate go (default --dir)")
	f.IntVar(&days, "days", 825, "how long the servers' certificate is valid")
	return cmd
}
