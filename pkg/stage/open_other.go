//go:build !unix

package stage

// oNonblock is a no-op where named pipes cannot block an open.
const oNonblock = 0
