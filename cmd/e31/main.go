// Command e31 is the e31 command line: it submits jobs, waits for them,
// fetches their output and reads the ledger; `e31 dev` runs the whole
// system on one machine, and `e31 serve SERVICE` runs one service of a
// deployed system.
package main

import "os"

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
