//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
)

// The hostile jobs. Each asserts what the job saw (its own report on stdout)
// and what the node saw afterwards (finish checks that no process of the job
// is left in its cgroup or in the host's process table).

// forEachProcMode runs test with the job's own /proc and with the fallback
// for kernels without procfs pidns= (the host's /proc with hidepid), which
// this kernel may not need but CI must keep honest.
func forEachProcMode(t *testing.T, test func(*testing.T, *Executor)) {
	for _, hostProc := range []bool{false, true} {
		name := "pidns"
		if hostProc {
			name = "hostproc"
		}
		t.Run(name, func(t *testing.T) {
			e := newExecutor(t, Config{})
			if hostProc {
				e.hostProc = true
			}
			test(t, e)
		})
	}
}

// startVictim runs a job holding secrets in its data, output, /tmp and
// environment, and returns once it is up, with its host pid and workspace.
// The victim is stopped when the test ends.
func startVictim(t *testing.T, e *Executor, secret string) (executor.Job, int, <-chan executor.Result) {
	t.Helper()
	s := spec("victim", sh(`echo `+secret+` > /tmp/secret; echo `+secret+` > /out/secret; echo up > /out/ready; while :; do sleep 1; done`))
	s.Env = map[string]string{"SECRET": secret}
	ws := prepare(t, e, s)
	writeFile(t, filepath.Join(ws.Dirs().DataDir, "secret"), secret)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan executor.Result, 1)
	go func() {
		res, err := ws.Run(ctx)
		if err != nil {
			t.Errorf("victim: %v", err)
		}
		done <- res
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	waitFor(t, "victim to start", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(ws.Dirs().OutDir, "ready"))
		return err == nil
	})
	procs, err := ws.(*job).cg.procs()
	if err != nil || len(procs) == 0 {
		t.Fatalf("victim processes: %v %v", procs, err)
	}
	return ws, procs[0], done
}

// TestCannotReachOtherJob: a job looks for a running job's data, output,
// /tmp and environment by every path it has, and for the node's files.
func TestCannotReachOtherJob(t *testing.T) {
	t.Parallel()
	forEachProcMode(t, testCannotReachOtherJob)
}

func testCannotReachOtherJob(t *testing.T, e *Executor) {
	const secret = "s3cr3t-victim-7f1e"
	victim, victimPid, victimDone := startVictim(t, e, secret)
	paths := []string{
		victim.Dirs().DataDir + "/secret", victim.Dirs().OutDir + "/secret", victim.Dirs().Root,
		"/proc/" + strconv.Itoa(victimPid) + "/environ", "/proc/" + strconv.Itoa(victimPid) + "/root/tmp/secret",
		"/etc/shadow", "/root", "/home", "/var", "/run", "/sys/fs/cgroup",
	}
	r := runJob(t, e, spec("thief", sh(`
for p in `+strings.Join(paths, " ")+`; do
  if cat "$p" >/dev/null 2>&1 || ls "$p" >/dev/null 2>&1; then echo "reached=$p"; fi
done
# Every process it can see, and what their roots and environments hold.
echo "pids=$(ls /proc | grep -c '^[0-9]')"
cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c SECRET | sed 's/^/environ_secret=/'
grep -rs `+secret+` /proc/[0-9]*/root/tmp /proc/[0-9]*/root/out /proc/[0-9]*/root/data /tmp /out /data && echo found=yes
grep -rlsD skip `+secret+` /etc /tmp /out /data /dev/shm 2>/dev/null | sed 's/^/found=/'
find / -xdev 2>/dev/null | grep -c . | sed 's/^/root_entries=/'
# Mount table: nothing of the other job's workspace.
grep -c '`+victim.Dirs().Root+`' /proc/self/mountinfo | sed 's/^/victim_mounts=/'
echo done=1
`)), nil)
	got := lines(r.stdout)
	if got["done"] != "1" {
		t.Fatalf("thief did not finish: %s", r.stderr)
	}
	for k, v := range got {
		if k == "reached" || k == "found" {
			t.Errorf("thief %s %s", k, v)
		}
	}
	if strings.Contains(r.stdout, secret) || strings.Contains(r.stderr, secret) {
		t.Errorf("the victim's secret leaked into the thief's output")
	}
	if n, _ := strconv.Atoi(got["pids"]); n < 1 || n > 6 {
		t.Errorf("thief sees %s processes, want only its own few", got["pids"])
	}
	if got["environ_secret"] != "0" || got["victim_mounts"] != "0" {
		t.Errorf("environ_secret=%s victim_mounts=%s, want 0 and 0", got["environ_secret"], got["victim_mounts"])
	}
	// The job's root holds mount points, device nodes and links, nothing else.
	if n, _ := strconv.Atoi(got["root_entries"]); n == 0 || n > 40 {
		t.Errorf("job's root has %s entries", got["root_entries"])
	}
	select {
	case res := <-victimDone:
		t.Fatalf("victim ended while the thief ran: %+v", res)
	default:
	}
}

// TestCannotSignalOutsideTree: a job lists processes and tries to kill the
// node's: a host process, the node agent, and another job.
func TestCannotSignalOutsideTree(t *testing.T) {
	t.Parallel()
	forEachProcMode(t, testCannotSignalOutsideTree)
}

func testCannotSignalOutsideTree(t *testing.T, e *Executor) {
	_, victimPid, victimDone := startVictim(t, e, "unused")
	host := exec.Command("sleep", "60")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	targets := []int{host.Process.Pid, os.Getpid(), victimPid, 1}
	var ts []string
	for _, p := range targets {
		ts = append(ts, strconv.Itoa(p))
	}
	r := runJob(t, e, spec("killer", sh(`
for p in `+strings.Join(ts, " ")+`; do
  if kill -9 $p 2>/dev/null; then echo "killed=$p"; fi
done
kill -9 -1 2>/dev/null
echo "users=$(stat -c %U /proc/[0-9]* | sort -u | tr '\n' ' ')"
echo done=1
`)), nil)
	got := lines(r.stdout)
	if got["done"] != "1" {
		t.Fatalf("killer did not finish (its own kill -1 must not reach itself): %s", r.stderr)
	}
	for _, p := range ts[:3] {
		if strings.Contains(r.stdout, "killed="+p+"\n") {
			t.Errorf("job signalled pid %s outside its tree", p)
		}
	}
	if got["users"] != "job " {
		t.Errorf("job sees processes of users %q, want only job", got["users"])
	}
	if err := host.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("host process is gone: %v", err)
	}
	select {
	case res := <-victimDone:
		t.Fatalf("other job ended: %+v", res)
	default:
	}
}

// TestNoNetwork: a job tries the node's NATS-like port on loopback, a
// listener on every host address, and finds it has no route anywhere.
func TestNoNetwork(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	lo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Close()
	any, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer any.Close()
	accepted := make(chan string, 2)
	for _, l := range []net.Listener{lo, any} {
		go func() {
			c, err := l.Accept()
			if err == nil {
				accepted <- c.RemoteAddr().String()
				c.Close()
			}
		}()
	}
	loPort := lo.Addr().(*net.TCPAddr).Port
	anyPort := any.Addr().(*net.TCPAddr).Port
	r := runJob(t, e, spec("net", []string{"/bin/bash", "-c", fmt.Sprintf(`
for a in 127.0.0.1/%d 127.0.0.1/%d 127.0.0.2/%d; do
  if (echo hi > /dev/tcp/$a) 2>/dev/null; then echo "connected=$a"; fi
done
echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
echo "routes=$(tail -n +2 /proc/net/route | wc -l)"
(exec 3<>/dev/tcp/127.0.0.1/9) 2>&1 | grep -q refused && echo lo_ok=1
echo done=1
`, loPort, anyPort, anyPort)}), nil)
	got := lines(r.stdout)
	if got["done"] != "1" {
		t.Fatalf("job did not finish: %s", r.stderr)
	}
	if c, ok := got["connected"]; ok {
		t.Errorf("job connected to %s", c)
	}
	if got["ifaces"] != "lo " || got["routes"] != "0" {
		t.Errorf("job has interfaces %q and %s IPv4 routes, want only lo and none", got["ifaces"], got["routes"])
	}
	if got["lo_ok"] != "1" {
		t.Errorf("job's own loopback is not up (connect to a closed port was not refused)")
	}
	select {
	case from := <-accepted:
		t.Errorf("host listener accepted a connection from %s", from)
	default:
	}
}

// TestMemoryLimit: a job allocates past its limit and is killed for it.
func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	s := spec("hog", []string{"/usr/bin/python3", "-c", `
chunks = []
while True:
    chunks.append(bytearray(8 << 20))
`})
	if _, err := os.Stat(s.Command[0]); err != nil {
		s.Command = sh(`a=x; while :; do a="$a$a"; done`)
	}
	s.MemoryBytes = 64 << 20
	r := runJob(t, e, s, nil)
	if r.res.Outcome != events.OutOfMemory {
		t.Fatalf("outcome %s (%s), want out_of_memory", r.res.Outcome, r.res.Reason)
	}
	if p := r.res.Usage.MaxRSSBytes; p < 48<<20 || p > 64<<20 {
		t.Errorf("peak memory %d, want close to the 64 MiB limit", p)
	}
}

// TestForkBomb: a fork bomb fills its process limit and no further; the job
// ends at its wall-clock limit and the node keeps running.
func TestForkBomb(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{PidsMax: 64})
	// The job's own shell then waits without forking: dash exits on a fork
	// the limit refuses ("Cannot fork"), so a loop of sleep 1 ended the job
	// with code 2, not at its limit, whenever the bomb had taken every pid.
	s := spec("bomb", sh(`b() { b | b & }; b; while :; do :; done`))
	s.Limit = 3 * time.Second
	ws := prepare(t, e, s)
	j := ws.(*job)
	r := finish(t, context.Background(), e, ws)
	if r.res.Outcome != events.LimitExceeded {
		t.Errorf("outcome %s (%s), want limit_exceeded", r.res.Outcome, r.res.Reason)
	}
	if cg, ok := j.cg.(*cgroup1Job); ok {
		ev := readFile(t, filepath.Join(cg.dirs["pids"], "pids.events"))
		if !strings.HasPrefix(ev, "max ") || strings.TrimSpace(ev) == "max 0" {
			t.Errorf("the process limit never refused a fork: pids.events %q", ev)
		}
	}
	// The node can still start processes.
	if err := exec.Command("true").Run(); err != nil {
		t.Errorf("node cannot fork after the bomb: %v", err)
	}
}

// TestCPUQuota: two busy processes under cpu 0.5 get about half a core.
func TestCPUQuota(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	s := spec("busy", sh(`
spin() { while :; do :; done; }
spin & spin &
sleep 3
`))
	s.CPU = 0.5
	r := runJob(t, e, s, nil)
	wall := r.res.Stopped.Sub(r.res.Started).Seconds()
	cpu := r.res.Usage.CPUSeconds
	t.Logf("cpu %.2fs over %.2fs wall", cpu, wall)
	if cpu > 0.5*wall*1.15+0.05 {
		t.Errorf("cpu %.2fs over %.2fs wall: more than half a core", cpu, wall)
	}
	if cpu < 0.1*wall {
		t.Errorf("cpu %.2fs over %.2fs wall: the spinners hardly ran", cpu, wall)
	}
}

// TestDiskBound: a job that fills /out gets EDQUOT at its disk bound: the
// space is a subvolume of the node's job disk with a quota of that size. On
// a node without one (DiskBytes < 0), it is a tmpfs of that size and the job
// gets ENOSPC.
func TestDiskBound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		nodeDisk int64
		fs       int64
		err      string
	}{
		{"quota", 0, unix.BTRFS_SUPER_MAGIC, "Disk quota exceeded"},
		{"tmpfs", -1, unix.TMPFS_MAGIC, "No space left on device"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newExecutor(t, Config{DiskBytes: c.nodeDisk})
			s := spec("filler", sh(`
dd if=/dev/zero of=/out/big bs=1M count=64 2>/dev/null; rc=$?
err=$( (head -c 1048576 /dev/zero > /tmp/more) 2>&1 )
rm -f /tmp/more
size=$(stat -c %s /out/big)
rm /out/big
echo "rc=$rc"
echo "size=$size"
echo "err=$err"
`))
			s.DiskBytes = 8 << 20
			ws := prepare(t, e, s)
			var st unix.Statfs_t
			if err := unix.Statfs(ws.Dirs().OutDir, &st); err != nil {
				t.Fatal(err)
			}
			if st.Type != c.fs {
				t.Errorf("out is fs %#x, want %#x", st.Type, c.fs)
			}
			if c.fs == unix.TMPFS_MAGIC && st.Blocks*uint64(st.Bsize) != 8<<20 {
				t.Errorf("out is a tmpfs of %d bytes, want 8 MiB", st.Blocks*uint64(st.Bsize))
			}
			r := finish(t, context.Background(), e, ws)
			got := lines(r.stdout)
			if got["rc"] == "0" || !strings.Contains(got["err"], c.err) {
				t.Errorf("filling /out did not end in %s: %q", c.err, r.stdout)
			}
			if n, _ := strconv.Atoi(got["size"]); n == 0 || n > 8<<20 {
				t.Errorf("wrote %s bytes, want some and at most 8 MiB", got["size"])
			}
			// It filled its space, but deleted what it wrote and exited 0.
			if r.res.Outcome != events.Succeeded {
				t.Errorf("outcome %s (%s), want succeeded", r.res.Outcome, r.res.Reason)
			}
		})
	}
}

// TestCannotChangeOwnQuota: a job tries to lift the quota of its /out and
// /tmp (a qgroup limit of its own subvolume), to turn quotas off, and to
// make a subvolume of its own inside /out, which would have a quota group
// of its own, unbounded. It has no CAP_SYS_ADMIN, and the seccomp filter
// refuses the subvolume ioctls; it still stops at its bound.
func TestCannotChangeOwnQuota(t *testing.T) {
	t.Parallel()
	needPython(t)
	e := newExecutor(t, Config{})
	s := spec("quota", py(`
import ctypes, errno, os, struct
libc = ctypes.CDLL(None, use_errno=True)
def ioctl(name, path, req, buf):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    r = libc.ioctl(fd, ctypes.c_ulong(req), buf)
    print("%s=%s" % (name, "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())))
    os.close(fd)
# BTRFS_IOC_QGROUP_LIMIT, qgroup 0 (the subvolume of the fd), MAX_RFER 1 TiB.
ioctl("qgroup_limit", "/out", 0x8030942b, ctypes.create_string_buffer(struct.pack("<6Q", 0, 1, 1 << 40, 0, 0, 0), 48))
# BTRFS_IOC_QUOTA_CTL, BTRFS_QUOTA_CTL_DISABLE.
ioctl("quota_disable", "/out", 0xc0109428, ctypes.create_string_buffer(struct.pack("<2Q", 2, 0), 16))
# BTRFS_IOC_SUBVOL_CREATE and _V2: which an unprivileged user may make.
vol = ctypes.create_string_buffer(4096); vol[8:11] = b"esc"
ioctl("subvol_create", "/out", 0x5000940e, vol)
vol2 = ctypes.create_string_buffer(4096); vol2[56:60] = b"esc2"
ioctl("subvol_create_v2", "/out", 0x50009418, vol2)
# BTRFS_IOC_SNAP_CREATE of /tmp's subvolume... by a descriptor of /tmp.
snap = ctypes.create_string_buffer(4096); struct.pack_into("<q", snap, 0, os.open("/tmp", os.O_RDONLY)); snap[8:12] = b"snap"
ioctl("snap_create", "/out", 0x50009401, snap)
try:
    with open("/out/big", "wb") as f:
        for i in range(64):
            f.write(b"x" * (1 << 20))
except OSError as e:
    print("write=" + errno.errorcode[e.errno])
print("size=%d" % os.stat("/out/big").st_size)
os.remove("/out/big")  # room for stdout, which is in the same space
print("done=1")
`))
	s.DiskBytes = 8 << 20
	r := runJob(t, e, s, nil)
	got := lines(r.stdout)
	if got["done"] != "1" {
		t.Fatalf("job did not finish: %s", r.stderr)
	}
	for _, call := range []string{"qgroup_limit", "quota_disable", "subvol_create", "subvol_create_v2", "snap_create"} {
		if got[call] != "EPERM" {
			t.Errorf("%s: %q, want EPERM", call, got[call])
		}
	}
	if got["write"] != "EDQUOT" {
		t.Errorf("writing 64 MiB under an 8 MiB bound: %q, want EDQUOT", got["write"])
	}
	if n, _ := strconv.Atoi(got["size"]); n == 0 || n > 8<<20 {
		t.Errorf("wrote %s bytes, want some and at most 8 MiB", got["size"])
	}
}

// TestCannotWriteOutside: everything but /out and /tmp is read-only.
func TestCannotWriteOutside(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	targets := []string{"/x", "/etc/x", "/etc/passwd", "/usr/x", "/usr/bin/x", "/bin/x", "/lib/x", "/data/x", "/data/in",
		"/dev/x", "/dev/shm/../x", "/proc/x", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger", "/proc/1/root/x"}
	r := runJob(t, e, spec("writer", sh(`
for p in `+strings.Join(targets, " ")+`; do
  if (echo pwned >> "$p") 2>/dev/null; then echo "wrote=$p"; fi
done
mkdir /data/d 2>/dev/null && echo "wrote=/data/d"
echo ok > /out/ok && echo out=ok
echo ok > /tmp/ok && echo tmp=ok
echo ok > /dev/shm/ok && echo shm=ok
echo done=1
`)), func(ws executor.Job) { writeFile(t, filepath.Join(ws.Dirs().DataDir, "in"), "input") })
	got := lines(r.stdout)
	if got["done"] != "1" {
		t.Fatalf("job did not finish: %s", r.stderr)
	}
	if w, ok := got["wrote"]; ok {
		t.Errorf("job wrote %s", w)
	}
	for _, k := range []string{"out", "tmp", "shm"} {
		if got[k] != "ok" {
			t.Errorf("job could not write its %s", k)
		}
	}
	if c := readFile(t, filepath.Join(r.ws.Dirs().DataDir, "in")); c != "input" {
		t.Errorf("staged data changed: %q", c)
	}
	for _, p := range []string{"/x", "/etc/x", "/usr/x"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("host has %s", p)
		}
	}
}

// TestCannotBecomeRoot: setuid binaries in /data and /out, a user
// namespace, mount, and the capability and seccomp state the job runs with.
func TestCannotBecomeRoot(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	r := runJob(t, e, spec("root", sh(`
echo "data_id=$(/data/id -u)"
echo "out_id=$(/out/id -u)"
unshare -r true 2>/dev/null && echo escaped=unshare-r
unshare -U true 2>/dev/null && echo escaped=unshare-U
unshare -m true 2>/dev/null && echo escaped=unshare-m
unshare -n true 2>/dev/null && echo escaped=unshare-n
mount -t tmpfs none /tmp 2>/dev/null && echo escaped=mount
mount --bind /out /data 2>/dev/null && echo escaped=bind
chroot / true 2>/dev/null && echo escaped=chroot
python3 -c 'import os; os.setuid(0)' 2>/dev/null && echo escaped=setuid
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -d ' \t' | tr ':' '='
echo done=1
`)), func(ws executor.Job) {
		for _, dir := range []string{ws.Dirs().DataDir, ws.Dirs().OutDir} {
			copySetuid(t, "/usr/bin/id", filepath.Join(dir, "id"))
		}
	})
	got := lines(r.stdout)
	if got["done"] != "1" {
		t.Fatalf("job did not finish: %s", r.stderr)
	}
	if esc, ok := got["escaped"]; ok {
		t.Errorf("job escaped by %s", esc)
	}
	uid := strconv.Itoa(r.uid)
	if got["data_id"] != uid || got["out_id"] != uid {
		t.Errorf("setuid-root binaries ran as %q (data) and %q (out), want %s", got["data_id"], got["out_id"], uid)
	}
	for k, want := range map[string]string{"CapInh": "0000000000000000", "CapPrm": "0000000000000000",
		"CapEff": "0000000000000000", "CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %s", k, got[k], want)
		}
	}
}

// copySetuid copies an executable to dst as a setuid-root binary.
func copySetuid(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, 0o4755); err != nil {
		t.Fatal(err)
	}
}

// TestNoDaemonSurvives: whatever a job leaves behind (background, setsid,
// double fork, nohup, a TERM-proof loop) dies with it, whether its main
// process exits on its own or is stopped at the limit.
func TestNoDaemonSurvives(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	daemons := `
sleep 1000 &
setsid sleep 1000 &
( sh -c 'sleep 1000 &' & )
nohup sh -c 'trap "" TERM HUP; while :; do sleep 1; done' >/dev/null 2>&1 &
setsid sh -c 'trap "" TERM; while :; do sleep 1; done' &
echo up > /out/up
`
	for _, c := range []struct {
		name    string
		script  string
		outcome events.Outcome
	}{
		{"exits", daemons + "exit 0", events.Succeeded},
		{"limit", daemons + "trap '' TERM; while :; do sleep 1; done", events.LimitExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := spec("daemon-"+c.name, sh(c.script))
			s.Limit = 2 * time.Second
			r := runJob(t, e, s, nil)
			if r.res.Outcome != c.outcome {
				t.Errorf("outcome %s (%s), want %s", r.res.Outcome, r.res.Reason, c.outcome)
			}
			if readFile(t, filepath.Join(r.ws.Dirs().OutDir, "up")) != "up\n" {
				t.Errorf("daemons were not started: %s", r.stderr)
			}
		})
	}
}

// TestNoKeyLeftForTheNextJob: a job tries to leave a key in its uid's
// keyring, which the kernel keeps after the job, for the next job given
// that uid to find.
func TestNoKeyLeftForTheNextJob(t *testing.T) {
	t.Parallel()
	needPython(t)
	e := newExecutor(t, Config{UIDBase: 2200000, UIDCount: 1})
	const keys = `
import ctypes, errno, os, platform
nr = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
if os.environ.get("MODE") == "leave":
    r = libc.syscall(nr[0], b"user", b"e31-key", b"s3cret", 6, ctypes.c_int(-4))  # add_key to @u
    print("add=%d errno=%s" % (r, errno.errorcode.get(ctypes.get_errno())))
else:
    r = libc.syscall(nr[1], b"user", b"e31-key", None, ctypes.c_int(0))  # request_key
    print("found=%d errno=%s" % (r, errno.errorcode.get(ctypes.get_errno())))
`
	leave := spec("key-leave", py(keys))
	leave.Env = map[string]string{"MODE": "leave"}
	a := runReleased(t, e, leave, nil)
	b := runReleased(t, e, spec("key-find", py(keys)), nil)
	if a.uid != b.uid {
		t.Fatalf("jobs ran as %d and %d, want one uid", a.uid, b.uid)
	}
	if !strings.HasPrefix(a.stdout, "add=-1 errno=ENOSYS") {
		t.Errorf("job could add a key: %q %s", a.stdout, a.stderr)
	}
	if !strings.HasPrefix(b.stdout, "found=-1 ") {
		t.Errorf("next job found a key: %q %s", b.stdout, b.stderr)
	}
}
