package main

import (
	"cmp"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
)

func credsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "creds",
		Short: "Make the keys and credentials of a deployed e31",
		Long:  help("creds"),
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(credsInitCmd(a), credsUserCmd(a), credsNodeCmd(a), credsTLSCmd(a), credsRevokeCmd(a), credsPushCmd(a), credsShowCmd(a))
	return cmd
}

// roleNode is what `e31 creds user --role` calls a run node: the service
// run, named after its node.
const roleNode = "node"

// madeOrKept says whether keys were made now or kept from before.
var madeOrKept = map[bool]string{true: "made", false: "kept"}

func credsInitCmd(a *app) *cobra.Command {
	var dir, resolverDir string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Make the operator, account and signing keys, the account JWT and a server config",
		Long:  help("creds-init", "{conf}", auth.ServerConfFile),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usageErr("--dir is required")
			}
			keys, created, err := auth.InitKeys(dir)
			if err != nil {
				return usageErr("%v", err)
			}
			if err := keys.WriteServerFiles(dir, resolverDir); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s the keys in %s\n", madeOrKept[created], dir)
			fmt.Fprintf(a.out, "account %s: %s\n", auth.AccountName, keys.AccountKey())
			fmt.Fprintf(a.out, "account %s: %s (submitters)\n", auth.TenantsAccountName, keys.TenantsAccountKey())
			fmt.Fprintf(a.out, "account %s: %s (run nodes)\n", auth.NodesAccountName, keys.NodesAccountKey())
			fmt.Fprintf(a.out, "server config: %s (include it from each nats-server's config)\n", filepath.Join(dir, auth.ServerConfFile))
			fmt.Fprintf(a.out, "next: e31 creds user --dir %s --role operator --name operator -o operator.creds\n", dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "where the keys are kept (made 0700; every key file 0600)")
	cmd.Flags().StringVar(&resolverDir, "resolver-dir", "/data/jwt", "where each server keeps account JWTs (in the server config)")
	return cmd
}

func credsUserCmd(a *app) *cobra.Command {
	var dir, role, name, service, out string
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Make one identity's credentials file",
		Long:  help("creds-user"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || out == "" {
				return usageErr("--dir and -o are required")
			}
			id := auth.Identity{Role: auth.Role(role), Name: name, Service: service}
			if role == roleNode {
				// A run node: the service run, named after its node,
				// in the NODES account.
				if service != "" && service != auth.RunService {
					return usageErr("--role node is the service run: no --service %s", service)
				}
				id = auth.Identity{Role: auth.Service, Service: auth.RunService, Name: name}
			}
			if err := id.Validate(); err != nil {
				return usageErr("%v", err)
			}
			keys, err := auth.LoadKeys(dir)
			if err != nil {
				return usageErr("%v (make them with 'e31 creds init --dir %s')", err, dir)
			}
			creds, err := keys.Issue(id, expires)
			if err != nil {
				return err
			}
			if err := creds.WriteFile(out); err != nil {
				return err
			}
			key, _ := creds.UserKey()
			fmt.Fprintf(a.out, "%s: %s (user %s)\n", out, id, key)
			if id.Role == auth.Submitter {
				fmt.Fprintf(a.out, "its data bucket %s is made by: e31 setup --submitter %s (as the operator)\n", events.DataBucketFor(id.Name), id.Name)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the keys directory of 'e31 creds init'")
	f.StringVar(&role, "role", string(auth.Submitter), "submitter, node, auditor, operator or service")
	f.StringVar(&name, "name", "", "the identity's name: a submitter's id, a node's id, an instance's name")
	f.StringVar(&service, "service", "", "with --role service: submit, rent, run, output, release or ledger")
	f.StringVarP(&out, "output", "o", "", "the credentials file to write")
	f.DurationVar(&expires, "expires", 0, "how long the credentials are valid (0: until revoked)")
	return cmd
}

func credsRevokeCmd(a *app) *cobra.Command {
	var dir, file, user string
	cmd := &cobra.Command{
		Use:   "revoke",
		Short: "Void an identity's credentials: every one issued to that user key so far",
		Long:  help("creds-revoke"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || (file == "") == (user == "") {
				return usageErr("give --dir, and --file or --user")
			}
			revoked, err := auth.RevokeIn(dir, file, user)
			if err != nil {
				return usageErr("%v", err)
			}
			fmt.Fprintf(a.out, "revoked %s in %s, %s and %s; give the servers the new account JWTs: e31 creds push --dir %s --nats URL\n",
				revoked, filepath.Join(dir, auth.AccountJWTFile), filepath.Join(dir, auth.TenantsJWTFile), filepath.Join(dir, auth.NodesJWTFile), dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the keys directory")
	cmd.Flags().StringVar(&file, "file", "", "the credentials file to revoke")
	cmd.Flags().StringVar(&user, "user", "", "or the user's public key (U...)")
	return cmd
}

func credsPushCmd(a *app) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "push",
		Short: "Give running servers the account JWTs in --dir, E31's, TENANTS' and NODES' (after a revocation)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usageErr("--dir is required")
			}
			keys, err := auth.LoadKeys(dir)
			if err != nil {
				return usageErr("%v", err)
			}
			cfg := a.connectConfig("e31-creds-push")
			var opts []nats.Option
			if cfg.CA != "" {
				opts = append(opts, nats.RootCAs(cfg.CA))
			}
			url := cmp.Or(cfg.URL, connect.DefaultURL)
			if err := auth.Push(cmd.Context(), url, keys, opts...); err != nil {
				return troubleErr(err)
			}
			fmt.Fprintf(a.out, "accounts %s %s, %s %s and %s %s updated on %s\n",
				auth.AccountName, keys.AccountKey(), auth.TenantsAccountName, keys.TenantsAccountKey(),
				auth.NodesAccountName, keys.NodesAccountKey(), url)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the keys directory")
	return cmd
}

func credsShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show FILE",
		Short: "Say who a credentials file is and what it may publish and subscribe to",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			creds, err := auth.ReadCreds(args[0])
			if err != nil {
				return usageErr("%v", err)
			}
			if err := creds.WriteText(a.out); err != nil {
				return usageErr("%v", err)
			}
			return nil
		},
	}
}
