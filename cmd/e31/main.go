// Command e31 is the e31 command line: it submits jobs, waits for them,
// fetches their output and reads the ledger; `e31 dev` runs the whole
// system on one machine, and `e31 serve SERVICE` runs one service of a
// deployed system.
package main

import (
	"os"

	"github.com/e31net/e31/bench"
)

func main() {
	// `e31 bench scheduler --renew` starts this program again as its
	// nodes' renewers, and `e31 bench history` as its NATS server, to
	// measure each apart.
	bench.MaybeChild()
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
