package sandbox

import (
	"errors"
	"log/slog"
)

// Config configures an Executor. The zero value of every field but Root
// means its default.
type Config struct {
	// Root is the directory under which job workspaces are made (created if
	// missing). It should be on the node's local disk: staged data lives here.
	// One node's sandbox and container executors may share a Root; two
	// nodes must not (New takes every workspace it finds under Root for a
	// stale one and removes it, as does the container executor a workspace
	// found for a job attempt being prepared). New removes the workspaces
	// and job cgroups a node agent that died left over Root, so a node's
	// executors must be made before it takes jobs.
	Root string
	// CgroupParent names the cgroup that holds the job cgroups: below this
	// process's own cgroup in every v1 hierarchy, or at the root of the v2
	// hierarchy. Default "e31".
	CgroupParent string
	// UIDBase and UIDCount are the host uids (and gids) jobs run as: each
	// prepared job gets one of its own, so that no two jobs on the node share
	// a uid. Defaults 2000000 and 4096; UIDCount is also how many jobs the
	// node can hold prepared at once.
	UIDBase, UIDCount int
	// PidsMax is the process (thread) limit of every job. Default 1024.
	PidsMax int64
	// DefaultDiskBytes bounds /out and /tmp of a job whose Spec.DiskBytes is
	// 0. Default 1 GiB.
	DefaultDiskBytes int64
	// DiskBytes is the size of the file system the executor makes for the
	// jobs' /out and /tmp (a btrfs image at Root/.disk.img, sparse, made
	// once and reused by later executors over Root; see doc.go): the
	// node's disk for jobs. An image smaller than DiskBytes is grown; a
	// larger one is kept as it is. Default 20 GiB. Negative: make none, and keep
	// every job's /out and /tmp in a tmpfs, as where the node cannot make
	// one.
	DiskBytes int64
	// DefaultMemoryBytes is the memory limit of a job whose Spec.MemoryBytes
	// is 0: no job runs without one. Default 1 GiB.
	DefaultMemoryBytes int64
	// SystemDirs are the host directories visible read-only in every job,
	// at the same path; a symlink (as /bin on merged-/usr systems) is
	// reproduced as a symlink. Default /usr /bin /sbin /lib /lib32 /lib64
	// /libx32; the ones the host lacks are skipped.
	SystemDirs []string
	// EtcFiles are the host files and directories under /etc copied into the
	// jobs' /etc (once, at New) besides the generated passwd, group, hosts and
	// hostname. Default: the dynamic linker's cache and config, alternatives,
	// localtime, nsswitch.conf, protocols, services, os-release and
	// debian_version.
	EtcFiles []string
	// Logger receives the executor's logs. Default slog.Default().
	Logger *slog.Logger
}

// ErrNotSupported is returned by New when the host cannot sandbox jobs.
var ErrNotSupported = errors.New("sandbox: host cannot sandbox jobs")
