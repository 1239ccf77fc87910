//go:build linux

package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32SyscallBit marks the x32 ABI's syscall numbers on x86-64.
	x32SyscallBit = 0x40000000
)

// refusedArch are the calls of x86-64 alone that Docker's default profile
// refuses to a container without capabilities: obsolete or unimplemented
// ones, port I/O, and the old sysctl and filesystem-statistics calls.
var refusedArch = []uint32{
	unix.SYS_USELIB, unix.SYS_USTAT, unix.SYS_SYSFS, unix.SYS__SYSCTL, unix.SYS_IOPL, unix.SYS_IOPERM,
	unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE, unix.SYS_GETPMSG, unix.SYS_PUTPMSG,
	unix.SYS_AFS_SYSCALL, unix.SYS_TUXCALL, unix.SYS_SECURITY, unix.SYS_VSERVER,
}
