//go:build linux && (amd64 || arm64)

package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The filter every job runs under. It follows Docker's default seccomp
// profile (moby's profiles/seccomp/default.json, the one containerd's
// default also derives from): every call that profile refuses to a
// container without capabilities is refused here too, but for the few that
// the launcher thread itself makes after it installed the filter (see
// launch.restrict); SECCOMP.md beside this file lists them call by call,
// with why. The job is an unprivileged user without capabilities, so most
// of those calls already fail in the kernel; refusing them in the filter
// as well keeps the kernel code behind them out of a job's reach.
//
//   - a foreign architecture or an x32 syscall number: the process is killed
//     (a filter written for one syscall table must not be bypassed by
//     another);
//   - a syscall newer than this filter (numbers from firstUnknownSyscall
//     on): ENOSYS, as runc answers calls newer than its profile, so that
//     libraries fall back and a new kernel widens nothing unseen;
//   - io_uring_setup, io_uring_enter and io_uring_register: ENOSYS, so that
//     libraries fall back to epoll (io_uring has been a repeated way out of
//     containers; Docker and containerd refuse it since 2023);
//   - clone3, whose flags sit behind a pointer a filter cannot read: ENOSYS,
//     so that libc and Go fall back to clone;
//   - add_key, request_key and keyctl: ENOSYS, as on a kernel without keys
//     (the keyrings outlive a job: the next job given its uid would find
//     them);
//   - the calls in refusedNewer: ENOSYS; those in refused: EPERM (Docker's
//     answer);
//   - clone with any CLONE_NEW* flag, unshare with CLONE_NEWUSER: EPERM (a
//     user namespace is the unprivileged way back to "root");
//   - socket of AF_ALG or AF_VSOCK: EPERM (the kernel's crypto sockets, and
//     sockets to the hypervisor, which network namespaces do not cover);
//   - ioctl requests that make a btrfs subvolume or snapshot: EPERM (a
//     subvolume would escape the quota of the job's /out and /tmp);
//   - personality but for Docker's five values (Linux, 32-bit, UNAME26,
//     both, and the query): EPERM, so a job cannot turn off its own address
//     space randomisation or make its data executable;
//   - everything else: allowed.
func seccompFilter() []unix.SockFilter {
	var f filterBuilder
	f.ld(offArch)
	f.jeq(auditArch, 1, 0)
	f.ret(retKill)
	f.ld(offNr)
	f.jge(x32SyscallBit, 0, 1)
	f.ret(retKill)
	f.jge(firstUnknownSyscall, 0, 1)
	f.ret(retENOSYS)
	f.refuse(retENOSYS, unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
		unix.SYS_CLONE3, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_KEYCTL)
	f.refuse(retENOSYS, refusedNewer...)
	f.refuse(retEPERM, append(append([]uint32(nil), refused...), refusedArch...)...)
	// clone: no new namespace of any kind.
	f.onArg0(unix.SYS_CLONE, func(f *filterBuilder) {
		f.jset(cloneNewNamespaces, 0, 1)
		f.ret(retEPERM)
		f.ret(retAllow)
	})
	// unshare: the launcher thread unshares mount, pid, IPC, UTS and
	// cgroup namespaces for each job under this filter, so only the user
	// namespace is refused here; the others need CAP_SYS_ADMIN, which a
	// job never has.
	f.onArg0(unix.SYS_UNSHARE, func(f *filterBuilder) {
		f.jset(unix.CLONE_NEWUSER, 0, 1)
		f.ret(retEPERM)
		f.ret(retAllow)
	})
	f.onArg0(unix.SYS_SOCKET, func(f *filterBuilder) {
		f.jeq(unix.AF_ALG, 1, 0)
		f.jeq(unix.AF_VSOCK, 0, 1)
		f.ret(retEPERM)
		f.ret(retAllow)
	})
	// ioctl: no btrfs subvolume or snapshot. A job's /out and /tmp are a
	// btrfs subvolume with a quota; a subvolume made inside it (which the
	// kernel lets any user do) has a quota group of its own, unbounded.
	f.onArg(unix.SYS_IOCTL, offArg1, func(f *filterBuilder) {
		for i, req := range refusedIoctls {
			f.jeq(req, uint8(len(refusedIoctls)-i), 0)
		}
		f.ret(retAllow)
		f.ret(retEPERM)
	})
	f.onArg0(unix.SYS_PERSONALITY, func(f *filterBuilder) {
		allowed := []uint32{0, 0x0008, 0x20000, 0x20008, 0xffffffff}
		for i, v := range allowed {
			f.jeq(v, uint8(len(allowed)-i), 0)
		}
		f.ret(retEPERM)
		f.ret(retAllow)
	})
	f.ret(retAllow)
	return f.prog
}

// refusedIoctls are the btrfs ioctls that make a subvolume (linux/btrfs.h:
// BTRFS_IOC_SNAP_CREATE, _SUBVOL_CREATE, _SNAP_CREATE_V2, _SUBVOL_CREATE_V2).
// The kernel reads an ioctl's request as 32 bits.
var refusedIoctls = []uint32{0x50009401, 0x5000940e, 0x50009417, 0x50009418}

// cloneNewNamespaces are the namespace flags of clone (Docker's mask): a
// job makes no namespace.
const cloneNewNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// refused are the calls Docker's default profile refuses to a container
// without capabilities, on every architecture, and that the launcher thread
// does not need: EPERM, as there. See SECCOMP.md for each.
var refused = []uint32{
	// The kernel's log, accounting, clocks, swap, reboot, modules, kexec,
	// quotas, NFS server, profiling cookies, file handles, chroot: root's.
	unix.SYS_SYSLOG, unix.SYS_VHANGUP, unix.SYS_ACCT, unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT, unix.SYS_SETDOMAINNAME,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE, unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD, unix.SYS_NFSSERVCTL, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_OPEN_BY_HANDLE_AT,
	unix.SYS_CHROOT, unix.SYS_PIVOT_ROOT, unix.SYS_UMOUNT2, unix.SYS_FSPICK,
	// Calls an unprivileged process may make on the kernel's wider
	// surfaces: eBPF, perf events, userfaultfd (a favourite of exploits
	// that widen race windows), fanotify.
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD, unix.SYS_FANOTIFY_INIT,
	// NUMA memory policy and page migration (Docker: CAP_SYS_NICE).
	// libnuma and the runtimes that use it fall back without them.
	unix.SYS_MBIND, unix.SYS_SET_MEMPOLICY, unix.SYS_GET_MEMPOLICY, unix.SYS_SET_MEMPOLICY_HOME_NODE,
	unix.SYS_MIGRATE_PAGES, unix.SYS_MOVE_PAGES,
	// Comparing and taking other processes' kernel objects (Docker:
	// CAP_SYS_PTRACE).
	unix.SYS_KCMP, unix.SYS_PIDFD_GETFD, unix.SYS_PROCESS_MADVISE,
}

// refusedNewer are calls newer than Docker's profile, which it therefore
// refuses: ENOSYS, so that whatever might use them falls back.
var refusedNewer = []uint32{
	unix.SYS_LSM_GET_SELF_ATTR, unix.SYS_LSM_SET_SELF_ATTR, unix.SYS_LSM_LIST_MODULES,
	unix.SYS_OPEN_TREE_ATTR, unix.SYS_FILE_GETATTR, unix.SYS_FILE_SETATTR, unix.SYS_LISTNS, unix.SYS_RSEQ_SLICE_YIELD,
}

// firstUnknownSyscall is the first syscall number newer than this filter
// (rseq_slice_yield, 471, is the newest it was written for, on amd64 and
// arm64 alike): from there on, ENOSYS.
const firstUnknownSyscall = unix.SYS_RSEQ_SLICE_YIELD + 1

const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low half of args[0] on little-endian machines
	offArg1 = 24 // low half of args[1]

	retAllow  = unix.SECCOMP_RET_ALLOW
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// filterBuilder writes a classic BPF program for seccomp, keeping the jump
// offsets right as rules are added.
type filterBuilder struct{ prog []unix.SockFilter }

func (f *filterBuilder) add(code uint16, k uint32, jt, jf uint8) {
	f.prog = append(f.prog, unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf})
}
func (f *filterBuilder) ret(v uint32) { f.add(unix.BPF_RET|unix.BPF_K, v, 0, 0) }
func (f *filterBuilder) ld(off uint32) {
	f.add(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off, 0, 0)
}
func (f *filterBuilder) jeq(k uint32, jt, jf uint8) {
	f.add(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, k, jt, jf)
}
func (f *filterBuilder) jge(k uint32, jt, jf uint8) {
	f.add(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, k, jt, jf)
}
func (f *filterBuilder) jset(k uint32, jt, jf uint8) {
	f.add(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, k, jt, jf)
}

// refuse returns ret for every syscall number in nrs. The accumulator must
// hold the syscall number, and still does after.
func (f *filterBuilder) refuse(ret uint32, nrs ...uint32) {
	for len(nrs) > 0 {
		n := min(len(nrs), 200) // jump offsets are eight bits
		for i, nr := range nrs[:n] {
			jf := uint8(0)
			if i == n-1 {
				jf = 1
			}
			f.jeq(nr, uint8(n-1-i), jf)
		}
		f.ret(ret)
		nrs = nrs[n:]
	}
}

// onArg0 runs body, with the low half of the first argument in the
// accumulator, for syscall nr; body must end in a return on every path.
// Other syscalls skip it, with the syscall number still in the accumulator.
func (f *filterBuilder) onArg0(nr uint32, body func(*filterBuilder)) {
	f.onArg(nr, offArg0, body)
}

// onArg is onArg0 for the argument at offset off.
func (f *filterBuilder) onArg(nr, off uint32, body func(*filterBuilder)) {
	var b filterBuilder
	b.ld(off)
	body(&b)
	f.jeq(nr, 0, uint8(len(b.prog)))
	f.prog = append(f.prog, b.prog...)
}

// installSeccomp puts the filter on the calling thread; children it forks
// inherit it. no_new_privs must already be set.
func installSeccomp(filter []unix.SockFilter) error {
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	return nil
}
