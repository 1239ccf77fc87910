//go:build linux

package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	// x32SyscallBit has no meaning on arm64; no syscall number reaches it.
	x32SyscallBit = 0x40000000
)

// refusedArch: arm64 has none of x86-64's obsolete calls.
var refusedArch []uint32
