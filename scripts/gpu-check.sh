#!/bin/sh
# scripts/gpu-check.sh: does e31 give each GPU job its own GPU, alone, on a
# real machine? Run it as root on a machine with NVIDIA GPUs and their
# driver (nvidia-smi, libcuda, python3), from a clone:
#
#   sudo scripts/gpu-check.sh
#
# It builds e31 (or takes E31=/path/to/e31, built beforehand, on a machine
# that cannot reach the Go module proxy), starts `e31 dev` on the machine's
# GPUs with no GPU flag, and runs two `gpu: 1` jobs. Each runs
# `nvidia-smi -L` and allocates 1 GiB through libcuda with Python's ctypes
# (no CUDA toolkit), and stays a while. With two GPUs or more the two run at
# once and must get different devices; with one, the second must wait for
# a GPU (e31 status says so) and get it after. Then it checks that each
# job saw exactly one GPU, its own (nvidia-smi, CUDA and E31_GPU_UUIDS all
# name the UUID its hold record names, CUDA_VISIBLE_DEVICES=0), that the
# allocation worked, and that the audit passes. It takes a few minutes
# (most of it the build) and prints one verdict line, last:
#
#   gpu-check: PASS: 2 jobs at once on 8 GPUs, each saw only its own (GPU-…, GPU-…); records name them; audit passed
#   gpu-check: FAIL: <what>
#
# and exits 0 only on PASS. What it did is in $GPU_CHECK_LOG (default a
# file in the temporary directory it names on failure).
set -eu
cd "$(dirname "$0")/.."
state=$(mktemp -d "${TMPDIR:-/tmp}/e31-gpu-check.XXXXXX")
log=${GPU_CHECK_LOG:-$state/gpu-check.log}
: >"$log"
dev=""
verdict() {
	echo "gpu-check: $*"
}
fail() {
	verdict "FAIL: $* (details: $log)"
	exit 1
}
cleanup() {
	if [ -n "$dev" ] && kill -INT "$dev" 2>/dev/null; then
		wait "$dev" 2>/dev/null || true
	fi
	# The node's job disk is loop-mounted under the state directory.
	awk -v d="$state" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
	if [ -z "${GPU_CHECK_KEEP:-}" ] && [ "${passed:-}" = yes ]; then rm -rf "$state"; fi
}
trap cleanup EXIT
trap 'fail "interrupted"' INT TERM

# What the machine must have.
[ "$(id -u)" = 0 ] || fail "run as root: the sandbox needs it"
ngpus=$(find /proc/driver/nvidia/gpus -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
[ "$ngpus" -ge 1 ] || fail "no NVIDIA GPU: /proc/driver/nvidia/gpus lists none (is the driver loaded?)"
command -v nvidia-smi >/dev/null || fail "no nvidia-smi"
command -v python3 >/dev/null || fail "no python3 (the jobs use it to call libcuda)"
# CUDA needs the uvm module and its device node: load them if they are not.
if ! grep -q ' nvidia-uvm$' /proc/devices && command -v nvidia-modprobe >/dev/null; then
	nvidia-modprobe -u -c=0 >>"$log" 2>&1 || true
fi
grep -q ' nvidia-uvm$' /proc/devices || fail "the nvidia-uvm module is not loaded (modprobe nvidia-uvm): CUDA cannot allocate"
echo "== the machine: $ngpus GPU(s)" >>"$log"
nvidia-smi -L >>"$log" 2>&1 || true

# The binary.
e31=${E31:-}
if [ -z "$e31" ]; then
	e31="$state/e31"
	echo "== go build" >>"$log"
	# With NVML where cgo can build it, for the per-device usage; plain otherwise.
	if ! CGO_ENABLED=1 go build -tags nvml -o "$e31" ./cmd/e31 >>"$log" 2>&1; then
		go build -o "$e31" ./cmd/e31 >>"$log" 2>&1 || fail "go build ./cmd/e31 failed"
	fi
fi
[ -x "$e31" ] || fail "no e31 binary at $e31"

# e31 dev, with the machine's GPUs found by default.
echo "== e31 dev" >>"$log"
: >"$state/dev.log"
"$e31" dev --dir "$state/e31" --listen 127.0.0.1:0 --http "" --nodes 1 --node-cpu 4 --node-memory 16GiB \
	--node-disk 8GiB --grace 2s --users gpucheck >>"$state/dev.log" 2>&1 &
dev=$!
i=0
until url=$(sed -n 's/^e31 dev: NATS JetStream listening on \([^ ]*\).*/\1/p' "$state/dev.log") && [ -n "$url" ]; do
	i=$((i + 1))
	if [ $i -gt 600 ] || ! kill -0 "$dev" 2>/dev/null; then
		cat "$state/dev.log" >>"$log"
		fail "e31 dev did not start"
	fi
	sleep 0.1
done
export E31_NATS="$url"
export E31_CREDS="$state/e31/creds/gpucheck.creds"
grep -i 'gpu' "$state/dev.log" >>"$log" || true

# The job: what it sees, then 1 GiB through libcuda.
mkdir -p "$state/job/probe"
cat >"$state/job/probe/probe.sh" <<'EOF'
out=$E31_OUTPUT
nvidia-smi -L >"$out/smi.txt" 2>&1 || echo "nvidia-smi failed: $?" >>"$out/smi.txt"
python3 /data/probe/alloc.py >"$out/alloc.txt" 2>&1 || echo "alloc.py failed: $?" >>"$out/alloc.txt"
{
	echo "uuids=$E31_GPU_UUIDS"
	echo "cuda=$CUDA_VISIBLE_DEVICES"
	echo "order=$CUDA_DEVICE_ORDER"
	echo "dev=$(ls /dev | tr '\n' ' ')"
	echo "proc=$(ls /proc/driver/nvidia/gpus 2>/dev/null | tr '\n' ' ')"
} >"$out/env.txt"
sleep "$STAY"
EOF
cat >"$state/job/probe/alloc.py" <<'EOF'
# What CUDA sees, through the driver API alone: the devices, the first's
# UUID, and 1 GiB allocated on it.
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
def check(what, rc):
    if rc != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(rc, ctypes.byref(name))
        print("%s failed: %d %s" % (what, rc, name.value))
        sys.exit(1)
check("cuInit", cuda.cuInit(0))
count = ctypes.c_int()
check("cuDeviceGetCount", cuda.cuDeviceGetCount(ctypes.byref(count)))
dev = ctypes.c_int()
check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
raw = (ctypes.c_ubyte * 16)()
check("cuDeviceGetUuid", cuda.cuDeviceGetUuid(raw, dev))
h = bytes(raw).hex()
uuid = "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
ctx = ctypes.c_void_p()
check("cuCtxCreate", cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))
ptr = ctypes.c_uint64()
check("cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)))
check("cuMemsetD8", cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(7), ctypes.c_size_t(1 << 30)))
check("cuMemFree", cuda.cuMemFree_v2(ptr))
print("count=%d uuid=%s alloc=ok" % (count.value, uuid))
EOF
cat >"$state/job/job.yaml" <<'EOF'
name: gpu-check
work:
  command: ["/bin/sh", "/data/probe/probe.sh"]
  env: {STAY: "20", NVIDIA_VISIBLE_DEVICES: all}
data:
  - {name: probe, path: ./probe}
request: {cpu: 1, memory: 4GiB, gpu: 1, limit: 5m}
output: [smi.txt, alloc.txt, env.txt]
EOF

# status ID prints what e31 status says of a job.
status() { "$e31" status "$1" 2>>"$log" || true; }
# until_status ID WORDS SECONDS waits for e31 status to say WORDS.
until_status() {
	i=0
	until status "$1" | grep -q "$2"; do
		i=$((i + 1))
		[ $i -le $(($3 * 5)) ] || return 1
		sleep 0.2
	done
}

echo "== submitting" >>"$log"
a=$("$e31" submit --quiet "$state/job/job.yaml" 2>>"$log") || fail "e31 submit failed"
until_status "$a" running 120 || fail "the first job never ran: $(status "$a")"
b=$("$e31" submit --quiet "$state/job/job.yaml" 2>>"$log") || fail "e31 submit failed"
if [ "$ngpus" -ge 2 ]; then
	until_status "$b" running 60 || fail "the second job did not run beside the first on $ngpus GPUs: $(status "$b")"
	mode="2 jobs at once on $ngpus GPUs"
else
	until_status "$b" "waiting for a GPU" 30 || fail "with one GPU held, the second job's status does not say it waits for a GPU: $(status "$b")"
	mode="2 jobs, the second waiting for the one GPU"
fi
echo "a=$a b=$b ($mode)" >>"$log"

# check ID writes the job's device UUID to $state/ID.uuid, or fails naming
# what is wrong.
check() {
	"$e31" wait --json --timeout 5m "$1" >"$state/$1.json" 2>>"$log" || {
		cat "$state/$1.json" >>"$log"
		"$e31" logs "$1" >>"$log" 2>&1 || true
		fail "job $1 did not succeed: $(status "$1")"
	}
	"$e31" output "$1" -o "$state/$1.out" >>"$log" 2>&1 || fail "e31 output $1 failed"
	for f in smi.txt alloc.txt env.txt; do
		{ echo "-- $1 $f"; cat "$state/$1.out/$f"; } >>"$log"
	done
	python3 - "$state/$1.json" "$state/$1.out" >"$state/$1.uuid" <<'EOF' || fail "job $1: $(cat "$state/why")"
import json, os, re, sys
rec = json.load(open(sys.argv[1]))
out = sys.argv[2]
why = open(os.path.join(os.path.dirname(out), "why"), "w")
def bad(msg):
    why.write(msg)
    sys.exit(1)
att = rec["attempts"][-1]
gpus = att["held"].get("gpus") or []
if len(gpus) != 1:
    bad("the record names %r, want one device" % gpus)
u = gpus[0]
if att.get("gpu_seconds_by_device", {}).get(u) != att["held_seconds"]:
    bad("gpu_seconds_by_device %r, want %s for the %s s held" % (att.get("gpu_seconds_by_device"), u, att["held_seconds"]))
smi = [l for l in open(os.path.join(out, "smi.txt")).read().splitlines() if l.startswith("GPU ")]
if len(smi) != 1 or ("UUID: %s)" % u) not in smi[0]:
    bad("nvidia-smi -L in the job listed %r, want its own %s alone" % (smi, u))
alloc = open(os.path.join(out, "alloc.txt")).read().strip()
if alloc != "count=1 uuid=%s alloc=ok" % u:
    bad("CUDA in the job said %r, want one device, %s, and 1 GiB allocated" % (alloc, u))
env = dict(l.split("=", 1) for l in open(os.path.join(out, "env.txt")).read().splitlines() if "=" in l)
if env.get("uuids") != u or env.get("cuda") != "0" or env.get("order") != "PCI_BUS_ID":
    bad("the job was told %r, want E31_GPU_UUIDS=%s, CUDA_VISIBLE_DEVICES=0, PCI_BUS_ID" % (env, u))
nodes = [n for n in env.get("dev", "").split() if re.fullmatch(r"nvidia[0-9]+", n)]
if len(nodes) != 1:
    bad("the job's /dev has GPU nodes %r, want one" % nodes)
if len(env.get("proc", "").split()) != 1:
    bad("the job's /proc/driver/nvidia/gpus lists %r, want its own device alone" % env.get("proc"))
print(u)
EOF
}
check "$a"
check "$b"
ua=$(cat "$state/$a.uuid")
ub=$(cat "$state/$b.uuid")
if [ "$ngpus" -ge 2 ]; then
	[ "$ua" != "$ub" ] || fail "both jobs ran at once on $ua"
	python3 - "$state/$a.json" "$state/$b.json" <<'EOF' || fail "the two jobs did not run at once (see the records in $state)"
import json, sys
a, b = (json.load(open(p))["attempts"][-1] for p in sys.argv[1:])
sys.exit(0 if a["started_at"] < b["stopped_at"] and b["started_at"] < a["stopped_at"] else 1)
EOF
fi
E31_CREDS="$state/e31/creds/auditor.creds" "$e31" audit >>"$log" 2>&1 || fail "e31 audit found something"
passed=yes
verdict "PASS: $mode, each saw only its own ($ua, $ub); records name them; audit passed"
