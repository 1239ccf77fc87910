//go:build unix

package stage

import "syscall"

// oNonblock keeps an open from blocking on a named pipe.
const oNonblock = syscall.O_NONBLOCK
