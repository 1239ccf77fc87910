//go:build linux

package sandbox

import (
	"bytes"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// netns is a network namespace that serves one job after another: it holds
// only a loopback interface, which is up, and jobs join it with setns
// instead of each making a namespace of its own (see doc.go, "Why a network
// namespace can serve the next job").
//
// Its /proc/net files are kept open: such a file shows the namespace it was
// opened in, whichever thread reads it, and what they said when the
// namespace was new is the yardstick of dirty.
type netns struct {
	fd    int
	files []fileAt // netnsFiles, -1 for those the kernel lacks
	base  [][]byte // sockstat's masked (maskSockstat)
	// buf is what dirty reads into: one job at a time uses the namespace,
	// and a new 32 KiB for each job is most of what it allocates.
	buf []byte
}

// netnsFiles are the /proc/net files that show whatever a job without
// capabilities can leave in its network namespace: sockets of any family in
// any state ("sockets: used" counts every socket that is not yet freed,
// orphaned ones included), TCP TIME_WAIT entries (sockstat's "tw"), IPv6
// flow labels (which linger after their socket closes), the loopback
// interface's packet counters (any traffic at all), and the protocol
// counters (also bumped by attempts that sent nothing, such as a connect
// without a route).
var netnsFiles = []string{"sockstat", "sockstat6", "ip6_flowlabel", "dev", "snmp", "snmp6", "netstat"}

// newNetns makes a network namespace with its loopback up, on a thread of
// its own that is then discarded; the namespace lives on in the returned
// file descriptors.
func newNetns() (*netns, error) {
	type result struct {
		n   *netns
		err error
	}
	rc := make(chan result, 1)
	go onOwnThread(func() {
		n, err := makeNetns()
		rc <- result{n, err}
	})
	r := <-rc
	return r.n, r.err
}

func makeNetns() (*netns, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("unshare network namespace: %w", err)
	}
	n := &netns{fd: -1}
	fail := func(err error) (*netns, error) {
		n.close()
		return nil, err
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("open network namespace: %w", err))
	}
	n.fd = fd
	for _, name := range netnsFiles {
		f, err := openAt("/proc/thread-self/net", name, unix.O_RDONLY)
		if err != nil && (name == "sockstat" || name == "dev" || name == "snmp") {
			return fail(err)
		}
		// The others are missing where the kernel has no IPv6, and then
		// so is what they would show.
		n.files = append(n.files, f)
	}
	n.base = make([][]byte, len(n.files))
	n.buf = make([]byte, procNetMax)
	// The sockets' count is taken before the loopback is brought up, while
	// the namespace has never held a socket. Under load the kernel
	// sometimes still counts loopbackUp's socket just after its close (2
	// namespaces of 4,800 made beside TestSlotReuseLeavesNothing): a
	// yardstick read then held that socket, and the slot was found dirty
	// after its first job, whatever the job did ("sockets: used 0"
	// against a base of "used 1"), and not reused.
	if err := n.takeBase(func(name string) bool { return name == "sockstat" }); err != nil {
		return fail(err)
	}
	if err := loopbackUp(); err != nil {
		return fail(err)
	}
	// The rest once lo is up: its flags are not in them, and what lo's
	// coming up may count is the namespace's from then on.
	if err := n.takeBase(func(name string) bool { return name != "sockstat" }); err != nil {
		return fail(err)
	}
	return n, nil
}

// takeBase reads the yardstick of dirty from the files whose names which
// picks.
func (n *netns) takeBase(which func(name string) bool) error {
	for i, f := range n.files {
		if f.fd < 0 || !which(netnsFiles[i]) {
			continue
		}
		b, err := readProcNet(f, n.buf)
		if err != nil {
			return err
		}
		if netnsFiles[i] == "sockstat" {
			b = maskSockstat(b)
		}
		n.base[i] = bytes.Clone(b)
	}
	return nil
}

// dirty says what a job left in the namespace, or "" if it left nothing: it
// is called once no process of the job is left.
func (n *netns) dirty() string {
	for i, f := range n.files {
		if f.fd < 0 {
			continue
		}
		b, err := readProcNet(f, n.buf)
		if err != nil {
			return err.Error()
		}
		name := netnsFiles[i]
		if name == "sockstat" {
			b = maskSockstat(b)
			if !bytes.Equal(b, n.base[i]) {
				return "sockets: " + strings.Join(strings.Fields(string(b)), " ")
			}
			continue
		}
		if !bytes.Equal(b, n.base[i]) {
			return name + " changed"
		}
	}
	return ""
}

// procNetMax is more than any of netnsFiles holds for a namespace with
// only lo (netstat, the longest, is about 4 KiB).
const procNetMax = 32 << 10

// readProcNet reads one of a namespace's /proc/net files into buf (or a
// new buffer). These files make their whole text on a read from offset 0,
// so one read of a large enough buffer is all of it.
func readProcNet(f fileAt, buf []byte) ([]byte, error) {
	if buf == nil {
		buf = make([]byte, procNetMax)
	}
	return f.readAll(buf)
}

// maskSockstat blanks what /proc/net/sockstat shows of the whole host
// rather than of the namespace: TCP's orphans, allocated sockets and
// memory, UDP's memory.
func maskSockstat(b []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) > 0 && (f[0] == "TCP:" || f[0] == "UDP:") {
			for i := 1; i+1 < len(f); i += 2 {
				switch f[i] {
				case "orphan", "alloc", "mem":
					f[i+1] = "-"
				}
			}
			line = []byte(strings.Join(f, " ") + "\n")
		}
		out = append(out, line...)
	}
	return out
}

// close lets the namespace go (once no job is in it).
func (n *netns) close() {
	for i := range n.files {
		n.files[i].close()
	}
	if n.fd >= 0 {
		unix.Close(n.fd)
		n.fd = -1
	}
}
