//go:build linux

package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32SyscallBit marks the x32 ABI's syscall numbers on x86-64.
	x32SyscallBit = 0x40000000
)
