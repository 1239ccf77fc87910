package run

import (
	"flag"
	"os"
	"runtime"
	"time"

	"github.com/e31net/e31/pkg/jobfile"
)

// The defaults of a node, the same for its own main, `e31 serve run` and
// `e31 dev`.
const (
	// DefaultMemoryBytes is the memory a node offers unless told.
	DefaultMemoryBytes = 4 << 30
	// DefaultDiskBytes is the disk a node offers for job output and
	// scratch space unless told.
	DefaultDiskBytes = 20 << 30
	// DefaultLogCap is the most kept of each of a job's stdout and stderr.
	DefaultLogCap = 16 << 20
	// DefaultGrace is how long before its limit a job gets SIGTERM.
	DefaultGrace = 10 * time.Second
)

// DefaultCPU is the cpu a node offers unless told: every core of the host.
func DefaultCPU() float64 { return float64(runtime.NumCPU()) }

// Flags defines on fs the flags that set c, with the defaults above: the
// node's id (the host name) and its work directory, and NodeFlags.
func (c *Config) Flags(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&c.Node, "node", host, "this node's id (one instance per id)")
	fs.StringVar(&c.WorkDir, "work-dir", "", "where job workspaces are made (default $TMPDIR/e31/NODE)")
	c.NodeFlags(fs)
}

// NodeFlags defines on fs the flags of what a node offers and how it runs
// jobs: its size, its GPUs, its executor, the fence margin, its card and
// key, the grace before a limit and the log cap.
// `e31 dev` defines them for all of its nodes at once, so that their help
// and defaults are the ones a node's own main shows.
func (c *Config) NodeFlags(fs *flag.FlagSet) {
	fs.Float64Var(&c.CPU, "node-cpu", DefaultCPU(), "cpu cores this node offers")
	jobfile.SizeVar(fs, &c.MemoryBytes, "node-memory", DefaultMemoryBytes, "memory this node offers")
	jobfile.SizeVar(fs, &c.DiskBytes, "node-disk", DefaultDiskBytes, "disk for job output and scratch space")
	jobfile.SizeVar(fs, &c.LogCap, "log-cap", DefaultLogCap, "the most kept of each of a job's stdout and stderr: past it, the head and the last MiB")
	fs.StringVar(&c.ExecutorKind, "executor", ExecAuto, "sandbox (needs root), process (NOT isolated, and the node says so), or auto (the sandbox, or refuse to start where it cannot run)")
	fs.StringVar(&c.GPURoot, "gpu-root", "/", "where the NVIDIA driver's view of the node's GPUs is read (proc/driver/nvidia/gpus, proc/devices): / on a real node")
	fs.StringVar(&c.GPUs, "gpus", "auto", "the GPUs this node offers: auto (every one the driver lists), none, or device UUIDs, comma separated")
	fs.DurationVar(&c.FenceMargin, "fence-margin", 0, "when the node cannot renew its lease, how long before the lease could lapse it stops every job (SIGTERM then, SIGKILL at half of it), so that the pool never holds a job again while it runs here; at most half the lease TTL (default a quarter of it)")
	fs.StringVar(&c.SigningKeyFile, "signing-key", "", "this node's signing key (node.key of 'e31 creds node'): every stop it reports is signed with it")
	fs.StringVar(&c.CardFile, "card", "", "this node's card (node.card of 'e31 creds node'), presented when it announces itself: RENT holds the node to it")
	fs.DurationVar(&c.Grace, "grace", DefaultGrace, "how long before its limit a job gets SIGTERM (at most a tenth of the limit; SIGKILL comes at the limit), and how long a cancelled job has between SIGTERM and SIGKILL")
}
