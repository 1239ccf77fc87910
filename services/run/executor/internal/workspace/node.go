//go:build linux

package workspace

import "log/slog"

// DefaultNodeDisk is the size of a node's job disk when its configuration
// gives none.
const DefaultNodeDisk = 20 << 30

// OpenNodeDisk opens the node's job disk of size bytes under root (0: the
// default; see OpenDisk) for an executor whose jobs are called whose
// ("jobs'", "containers'"). Where the node cannot make one, or size < 0
// says not to, it says so loudly and returns nil: then every job's /out
// and /tmp is a tmpfs, whose pages count against the job's memory limit.
func OpenNodeDisk(root string, size int64, whose string, log *slog.Logger) *Disk {
	if size < 0 {
		log.Warn("NO DISK QUOTA (configured): " + whose + " /out and /tmp are a tmpfs of their disk bound, whose pages count against their memory limit")
		return nil
	}
	if size == 0 {
		size = DefaultNodeDisk
	}
	d, err := OpenDisk(root, size)
	if err != nil {
		log.Error("NO DISK QUOTA: this node cannot make a file system with quotas for jobs (it needs btrfs, loop devices and mkfs.btrfs from btrfs-progs); "+
			whose+" /out and /tmp are a tmpfs of their disk bound instead, whose pages count against their memory limit, "+
			"so a job that writes more than its memory request is killed as out_of_memory", "root", root, "err", err)
		return nil
	}
	how := "reused"
	switch {
	case d.Made:
		how = "made"
	case d.Grown:
		how = "grown to the node's disk"
	}
	log.Info(whose+" /out and /tmp are on the node's disk: a btrfs file system with a quota per job, loop-mounted from an image ("+how+" now)",
		"image", d.Image, "size", d.Size, "mount", d.Path)
	return d
}
