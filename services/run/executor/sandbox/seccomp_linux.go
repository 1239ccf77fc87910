//go:build linux && (amd64 || arm64)

package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The filter every job runs under. It is deliberately short: the job is an
// unprivileged user without capabilities, so mount, setns, chroot, module
// loading and the like already fail with EPERM. What an unprivileged user can
// still do is create a user namespace, in which it would be root with every
// capability over new mount, network and pid namespaces of its own — the
// "unshare -r" way back to root that widens the kernel surface a job can
// reach — and keep keys in the kernel's keyrings, which outlive the job:
// the user keyring of a uid is found by the next job given that uid (uids
// are handed out again), so one job could leave secrets or messages for
// another. The filter closes both, and the 32-bit and x32 syscall tables
// that could otherwise bypass a filter written for the native one:
//
//   - a foreign architecture or an x32 syscall number: the process is killed;
//   - clone or unshare with CLONE_NEWUSER: EPERM;
//   - clone3, whose flags sit behind a pointer a filter cannot read: ENOSYS,
//     so that libc and Go fall back to clone;
//   - add_key, request_key and keyctl: ENOSYS, as on a kernel without keys
//     (what container runtimes' default profiles do too);
//   - everything else: allowed.
func seccompFilter() []unix.SockFilter {
	const (
		offNr   = 0
		offArch = 4
		offArg0 = 16 // low half of args[0] on little-endian machines
	)
	ret := func(v uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: v}
	}
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	jge := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	jset := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		kill   = unix.SECCOMP_RET_KILL_PROCESS
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	return []unix.SockFilter{
		/* 0 */ ld(offArch),
		/* 1 */ jeq(auditArch, 1, 0),
		/* 2 */ ret(kill),
		/* 3 */ ld(offNr),
		/* 4 */ jge(x32SyscallBit, 0, 1),
		/* 5 */ ret(kill),
		/* 6 */ jeq(unix.SYS_CLONE3, 0, 1),
		/* 7 */ ret(enosys),
		/* 8 */ jeq(unix.SYS_ADD_KEY, 2, 0),
		/* 9 */ jeq(unix.SYS_REQUEST_KEY, 1, 0),
		/* 10 */ jeq(unix.SYS_KEYCTL, 0, 1),
		/* 11 */ ret(enosys),
		/* 12 */ jeq(unix.SYS_CLONE, 2, 0),
		/* 13 */ jeq(unix.SYS_UNSHARE, 1, 0),
		/* 14 */ ret(allow),
		/* 15 */ ld(offArg0),
		/* 16 */ jset(unix.CLONE_NEWUSER, 0, 1),
		/* 17 */ ret(eperm),
		/* 18 */ ret(allow),
	}
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
