// Command e31 is the e31 command line: it submits jobs, waits for them,
// fetches their output and reads the ledger; `e31 dev` runs the whole
// system on one machine, and `e31 serve SERVICE` runs one service of a
// deployed system.
package main

import (
	"os"
	"runtime/debug"
)

// clientMemoryLimit is the Go runtime's soft memory limit for the client
// commands. They stream data through fixed buffers, so what they hold live
// is small whatever the size of the data; but on a loaded machine the
// collector falls behind the allocation rate of hashing and sending, and
// the heap grows to several times what is live. The limit makes the
// collector keep up instead. GOMEMLIMIT overrides it.
const clientMemoryLimit = 64 << 20

func main() {
	if len(os.Args) > 1 && os.Getenv("GOMEMLIMIT") == "" {
		switch os.Args[1] {
		case "dev", "serve", "bench":
		default:
			debug.SetMemoryLimit(clientMemoryLimit)
		}
	}
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
