// Package container is RUN's executor for jobs that name an image
// (work.image): each job runs as a Docker container through the Engine API,
// with the same contract as the sandbox executor.
//
// The job's command replaces the image's entrypoint and runs as pid 1 of
// the container, as a uid of its own (shared allocation with the sandbox),
// with no network (NetworkMode none), every capability dropped,
// no-new-privileges and a read-only root filesystem. /data is the staged
// data, bound read-only; /out and /tmp are bound from the job's
// writable space, made by Prepare on the node's disk: a subvolume of the
// node's job disk (shared with the sandbox executor, see workspace.Disk)
// with a quota of Spec.DiskBytes, so that what a job writes never counts
// against its memory; a job that fills it gets EDQUOT, and if it then fails
// its outcome is disk_exceeded. Where the node has no job disk, the space
// is a tmpfs of Spec.DiskBytes instead. The container has no other writable
// space than that (and a /dev/shm of Config.ShmBytes), and what RUN
// collects from Job.Dirs().OutDir is on the node after the container is
// gone. Memory
// (without swap), cpu (NanoCPUs) and the process count are limited by the
// engine; an OOM kill is out_of_memory. The wall-clock limit sends SIGTERM a
// grace period before Spec.Stops' deadline and SIGKILL at it; cancellation
// sends SIGTERM, then SIGKILL a grace period later, as on every executor
// (executor.Watch).
//
// Usage is read at the end, not sampled: with the engine's cgroupfs driver
// every job's container is placed under a cgroup parent of its own
// (Config.CgroupParent/<job>), whose counters include the container's and
// outlive it. With the systemd driver usage is left zero and a warning is
// logged. The job's stdout and stderr reach Spec.Stdout and Spec.Stderr as
// the job writes them, through an attach made before the start; when those
// are nil they are copied from the engine (json-file logs capped at 10 MB)
// into the workspace at the end (see LogPaths).
//
// Containers do not die with the node agent as sandboxed jobs do: New
// removes the job containers a previous agent over the same Root left
// (labelled with it). Its workspaces are removed by the sandbox executor's
// New over the same Root.
//
// The client negotiates the API version down to the engine's (Docker 20.10
// speaks 1.41).
package container
