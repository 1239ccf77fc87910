//go:build linux

package sandbox

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
)

// The slots (see slot.go): a job's workspace directory, cgroup and network
// namespace serve the next job. These tests run a job that leaves something
// behind and then the next job in the same slot, which must find nothing of
// it — and show, where the network namespace is reused, that it was.

// needPython skips a test whose jobs need python3 for their sockets.
func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
}

// py is the command of a job that runs a python3 program.
func py(program string) []string { return []string{"/usr/bin/python3", "-c", program} }

// netCookie prints "net=" and the job's network namespace cookie, which,
// unlike its inode number, no later namespace ever has.
const netCookie = `import socket; s = socket.socket(); print("net=%d" % int.from_bytes(s.getsockopt(socket.SOL_SOCKET, 71, 8), "little")); s.close()  # SO_NETNS_COOKIE`

// shNetCookie is netCookie for a shell script.
const shNetCookie = "/usr/bin/python3 -c '" + netCookie + "'"

// holdThenExit starts a daemon (a new session, as a job would to survive)
// that runs the python program, waits until it wrote /tmp/ready, reports
// the program's "held=" line, and ends: with exit 0, or, with atLimit, by
// ignoring SIGTERM until the wall-clock limit has it killed.
func holdThenExit(program string, atLimit bool) []string {
	end := "exit 0"
	if atLimit {
		end = "trap '' TERM; while :; do sleep 1; done"
	}
	return sh(`setsid /usr/bin/python3 -c '` + program + `' > /tmp/held &
n=0; while [ ! -e /tmp/ready ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done
cat /tmp/held
` + shNetCookie + `
` + end)
}

// probe is what the next job runs: everything of the network namespace a
// job could have left, and the files.
const probe = netCookie + `
import os, socket, errno

def rows(name):
    with open("/proc/net/" + name) as f:
        return f.read().splitlines()[1:]

def table(name):
    lines = open("/proc/net/" + name).read().splitlines()
    out = {}
    for h, v in zip(lines[::2], lines[1::2]):
        p = h.split()[0]
        for k, x in zip(h.split()[1:], v.split()[1:]):
            out[p + k] = int(x)
    return out

for name in ("unix", "tcp", "tcp6", "udp", "udp6", "raw", "ip6_flowlabel"):
    print("%s=%d" % (name, len(rows(name))))
lo = [l.split() for l in rows("dev")[1:] if l.strip().startswith("lo:")][0]
print("lo_packets=%d" % (int(lo[2]) + int(lo[10])))
snmp = table("snmp")
print("ip_out=%d" % snmp["Ip:OutRequests"])
print("no_routes=%d" % snmp["Ip:OutNoRoutes"])
print("tcp_opens=%d" % (snmp["Tcp:ActiveOpens"] + snmp["Tcp:PassiveOpens"]))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0e31-leak")
print("abstract_bind=ok")
s.close()
s = socket.socket()
s.bind(("127.0.0.1", 7777))
print("port_bind=ok")
s.close()
print("files=" + ",".join(sorted(os.listdir("/out") + os.listdir("/tmp") + os.listdir("/dev/shm"))))
print("data=" + ",".join(sorted(os.listdir("/data"))))
print("shm=%d" % len(open("/proc/sysvipc/shm").read().splitlines()[1:]))
# Last, as it makes traffic: the loopback is up (a refused connection, not
# an unreachable network).
try:
    socket.create_connection(("127.0.0.1", 9), timeout=5)
except OSError as e:
    print("lo_up=%d" % (e.errno == errno.ECONNREFUSED))
`

// runReleased prepares, stages, runs and releases s, returning what it ran.
func runReleased(t *testing.T, e *Executor, s executor.Spec, stage func(ws executor.Job)) *ran {
	t.Helper()
	ws, err := e.Prepare(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if stage != nil {
		stage(ws)
	}
	r := finish(t, context.Background(), e, ws)
	if err := ws.Release(); err != nil {
		t.Fatalf("release %s: %v", s.JobID, err)
	}
	return r
}

// TestSlotReuseLeavesNothing: what a job leaves in its slot — a socket held
// by a daemon that the end of the job killed, a connection in TIME_WAIT, a
// lingering IPv6 flow label, traffic counters, files, a SysV segment — the
// next job in the slot cannot see. A network namespace with no trace of the
// job is reused; one with any trace is dropped and the next job gets a new
// one.
func TestSlotReuseLeavesNothing(t *testing.T) {
	t.Parallel()
	needPython(t)
	for _, c := range []struct {
		name string
		cmd  []string
		// limit ends the job at its wall-clock limit (daemons killed
		// through the cgroup) rather than by its exit.
		limit bool
		// reused: the next job gets the same network namespace; either:
		// it may or may not.
		reused, either bool
	}{
		{name: "abstract socket held at the limit", limit: true, reused: true, cmd: holdThenExit(`
import socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0e31-leak"); s.listen()
print("held=%d" % sum("@e31-leak" in l for l in open("/proc/net/unix")), flush=True)
open("/tmp/ready", "w").close()
time.sleep(1000)`, true)},
		{name: "tcp listener held by a daemon", reused: true, cmd: holdThenExit(`
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 7777)); s.listen()
print("held=%d" % sum(l.split()[1].endswith(":1E61") for l in open("/proc/net/tcp")), flush=True)
open("/tmp/ready", "w").close()
time.sleep(1000)`, false)},
		// A listener whose only reference is a message in flight on a
		// socket that holds itself: its name stays taken after every
		// process is gone, until the kernel's garbage collector finds the
		// cycle. Whether that is before the slot is checked or after, the
		// next job must not find it.
		{name: "abstract socket kept in flight", either: true, cmd: py(`
import array, os, socket
l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); l.bind("\0e31-leak"); l.listen()
a, b = socket.socketpair()
a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [l.fileno(), b.fileno()]))])
l.close(); a.close(); b.close()
print("held=%d" % sum("@e31-leak" in r for r in open("/proc/net/unix")))
` + netCookie)},
		{name: "files and a SysV segment", reused: true, cmd: sh(`
echo x > /out/left; echo x > /tmp/left; echo x > /dev/shm/left
ipcmk -M 4096 >/dev/null && echo "held=$(tail -n +2 /proc/sysvipc/shm | wc -l)"
` + shNetCookie)},
		{name: "tcp connection in TIME_WAIT", cmd: py(`
import os, socket, time
l = socket.socket(); l.bind(("127.0.0.1", 7777)); l.listen()
c = socket.create_connection(("127.0.0.1", 7777)); a, _ = l.accept()
a.close(); time.sleep(0.1); c.close(); time.sleep(0.1)
print("held=%d" % sum(r.split()[3] == "06" for r in open("/proc/net/tcp").read().splitlines()[1:]))
` + netCookie)},
		{name: "lingering ipv6 flow label", cmd: py(`
import os, socket, struct
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
req = socket.inet_pton(socket.AF_INET6, "::1") + struct.pack(">I", 0x31e31) + struct.pack("=BBHHHI", 0, 1, 1, 0, 60, 0)
s.setsockopt(socket.IPPROTO_IPV6, 32, req)  # IPV6_FLOWLABEL_MGR: get, exclusive, create, linger 60 s
s.close()
print("held=%d" % len(open("/proc/net/ip6_flowlabel").read().splitlines()[1:]))
` + netCookie)},
		{name: "udp datagrams", cmd: py(`
import os, socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(b"x", ("127.0.0.1", 9)); s.close()
print("held=1")
` + netCookie)},
		{name: "connect without a route", cmd: py(`
import errno, os, socket
try:
    socket.create_connection(("10.31.31.31", 80), timeout=1)
except OSError as e:
    print("held=%d" % (e.errno == errno.ENETUNREACH))
` + netCookie)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newExecutor(t, Config{})
			s := spec("leaver", c.cmd)
			if c.limit {
				s.Limit = time.Second
				s.Grace = 200 * time.Millisecond
			}
			a := runReleased(t, e, s, func(ws executor.Job) { writeFile(t, filepath.Join(ws.Dirs().DataDir, "a-input"), "a") })
			got := lines(a.stdout)
			if got["held"] == "" || got["held"] == "0" {
				t.Fatalf("the first job did not leave what it meant to (held=%q): %s", got["held"], a.stderr)
			}
			want := events.Succeeded
			if c.limit {
				want = events.LimitExceeded
			}
			if a.res.Outcome != want {
				t.Fatalf("first job: outcome %s (%s), want %s", a.res.Outcome, a.res.Reason, want)
			}

			b := runJob(t, e, spec("next", py(probe)), func(ws executor.Job) {
				if ws.Dirs().Root != a.ws.Dirs().Root {
					t.Errorf("next job got workspace %s, want the first job's slot %s", ws.Dirs().Root, a.ws.Dirs().Root)
				}
				writeFile(t, filepath.Join(ws.Dirs().DataDir, "b-input"), "b")
			})
			saw := lines(b.stdout)
			if b.res.Outcome != events.Succeeded || saw["lo_up"] != "1" {
				t.Fatalf("probe: outcome %s (%s), lo_up=%q\n%s", b.res.Outcome, b.res.Reason, saw["lo_up"], b.stderr)
			}
			for _, k := range []string{"unix", "tcp", "tcp6", "udp", "udp6", "raw", "ip6_flowlabel", "lo_packets", "ip_out", "no_routes", "tcp_opens", "shm"} {
				if saw[k] != "0" {
					t.Errorf("next job sees %s=%s, want 0", k, saw[k])
				}
			}
			for _, k := range []string{"abstract_bind", "port_bind"} {
				if saw[k] != "ok" {
					t.Errorf("next job: %s=%q", k, saw[k])
				}
			}
			if saw["files"] != "" || saw["data"] != "b-input" {
				t.Errorf("next job sees files %q and data %q, want none and only its own", saw["files"], saw["data"])
			}
			if reused := saw["net"] == got["net"]; reused != c.reused && !c.either {
				t.Errorf("network namespace reused: %v (%s then %s), want %v", reused, got["net"], saw["net"], c.reused)
			}
		})
	}
}

// TestSlotReuseAccounting: limits and usage are the job's own in a reused
// slot: cpu seconds and peak memory count from zero, an earlier job's OOM
// kill is not the next one's, and each job's limits are in force.
func TestSlotReuseAccounting(t *testing.T) {
	t.Parallel()
	needPython(t)
	e := newExecutor(t, Config{})
	var root string
	run := func(name string, memory int64, cpu float64, program string) *ran {
		t.Helper()
		s := spec(name, py(program))
		s.MemoryBytes, s.CPU = memory, cpu
		r := runReleased(t, e, s, nil)
		if root == "" {
			root = r.ws.Dirs().Root
		} else if r.ws.Dirs().Root != root {
			t.Fatalf("%s ran in %s, not the slot %s", name, r.ws.Dirs().Root, root)
		}
		return r
	}
	const burn = `
import time
b = bytearray(64 << 20)
for i in range(0, len(b), 4096): b[i] = 1
t = time.process_time()
while time.process_time() - t < 0.3: pass
`
	big := run("big", 256<<20, 1, burn)
	if big.res.Outcome != events.Succeeded || big.res.Usage.CPUSeconds < 0.25 || big.res.Usage.MaxRSSBytes < 64<<20 {
		t.Fatalf("big job: %s (%s) usage %+v", big.res.Outcome, big.res.Reason, big.res.Usage)
	}
	small := run("small", 256<<20, 1, "pass")
	if small.res.Outcome != events.Succeeded || small.res.Usage.CPUSeconds > 0.2 || small.res.Usage.MaxRSSBytes > 32<<20 {
		t.Errorf("small job after a big one: %s usage %+v, want its own (little)", small.res.Outcome, small.res.Usage)
	}
	oom := run("oom", 32<<20, 1, "b = bytearray(128 << 20)")
	if oom.res.Outcome != events.OutOfMemory {
		t.Errorf("job over its 32 MiB: %s (%s), want out_of_memory", oom.res.Outcome, oom.res.Reason)
	}
	after := run("after-oom", 256<<20, 1, "b = bytearray(128 << 20)")
	if after.res.Outcome != events.Succeeded {
		t.Errorf("job after an OOM kill, allowed 256 MiB: %s (%s), want succeeded", after.res.Outcome, after.res.Reason)
	}
	if p := after.res.Usage.MaxRSSBytes; p < 128<<20 || p > 200<<20 {
		t.Errorf("peak memory %d, want about 128 MiB", p)
	}
	again := run("oom-again", 32<<20, 1, "b = bytearray(128 << 20)")
	if again.res.Outcome != events.OutOfMemory {
		t.Errorf("32 MiB again: %s (%s), want out_of_memory", again.res.Outcome, again.res.Reason)
	}

	// The cpu quota: the job's own, and none for a job without one. The
	// quota file is read while the job runs.
	for _, c := range []struct {
		cpu   float64
		quota string
	}{{0.5, "50000"}, {0, "-1"}, {2, "200000"}} {
		s := spec("quota", sh("echo up > /out/up; sleep 30"))
		s.CPU = c.cpu
		ws := prepare(t, e, s)
		if ws.Dirs().Root != root {
			t.Fatalf("quota job ran in %s, not the slot %s", ws.Dirs().Root, root)
		}
		cg, ok := ws.(*job).cg.(*cgroup1Job)
		if !ok {
			t.Skip("cgroup v2: its cgroups are not reused")
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = ws.Run(ctx)
		}()
		waitFor(t, "quota job to start", 10*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(ws.Dirs().OutDir, "up"))
			return err == nil
		})
		if q := strings.TrimSpace(readFile(t, filepath.Join(cg.dirs["cpu"], "cpu.cfs_quota_us"))); q != c.quota {
			t.Errorf("cpu %v: quota %s, want %s", c.cpu, q, c.quota)
		}
		if l := strings.TrimSpace(readFile(t, filepath.Join(cg.dirs["memory"], "memory.limit_in_bytes"))); l != strconv.FormatInt(s.MemoryBytes, 10) {
			t.Errorf("memory limit %s, want %d", l, s.MemoryBytes)
		}
		cancel()
		<-done
		if err := ws.Release(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNetnsDirty checks the yardstick of a reusable network namespace on
// its own: sockets elsewhere on the host (which move sockstat's host-wide
// fields) leave it clean; a socket in it is seen while it is open, and
// traffic for good.
func TestNetnsDirty(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace")
	}
	n, err := newNetns()
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	if why := n.dirty(); why != "" {
		t.Fatalf("new namespace is dirty: %s", why)
	}
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", host.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	host.Close()
	if why := n.dirty(); why != "" {
		t.Errorf("sockets of the host make the namespace dirty: %s", why)
	}

	// In the namespace, on a thread of its own.
	inside := func(f func()) {
		done := make(chan struct{})
		go onOwnThread(func() {
			defer close(done)
			if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
				t.Error(err)
				return
			}
			f()
		})
		<-done
	}
	var fd int
	inside(func() {
		fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrUnix{Name: "@e31-dirty"})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if why := n.dirty(); why == "" {
		t.Error("an open socket in the namespace leaves it clean")
	}
	unix.Close(fd)
	if why := n.dirty(); why != "" {
		t.Errorf("closed socket still makes it dirty: %s", why)
	}
	inside(func() {
		var s int
		if s, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err == nil {
			err = unix.Sendto(s, []byte("x"), 0, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}})
			unix.Close(s)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if why := n.dirty(); why == "" {
		t.Error("traffic in the namespace leaves it clean")
	} else {
		t.Logf("after traffic: %s", why)
	}
}

// TestLauncherReuse: the threads that start jobs serve one job after
// another (ten jobs in a row do not take ten threads), and each job still
// gets new pid and IPC namespaces of its own.
func TestLauncherReuse(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	threads := func() int {
		n, _ := strconv.Atoi(lines(strings.ReplaceAll(readFile(t, "/proc/self/status"), ":\t", "="))["Threads"])
		return n
	}
	var before int
	for i := range 10 {
		// Each job leaves a SysV segment; a job that found one would share
		// an IPC namespace with the one before. (Namespace inode numbers
		// are handed out again once a namespace is gone, so they cannot
		// tell.)
		r := runReleased(t, e, spec("again", sh(`
echo "pid=$$"
echo "host=$(hostname)"
echo "shm=$(tail -n +2 /proc/sysvipc/shm | wc -l)"
ipcmk -M 4096 >/dev/null`)), nil)
		got := lines(r.stdout)
		if r.res.Outcome != events.Succeeded || got["pid"] != "1" || got["host"] != "e31" || got["shm"] != "0" {
			t.Errorf("job %d: %s, pid=%s host=%s shm=%s, want succeeded, 1, e31 and none", i, r.res.Outcome, got["pid"], got["host"], got["shm"])
		}
		if i == 0 {
			before = threads()
		}
	}
	// Tests running alongside start threads of their own: allow some.
	if grew := threads() - before; grew > 6 {
		t.Errorf("9 jobs in a row took %d more threads, want the first job's thread kept", grew)
	}
}
