package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/nodecard"
)

// nodeIdentity is the identity a run node connects as.
func nodeIdentity(name string) auth.Identity {
	return auth.Identity{Role: auth.Service, Service: auth.RunService, Name: name}
}

func credsNodeCmd(a *app) *cobra.Command {
	var dir, name, out, memory, disk, isolation string
	var cpu float64
	var gpu int
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Make one run node's credentials, signing key and card (its capacity, signed by the operator)",
		Long:  help("creds-node"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || out == "" || name == "" {
				return usageErr("--dir, --name and -o are required")
			}
			card := events.NodeCard{Node: name, CPU: cpu, GPU: gpu, Isolation: events.Isolation(isolation)}
			var err error
			if card.MemoryBytes, err = jobfile.ParseSize(memory); err != nil {
				return usageErr("--memory: %v", err)
			}
			if card.DiskBytes, err = jobfile.ParseSize(disk); err != nil {
				return usageErr("--disk: %v", err)
			}
			switch card.Isolation {
			case "", events.IsolationSandbox, events.IsolationContainer, events.IsolationNone:
			default:
				return usageErr("--isolation: %q is not sandbox, container or none", isolation)
			}
			if cpu <= 0 || gpu < 0 {
				return usageErr("--cpu must be positive, --gpu not negative")
			}
			id := nodeIdentity(name)
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
			node, err := keys.IssueNode(card)
			if err != nil {
				return usageErr("%v", err)
			}
			if err := os.MkdirAll(out, 0o700); err != nil {
				return err
			}
			if err := creds.WriteFile(filepath.Join(out, credsFileName)); err != nil {
				return err
			}
			if err := node.WriteFiles(out); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s: %s, its signing key %s and card (%g cpu, %s memory, %d gpu, %s disk)\n", out, id,
				nodecard.PublicOf(node.Key), cpu, jobfile.FormatSize(card.MemoryBytes), gpu, jobfile.FormatSize(card.DiskBytes))
			fmt.Fprintf(a.out, "run it with: e31 serve run --node %s --creds %s --signing-key %s --card %s\n", name,
				filepath.Join(out, credsFileName), filepath.Join(out, nodecard.KeyFile), filepath.Join(out, nodecard.CardFile))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the keys directory of 'e31 creds init'")
	f.StringVar(&name, "name", "", "the node's id (e31 serve run --node)")
	f.StringVarP(&out, "output", "o", "", "the directory to write the node's e31.creds, node.key and node.card into")
	f.Float64Var(&cpu, "cpu", 1, "the most cpu cores the node may offer")
	f.StringVar(&memory, "memory", "4GiB", "the most memory the node may offer")
	f.IntVar(&gpu, "gpu", 0, "the most GPUs the node may offer")
	f.StringVar(&disk, "disk", "20GiB", "the most disk the node may offer")
	f.StringVar(&isolation, "isolation", "", "the isolation you vouch for: sandbox, container or none (none holds the node to none)")
	f.DurationVar(&expires, "expires", 0, "how long the credentials are valid (0: until revoked; the card does not expire)")
	return cmd
}

// credsFileName is what a node's credentials are called in its directory,
// as deploy/init.sh names every identity's.
const credsFileName = "e31.creds"
