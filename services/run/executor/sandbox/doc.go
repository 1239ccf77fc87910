// Package sandbox is RUN's default executor: every job in its own Linux
// namespaces, root filesystem, cgroup and uid, with no daemon and no helper
// program. It needs root and Linux 6.18 for everything below; on Linux 5.8
// to 6.17, which lack procfs's pidns= mount option, it runs in a fallback
// mode where the job's /proc is the host's with hidepid=invisible: the job
// sees only its own processes, but under host pids, so tools that look up
// /proc/<getpid()> (ps) fail. New picks the mode and logs the fallback.
//
// # What a job gets
//
//   - New pid, mount, network, IPC and UTS namespaces. The job's command is
//     pid 1 of its namespace; when it exits or is killed, the kernel kills
//     everything else in the namespace, setsid and double-forked daemons
//     included. Run returns only after that and after the job's cgroup is
//     seen empty, so the compute is never released while a job process is
//     alive.
//   - Its own root: a small read-only tmpfs holding only mount points, with
//     the host's /usr, /bin, /lib* (Config.SystemDirs) read-only and nosuid,
//     a generated read-only /etc (passwd, group, hosts plus the files in
//     Config.EtcFiles), the staged data read-only at /data, /out and /tmp
//     writable (nosuid, nodev), /proc of its own pid namespace and a /dev of
//     null, zero, full, random, urandom and tty (/dev/shm is /tmp). The host's
//     mount tree is detached after pivot_root: nothing else of the node and
//     nothing of another job is reachable.
//   - Only a loopback interface, which is up.
//   - A uid and gid of its own among the node's jobs (Config.UIDBase…),
//     no_new_privs, an empty capability bounding set, and a seccomp filter
//     that refuses to create user namespaces (the unprivileged way back to
//     "root") and clone3.
//   - A cgroup (v1 here; v2 where the unified hierarchy is the only one) with
//     memory = Spec.MemoryBytes and no swap, a CFS quota of Spec.CPU cores and
//     Config.PidsMax processes. Cpu seconds, peak memory and OOM kills are
//     read from it at the end, not sampled.
//   - /out, /tmp and its stdout/stderr logs on one tmpfs of Spec.DiskBytes:
//     a job that fills it gets ENOSPC and the node's disk is never touched.
//     The kernel charges those pages to the job's memory cgroup while it
//     runs, so what a job writes counts against its memory as well: memory
//     plus written files stay within what RENT held.
//   - Environment: the declared variables, PATH and HOME=/tmp (unless
//     declared), E31_JOB_ID, E31_DATA=/data and E31_OUTPUT=/out (always).
//     Working directory /tmp; stdin /dev/null; stdout and stderr in files
//     found with LogPaths.
//
// # How a job starts
//
// The executor forks the job straight from the node agent, from a thread
// prepared for it, instead of re-executing itself or bubblewrap as the
// job's init:
//
//  0. Once, at New: a mount namespace is made whose only mount is a small
//     read-only tmpfs holding the mount points, /dev's nodes and the links
//     of a job's root (the host's tree is pivoted away and detached). Every
//     job's mount namespace is a copy of it, so no job ever copies the
//     host's mount table or has to unmount it.
//  1. A goroutine locks itself to an OS thread (never the main thread).
//     Still in the host's view, it clones the job's directories (open_tree)
//     and makes the clones read-only, nosuid, nodev as due (mount_setattr).
//  2. The thread enters the template namespace and unshares new mount, pid,
//     network, IPC and UTS namespaces; it attaches the clones (move_mount),
//     brings up lo, sets no_new_privs, drops the capability bounding set and
//     installs the seccomp filter — all of which a child inherits at fork.
//  3. It forks and execs the command with syscall.ForkExec (Setsid, the job's
//     uid and gid, PR_SET_PDEATHSIG and PTRACE_TRACEME). The child is pid 1
//     of the new pid namespace; ptrace stops it right after execve, before
//     its first instruction.
//  4. While it is stopped, the executor puts its pid in the job's cgroup and
//     mounts /proc for its pid namespace (procfs "pidns" option), then
//     detaches.
//  5. The thread then waits for pid 1; the Go runtime discards it when the
//     goroutine returns. Since the parent-death signal is tied to that
//     thread, a node agent that dies takes its jobs with it.
//
// Why this and not the alternatives: on these machines (paravirtualised
// VMs) an execve is the dominant cost of a job, and a Go program's start is
// far dearer than a small C one's. Re-executing the node agent as the job's
// init (the libcontainer way, and the containerd/cgroups + SysProcAttr
// variant) pays a whole Go runtime start per job (about 10 ms here, against
// 4-7 ms for a whole fork and exec of /bin/true); bubblewrap adds its own
// exec and fork per job, and started as root it can give the job another
// uid only inside a user namespace that maps it to root; runc's libcontainer
// also needs cgo (its nsexec) in a binary we build static.
// Forking from a prepared thread pays one exec, the job's own, and needs
// nothing installed on the node: the per-job overhead is namespaces, about
// twenty mount syscalls, a tmpfs and a cgroup. Measure it with
//
//	go test -run '^$' -bench . ./executor/sandbox/
//
// (BenchmarkSandboxTrue against BenchmarkForkExecTrue, a plain child).
// There is accordingly no init hook: nothing needs calling in main.
//
// Cgroups are made with containerd/cgroups/v3, which handles v1 (the
// controllers may be mounted in separate hierarchies, as here) and v2. In
// v1 the job cgroups are nested below the node agent's own cgroup
// (<own>/e31/<job>), so that whatever bounds the agent bounds its jobs; in
// v2 they live under /e31 at the root, since a v2 cgroup holding processes
// cannot delegate controllers. (The v2 path follows the library's API but
// has so far only run on v1 hosts.)
//
// # What RUN must know
//
// Stage input into Workspace.DataDir readable by others (0644/0755): the job
// is not root. Collect output from Workspace.OutDir as hostile content: the
// job controls it, so do not follow symlinks (a link to /etc/shadow is only
// a name inside the job but a file on the node) and skip FIFOs and devices
// (nodev makes the latter harmless, a FIFO would block a reader).
//
// New cleans up after a node agent that died: its jobs died with it (the
// parent-death signal), and New removes the workspaces under Root and the
// job cgroups they left. Make a node's executors before it takes jobs.
//
// The executor waits for each job's pid 1 itself: nothing else in the node
// agent may reap children it did not start (wait4(-1), a subreaper loop).
//
// Two node agents in one process get different uids for their jobs
// automatically; node agents in different processes on one host need
// disjoint Config.UIDBase ranges.
package sandbox
