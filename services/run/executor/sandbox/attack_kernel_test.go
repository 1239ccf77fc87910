//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/e31net/e31/services/run/executor"
)

// The hostile jobs of the kernel's wider surface and of what the node's
// paths would tell a job. Like attack_test.go's, each reports what it saw
// and finish checks that nothing of it is left on the node.

// TestKernelSurfaceRefused: a job tries io_uring, the calls Docker's
// default seccomp profile refuses that an unprivileged process could
// otherwise make, and the sockets no network namespace covers. Each call
// is one that would succeed (or fail differently) without the filter, so
// the errno shows the filter's answer.
func TestKernelSurfaceRefused(t *testing.T) {
	t.Parallel()
	needPython(t)
	e := newExecutor(t, Config{})
	r := runJob(t, e, spec("kernel", py(`
import ctypes, errno, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = {
 "x86_64": dict(personality=135, userfaultfd=323, get_mempolicy=239, kcmp=312, perf_event_open=298, syslog=103, fanotify_init=300),
 "aarch64": dict(personality=92, userfaultfd=282, get_mempolicy=236, kcmp=272, perf_event_open=241, syslog=116, fanotify_init=262),
}[platform.machine()]
nr.update(io_uring_setup=425, io_uring_enter=426, io_uring_register=427, listns=470, after_newest=600)
def call(name, n, *args):
    r = libc.syscall(ctypes.c_long(n), *[ctypes.c_long(a) for a in args])
    print("%s=%s" % (name, "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())))
params = ctypes.create_string_buffer(120)
call("io_uring_setup", nr["io_uring_setup"], 8, ctypes.addressof(params))
call("io_uring_enter", nr["io_uring_enter"], 0, 0, 0, 0, 0, 0)
call("io_uring_register", nr["io_uring_register"], 0, 0, 0, 0)
call("userfaultfd", nr["userfaultfd"], 1)  # UFFD_USER_MODE_ONLY: allowed unprivileged
call("get_mempolicy", nr["get_mempolicy"], 0, 0, 0, 0, 0)
call("kcmp", nr["kcmp"], os.getpid(), os.getpid(), 0, 0, 0)  # KCMP_FILE of fd 0 with itself
call("personality_norandom", nr["personality"], 0x0040000)  # ADDR_NO_RANDOMIZE
call("personality_query", nr["personality"], 0xffffffff)
call("syslog", nr["syslog"], 10, 0, 0)  # SYSLOG_ACTION_SIZE_BUFFER
call("fanotify_init", nr["fanotify_init"], 0x200, 0)  # FAN_REPORT_FID: allowed unprivileged
call("listns", nr["listns"], 0, 0, 0, 0)
call("after_newest", nr["after_newest"])
for name, family, kind in (("af_vsock", 40, 1), ("af_alg", 38, 5), ("af_inet", 2, 1), ("af_unix", 1, 1)):
    fd = libc.socket(family, kind, 0)
    print("%s=%s" % (name, "ok" if fd >= 0 else errno.errorcode.get(ctypes.get_errno())))
print("done=1")
`)), nil)
	got := lines(r.stdout)
	if got["done"] != "1" {
		t.Fatalf("job did not finish: %s", r.stderr)
	}
	for call, want := range map[string]string{
		"io_uring_setup": "ENOSYS", "io_uring_enter": "ENOSYS", "io_uring_register": "ENOSYS",
		"userfaultfd": "EPERM", "get_mempolicy": "EPERM", "kcmp": "EPERM", "personality_norandom": "EPERM",
		"syslog": "EPERM", "fanotify_init": "EPERM", "listns": "ENOSYS", "after_newest": "ENOSYS",
		"af_vsock": "EPERM", "af_alg": "EPERM",
		// What a job needs still works.
		"personality_query": "ok", "af_inet": "ok", "af_unix": "ok",
	} {
		if got[call] != want {
			t.Errorf("%s: %q, want %s", call, got[call], want)
		}
	}
}

// TestNoHostPathsInProc: a job reads its mount table and its cgroups, which
// would name the node's work directory, the job cgroups' place in the
// node's hierarchy (…/e31/job-…) and the node agent's own cgroup.
func TestNoHostPathsInProc(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	r := runJob(t, e, spec("paths", sh(`
echo "mountinfo_begin"; cat /proc/self/mountinfo; echo "mountinfo_end"
echo "cgroup_begin"; cat /proc/self/cgroup; echo "cgroup_end"
echo done=1
`)), func(ws executor.Job) { writeFile(t, filepath.Join(ws.Dirs().DataDir, "in"), "input") })
	if lines(r.stdout)["done"] != "1" {
		t.Fatalf("job did not finish: %s", r.stderr)
	}
	mountinfo := section(r.stdout, "mountinfo")
	cgroups := section(r.stdout, "cgroup")
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	// Host paths the job must not learn: the executor's root (the node's
	// work directory), the job's cgroup parent, and the agent's cgroups.
	secrets := []string{e.cfg.Root, "/" + e.cfg.CgroupParent + "/", "/sys/fs/cgroup", slotPrefix}
	for _, l := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		if _, path, ok := strings.Cut(l[strings.Index(l, ":")+1:], ":"); ok && path != "/" {
			secrets = append(secrets, path)
		}
	}
	for _, s := range secrets {
		if strings.Contains(mountinfo, s) || strings.Contains(cgroups, s) {
			t.Errorf("the job's /proc names the host's %q", s)
		}
	}
	// Every mount's root is the root of its filesystem, or the very path
	// the job sees it at (the system directories), or, for /out and /tmp,
	// that path in its slot's subvolume of the node's job disk ("/7/out"):
	// a number, in a file system of the node's jobs alone.
	inJobDisk := regexp.MustCompile(`^/[0-9]+(/out|/tmp)$`)
	for _, l := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		if root, at := f[3], f[4]; root != "/" && root != at && !(inJobDisk.MatchString(root) && strings.HasSuffix(root, at)) {
			t.Errorf("mount at %s shows its root as %s", at, root)
		}
	}
	for _, l := range strings.Split(cgroups, "\n") {
		if l != "" && !strings.HasSuffix(l, ":/") {
			t.Errorf("the job's cgroup line %q is not its namespace's root", l)
		}
	}
	if runtime.GOOS == "linux" && !strings.Contains(mountinfo, " / / ") {
		t.Errorf("no root mount in the job's mount table:\n%s", mountinfo)
	}
}

// section is what a job printed between NAME_begin and NAME_end.
func section(out, name string) string {
	_, rest, _ := strings.Cut(out, name+"_begin\n")
	s, _, _ := strings.Cut(rest, name+"_end")
	return s
}

// TestDataReadOnlyWithoutOverlay: where the work directory cannot be an
// overlay's layer, /data is a bind mount, as read-only as the overlay.
func TestDataReadOnlyWithoutOverlay(t *testing.T) {
	t.Parallel()
	for _, bindData := range []bool{false, true} {
		e := newExecutor(t, Config{})
		e.bindData = bindData
		r := runJob(t, e, spec("data", sh(`
echo "in=$(cat /data/in)"
(echo pwned > /data/in) 2>/dev/null && echo wrote=in
(echo pwned > /data/x) 2>/dev/null && echo wrote=x
echo done=1
`)), func(ws executor.Job) { writeFile(t, filepath.Join(ws.Dirs().DataDir, "in"), "input") })
		got := lines(r.stdout)
		if got["done"] != "1" || got["in"] != "input" {
			t.Fatalf("bind %v: the job did not read its data: %q %s", bindData, r.stdout, r.stderr)
		}
		if w, ok := got["wrote"]; ok {
			t.Errorf("bind %v: the job wrote /data/%s", bindData, w)
		}
	}
}

// TestNoDataIsAnEmptyReadOnlyDir: a job given no data finds /data empty
// and cannot write to it, and what a job before it staged is not there.
func TestNoDataIsAnEmptyReadOnlyDir(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	script := sh(`
echo "files=$(ls -A /data | tr '\n' ,)"
(echo pwned > /data/x) 2>/dev/null && echo wrote=x
mkdir /data/d 2>/dev/null && echo wrote=d
echo done=1
`)
	runJob(t, e, spec("with-data", script), func(ws executor.Job) { writeFile(t, filepath.Join(ws.Dirs().DataDir, "in"), "input") })
	r := runJob(t, e, spec("no-data", script), nil)
	got := lines(r.stdout)
	if got["done"] != "1" {
		t.Fatalf("the job did not run to its end: %q %s", r.stdout, r.stderr)
	}
	if got["files"] != "" {
		t.Errorf("a job given no data sees %q in /data", got["files"])
	}
	if w, ok := got["wrote"]; ok {
		t.Errorf("a job given no data wrote /data/%s", w)
	}
}
