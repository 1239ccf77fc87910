package main

import (
	"flag"
	"testing"

	"github.com/e31net/e31/services/run"
)

// `e31 dev` and `e31 serve run` take a node's flags from the node's own
// Config: the same names, defaults and help, so that they cannot drift.
func TestDevAndServeTakeTheNodesOwnFlags(t *testing.T) {
	t.Parallel()
	var c run.Config
	own := flag.NewFlagSet("e31-run", flag.ContinueOnError)
	c.Flags(own)
	node := flag.NewFlagSet("node", flag.ContinueOnError)
	c.NodeFlags(node)
	dev, serve := devCmd(&app{}).Flags(), serveCmd(&app{}).Flags()
	n := 0
	own.VisitAll(func(want *flag.Flag) {
		got := serve.Lookup(want.Name)
		if got == nil || got.DefValue != want.DefValue || got.Usage != "run: "+want.Usage {
			t.Errorf("e31 serve --%s: %+v, want the node's own %+v", want.Name, got, want)
		}
		if node.Lookup(want.Name) == nil {
			return // the node's id and work directory: e31 dev sets them for each
		}
		n++
		got = dev.Lookup(want.Name)
		if got == nil || got.DefValue != want.DefValue || got.Usage != "each node: "+want.Usage {
			t.Errorf("e31 dev --%s: %+v, want the node's own %+v", want.Name, got, want)
		}
	})
	if n < 6 {
		t.Errorf("e31 dev shares %d of the node's flags, want its size, executor, grace and log cap", n)
	}
}
