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
//   - New pid, mount, IPC, UTS and cgroup namespaces, and a network
//     namespace of its own while it runs. The job's command is pid 1 of its namespace;
//     when it exits or is killed, the kernel kills everything else in the
//     namespace, setsid and double-forked daemons included. Run returns
//     only after that and after the job's cgroup is seen empty, so the
//     compute is never released while a job process is alive.
//   - Its own root: a small read-only tmpfs holding only mount points, with
//     the host's /usr, /bin, /lib* (Config.SystemDirs) read-only and nosuid,
//     a generated read-only /etc (passwd, group, hosts plus the files in
//     Config.EtcFiles; a tmpfs of its own), the staged data read-only at
//     /data (a job given none finds there the empty directory of the root's
//     read-only tmpfs, which saves a new overlay per job), /out and /tmp
//     writable (nosuid, nodev), /proc of its own pid
//     namespace and a /dev of null, zero, full, random, urandom and tty
//     (/dev/shm is /tmp). The host's mount tree is detached after
//     pivot_root: nothing else of the node and nothing of another job is
//     reachable.
//   - No host path in its /proc. Its mount table (/proc/self/mountinfo)
//     shows every mount's root as "/" or as the path the job sees it at:
//     /data is a read-only overlay of the staged data over an empty
//     directory, whose layers are named relative to the workspace ("data",
//     "../.empty"), where a bind mount would show the data's path on the
//     node's disk (where the work directory cannot be an overlay's layer,
//     /data is that bind mount, and New logs so); /etc is a tmpfs, not a
//     bind of a directory under Root; /out and /tmp show their path in the
//     node's job disk ("/7/out": the number of the slot's subvolume).
//     Its /proc/self/cgroup shows "/" in every hierarchy: the cgroup
//     namespace is rooted at the job's cgroup (on v1; on v2, where the job
//     joins its cgroup only after exec, it would be rooted at the node
//     agent's). What the mount table still shows of the node: the system
//     directories' device and mount options (as /usr is the host's /usr),
//     and mount ids.
//   - A devices cgroup (v1 devices.deny and devices.allow; v2 an eBPF
//     filter) that refuses every device but its /dev's, so that a device
//     node that reached it some other way cannot be opened. A job holding
//     GPUs (Spec.GPUs) gets a /dev of its own with their nodes
//     (nvidia<minor>, nvidiactl, nvidia-uvm, nvidia-uvm-tools) beside the
//     usual ones, and in its /proc the driver's list of devices shows its
//     own alone, with ModifyDeviceFiles: 0 in the driver's params (see
//     devices_linux.go). A job holding none has no NVIDIA node at all.
//   - Only a loopback interface, which is up.
//   - A uid and gid of its own among the node's jobs (Config.UIDBase…),
//     no_new_privs, an empty capability bounding set, and a seccomp filter
//     as strict as Docker's default profile (SECCOMP.md, beside this file,
//     compares them call by call): no user namespaces (the unprivileged way
//     back to "root"), no io_uring (ENOSYS, so libraries use epoll), no
//     keyrings (they outlive a job, for the next job given its uid to
//     read), no eBPF, perf events, userfaultfd or vsock, and ENOSYS for
//     calls newer than the filter.
//   - A cgroup (v1 here; v2 where the unified hierarchy is the only one) with
//     memory = Spec.MemoryBytes and no swap, a CFS quota of Spec.CPU cores and
//     Config.PidsMax processes. Cpu seconds, peak memory and OOM kills are
//     read from it at the end, not sampled, and are the job's alone.
//   - /out, /tmp and its stdout/stderr logs in one writable space on the
//     node's disk, bounded at Spec.DiskBytes by a file-system quota: a job
//     that fills it gets EDQUOT, and if it then fails its outcome is
//     disk_exceeded. What it writes never counts against its memory (the
//     page cache it dirties is written back, not kept). The space is a
//     btrfs subvolume with a qgroup limit, in a file system the executor
//     makes for the node's jobs at New: a btrfs image of Config.DiskBytes
//     under Root (.disk.img, sparse, made once with mkfs.btrfs and reused,
//     loop-mounted at Root/.disk with quotas on). This kernel has no XFS
//     project quota and no ext4 quota format; btrfs qgroups work, and a
//     file system of the node's jobs alone keeps them from filling the
//     node's own disk. A subvolume made inside the space would have a
//     qgroup of its own, unbounded: the seccomp filter refuses the ioctls
//     that make one (which the kernel allows any user), and a job has no
//     CAP_SYS_ADMIN to change or lift its own limit. Where the node cannot
//     make that file system (no btrfs, no loop devices, no mkfs.btrfs from
//     btrfs-progs), New says so loudly in the log and every job's space is
//     a tmpfs of Spec.DiskBytes instead: ENOSPC at the bound, but its pages
//     are charged to the job's memory cgroup, so what a job writes counts
//     against its memory as well.
//   - Environment: executor.Environ's, as every executor gives it: the
//     declared variables, PATH, HOME=/tmp and TMPDIR=/tmp (unless
//     declared), E31_JOB_ID, E31_DATA=/data and E31_OUTPUT=/out (always).
//     Working directory /tmp; stdin /dev/null; stdout and stderr are pipes
//     the node copies into Spec.Stdout and Spec.Stderr (RUN's bounded log,
//     kept in node memory, not in the job's space), or, when those are nil,
//     files in the writable space found with LogPaths.
//
// # How a job starts
//
// The executor forks the job straight from the node agent, from a thread
// prepared for it, instead of re-executing itself or bubblewrap as the
// job's init:
//
//  0. Once, at New: a mount namespace is made whose only mounts are a small
//     read-only tmpfs holding the mount points, /dev's nodes and the links
//     of a job's root, the read-only tmpfs of /etc and the system
//     directories (read-only, nosuid, nodev clones of the host's; the
//     host's tree is then pivoted away and detached). Every job's mount
//     namespace is a copy of it, so no job ever copies the host's mount
//     table or has to unmount it, and the system directories, the same for
//     every job, come with the copy rather than being mounted for each.
//  1. Prepare takes a slot (see below): a workspace, a cgroup and a network
//     namespace that earlier jobs may have used, emptied. It bounds the
//     slot's writable space for the job's /out and /tmp (one ioctl: the
//     qgroup limit of its subvolume; or a new tmpfs) and sets the cgroup's
//     limits.
//  2. Run hands the job to a launcher thread: a thread locked to its
//     goroutine (never the main thread) that set no_new_privs, dropped its
//     capability bounding set and installed the seccomp filter when it was
//     made — all of which a child inherits at fork — and is kept from job
//     to job (see launchers). Still in the host's view, it clones the job's
//     own directories, /out and /tmp (open_tree), and makes the clones
//     nosuid, nodev (mount_setattr); the staged data it mounts anew, as a
//     read-only overlay (see bind.overlay).
//  3. The thread enters the template namespace and unshares new mount, pid,
//     IPC and UTS namespaces, joins the slot's network namespace (setns),
//     and attaches the clones (move_mount).
//  4. It moves itself (alone, not its process) into the job's cgroup,
//     unshares a cgroup namespace there (rooted at the job's cgroup), forks
//     and execs the command with syscall.ForkExec (Setsid, the job's uid
//     and gid, PR_SET_PDEATHSIG and PTRACE_TRACEME), and moves itself back.
//     The child is pid 1 of the new pid namespace, born in the job's
//     cgroup; ptrace stops it right after execve, before its first
//     instruction.
//  5. While it is stopped, the executor switches the cgroup's cpu quota on
//     (the fork and execve ran without it, as they did when jobs joined
//     their cgroup only here; v2, where a thread cannot join a cgroup
//     without its process, moves the job in now) and mounts /proc for its
//     pid namespace (procfs "pidns" option), then detaches.
//  6. The thread then waits for pid 1, parked on a pidfd rather than
//     blocked in wait4. Since the parent-death signal is tied to that
//     thread, a node agent that dies takes its jobs with it. Once pid 1 is
//     reaped, the thread goes back to the process's own namespaces (the
//     job's mount tree, IPC objects and pid namespace go with them) and
//     waits for the next job.
//
// Moving a thread into a cgroup v1 by writing "0" to its "tasks" file is
// what makes step 4 cheap: moving a process (cgroup.procs) takes a lock
// that stops every fork and exit on the host and waits for an RCU grace
// period, some 0.1–0.7 ms per hierarchy here, and jobs started at once
// queued on it.
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
// nothing installed on the node: the per-job overhead is a few namespaces,
// about seventeen mount syscalls, a quota ioctl and a few cgroup file writes. Measure
// it with
//
//	go test -run '^$' -bench 'SandboxTrue|ForkExec' -cpu 2,8 ./executor/sandbox/
//
// (BenchmarkSandboxTrue against BenchmarkForkExecTrue, a plain child; both
// report the CPU time per job besides the wall time, which on a shared
// machine says more). There is accordingly no init hook: nothing needs
// calling in main.
//
// # Slots: what outlives a job
//
// Making a job's workspace directory (on the node's disk), a cgroup in every
// hierarchy and a network namespace, and removing them after, used to be
// most of a trivial job's cost, and the part that kept jobs started at once
// from overlapping: the kernel serializes network namespace creation and
// teardown (pernet_ops_rwsem, one cleanup workqueue, rtnl), and ext4's
// inode allocator slows down with every directory recently deleted. So each
// job runs in a slot that outlives it: Release empties the slot and the next
// Prepare takes it up again (see slot). What a slot keeps, and why the next
// job finds nothing of the last one:
//
//   - The workspace directories (data/ and the writable space). The
//     writable space, a btrfs subvolume of its own bound on the workspace
//     (making one costs a btrfs transaction), is emptied at Release and its
//     quota set anew by the next Prepare: no file is carried over, and what
//     the last job held stops counting against the slot's quota at the
//     file system's next transaction, which a write past the quota waits
//     for. (A tmpfs, where the node has no job disk, is new for every job
//     and unmounted at Release.) data/ is emptied.
//   - The cgroup (v1). Its limits are rewritten for each job, and the
//     counters restart: cpuacct.usage is set to zero, the peak memory to
//     what is charged when the job starts (which is subtracted), the OOM
//     kill count is read then and only what it adds is the job's. Only a
//     cgroup left with at most idleMemory charged is kept, reclaimed with
//     memory.force_empty if need be, so a job's peak is its own to within
//     that. The job cannot read or write cgroup files (there is no /sys in
//     its root), so nothing else of it is visible. On v2 a cgroup serves
//     one job (its peak cannot be reset for every reader).
//   - The network namespace. A job has no capabilities in it, so it cannot
//     change its routes, addresses, interfaces, firewall, sysctls (the
//     files are root's), or tc, XFRM and BPF attachments; it can only make
//     sockets and traffic. Its sockets close with its processes, which are
//     all gone (the pid namespace died with pid 1 and the cgroup is empty)
//     before the namespace is looked at. What can outlive them is checked
//     in the namespace's own /proc/net files (netns.dirty), compared with
//     what they said when it was new: every socket not yet freed, of any
//     family (sockstat's "sockets: used", which also counts orphaned TCP
//     sockets still closing and an abstract unix socket kept alive by a
//     descriptor in flight), TCP TIME_WAIT entries, IPv6 flow labels (they
//     linger after their socket), the loopback's packet counters (any
//     traffic at all, which is also how TCP metrics, route exceptions,
//     neighbour or conntrack entries and fragments could have been made)
//     and the IP, ICMP, TCP and UDP counters (which also count attempts that
//     sent nothing, such as a connect with no route). A namespace that
//     differs in any of these is dropped and the next job gets a new one;
//     one that does not is, to a job, as new: even its counters read zero.
//     What a job can still learn is that the namespace is not new — its
//     inode number (readlink /proc/self/ns/net), the same as an earlier
//     job's — which tells it nothing that job did.
//
// Pid, IPC, UTS and cgroup namespaces are new for every job: a job can leave SysV
// IPC objects and POSIX message queues in its IPC namespace, and the others
// cost next to nothing. The uid a job runs as is handed out again too; the
// seccomp filter keeps the kernel's keyrings, which are per uid and outlive
// a job, out of reach.
//
// Cgroups are found with containerd/cgroups/v3, which knows v1 (the
// controllers may be mounted in separate hierarchies, as here) and v2. In v1
// the job cgroups are nested below the node agent's own cgroup
// (<own>/e31/<slot>), so that whatever bounds the agent bounds its jobs, and
// the executor handles them itself: they are reset rather than made, their
// counters are kept open, and the launcher thread moves itself in and out,
// none of which the library does. In v2 they live under /e31 at the root,
// since a v2 cgroup holding processes cannot delegate controllers, and the
// library makes one per job. (The v2 path follows the library's API but has
// so far only run on v1 hosts.)
//
// # What RUN must know
//
// Stage input into Job.Dirs().DataDir readable by others (0644/0755): the job
// is not root. Collect output from Job.Dirs().OutDir as hostile content: the
// job controls it, so do not follow symlinks (a link to /etc/shadow is only
// a name inside the job but a file on the node) and skip FIFOs and devices
// (nodev makes the latter harmless, a FIFO would block a reader).
//
// New cleans up after a node agent that died: its jobs died with it (the
// parent-death signal), and New removes the workspaces under Root and the
// job cgroups they left, and the empty slot cgroups of node agents (over
// any root) whose process is gone. Make a node's executors before it takes
// jobs.
//
// A workspace's paths are its slot's, not the job's, and serve later jobs:
// do not touch them after Release. Close removes the slots an executor
// keeps and unmounts the job disk (its image stays for the next New); a
// node agent that never calls it leaves them to the next New, which finds
// the disk mounted and empties it.
//
// The executor waits for each job's pid 1 itself: nothing else in the node
// agent may reap children it did not start (wait4(-1), a subreaper loop).
//
// Two node agents in one process get different uids for their jobs
// automatically; node agents in different processes on one host need
// disjoint Config.UIDBase ranges.
package sandbox
