#!/usr/bin/env python3
"""Writes nodes.json: the golden vectors of NODES.md (node cards and signed
stops), computed from the text alone, with the ed25519 of RFC 8032 section
6 written out below (hashlib only), apart from both Go implementations
(pkg/nodecard and the audit's), which are tested against them. Run from
this folder: python3 nodes.py > nodes.json"""
import base64, hashlib, json, struct
from datetime import datetime, timezone

# --- ed25519, as RFC 8032 section 6 gives it ---------------------------------
p = 2**255 - 19
q = 2**252 + 27742317777372353535851937790883648493
def inv(x): return pow(x, p - 2, p)
d = -121665 * inv(121666) % p
sqrt_m1 = pow(2, (p - 1) // 4, p)

def add(P, Q):
    A, B = (P[1] - P[0]) * (Q[1] - Q[0]) % p, (P[1] + P[0]) * (Q[1] + Q[0]) % p
    C, D = 2 * P[3] * Q[3] * d % p, 2 * P[2] * Q[2] % p
    E, F, G, H = B - A, D - C, D + C, B + A
    return (E * F, G * H, F * G, E * H)

def mul(s, P):
    Q = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            Q = add(Q, P)
        P = add(P, P)
        s >>= 1
    return Q

def recover_x(y, sign):
    x2 = (y * y - 1) * inv(d * y * y + 1)
    x = pow(x2, (p + 3) // 8, p)
    if (x * x - x2) % p != 0:
        x = x * sqrt_m1 % p
    if (x & 1) != sign:
        x = p - x
    return x

gy = 4 * inv(5) % p
gx = recover_x(gy, 0)
G = (gx, gy, 1, gx * gy % p)

def compress(P):
    zi = inv(P[2])
    x, y = P[0] * zi % p, P[1] * zi % p
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")

def expand(seed):
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a, h[32:]

def public(seed):
    return compress(mul(expand(seed)[0], G))

def sign(seed, msg):
    a, prefix = expand(seed)
    A = compress(mul(a, G))
    r = int.from_bytes(hashlib.sha512(prefix + msg).digest(), "little") % q
    R = compress(mul(r, G))
    h = int.from_bytes(hashlib.sha512(R + A + msg).digest(), "little") % q
    return R + int.to_bytes((r + h * a) % q, 32, "little")

# --- the canonical bytes of NODES.md -----------------------------------------
def u8(n): return struct.pack(">B", n)
def u32(n): return struct.pack(">I", n)
def u64(n): return struct.pack(">Q", n)
def i64(n): return struct.pack(">q", n)
def f64(x): return struct.pack(">d", float(x))
def s(x): b = x.encode(); return u32(len(b)) + b

def key_text(pub): return "ed25519:" + base64.b64encode(pub).decode()
def b64(b): return base64.b64encode(b).decode()

def card_bytes(c):
    t = datetime.fromisoformat(c["issued_at"].replace("Z", "+00:00"))
    return (b"e31.card.v1\n" + s(c["node"]) + f64(c["cpu"]) + i64(c["memory_bytes"]) + i64(c["gpu"])
            + i64(c["disk_bytes"]) + s(c.get("isolation", "")) + s(c["key"]) + i64(int(t.timestamp()))
            + s(c["issuer"]))

def stop_bytes(job, e):
    out = b"e31.stop.v1\n" + s(job)
    out += u64(e["attempt"]) + s(e["node"]) + f64(e["cpu"]) + i64(e["memory_bytes"]) + i64(e["gpu"]) + i64(e["disk_bytes"])
    out += s(e["outcome"])
    out += u8(0) if "exit_code" not in e else u8(1) + i64(e["exit_code"])
    out += s(e.get("reason", ""))
    u = e["usage"]
    out += f64(u["cpu_seconds"]) + i64(u["max_rss_bytes"])
    o = e["output"]
    files = o.get("files") or []
    out += u32(len(files))
    for f in files:
        out += s(f["path"]) + i64(f["bytes"]) + s(f["digest"]) + s(f.get("mode", ""))
    missing = o.get("missing") or []
    out += u32(len(missing)) + b"".join(s(m) for m in missing)
    out += i64(o.get("bytes", 0))
    declared = o.get("declared") or []
    out += u32(len(declared))
    for x in declared:
        out += s(x["path"]) + u8(1 if x.get("required") else 0)
    out += s(o.get("manifest", "")) + i64(o.get("count", 0))
    logs = e.get("logs")
    if logs is None:
        out += u8(0)
    else:
        out += u8(1) + i64(logs["stdout_bytes"]) + i64(logs["stderr_bytes"]) + u8(1 if logs["truncated"] else 0)
    return out

# --- the vectors --------------------------------------------------------------
seeds = {name: hashlib.sha256(("e31 golden " + name).encode()).digest()
         for name in ["operator", "node-1", "node-2"]}
keys = {name: key_text(public(seed)) for name, seed in seeds.items()}

cards = []
for node, cpu, mem, gpu, disk, iso, at in [
    ("node-1", 4, 8 << 30, 0, 100 << 30, "sandbox", "2026-12-02T12:00:00Z"),
    ("node-2", 0.5, 512 << 20, 2, 0, "", "2026-12-02T12:00:01.75Z"),
]:
    c = {"node": node, "cpu": cpu, "memory_bytes": mem, "gpu": gpu, "disk_bytes": disk}
    if iso:
        c["isolation"] = iso
    c.update({"key": keys[node], "issued_at": at, "issuer": keys["operator"]})
    canon = card_bytes(c)
    c["signature"] = b64(sign(seeds["operator"], canon))
    cards.append({"why": "a card the operator signed for " + node + (", its isolation absent, issued at a fraction of a second (not signed)" if not iso else ""),
                  "card": c, "canonical_hex": canon.hex()})

hold = '"attempt":1,"node":"node-1","cpu":1,"memory_bytes":536870912,"gpu":0,"disk_bytes":1073741824'
stops = [
    ("a stop that succeeded, with its exit code, output and logs", "vec-1", "node-1",
     '{' + hold + ',"outcome":"succeeded","exit_code":0,"usage":{"cpu_seconds":0.25,"max_rss_bytes":1048576},'
     '"output":{"files":[{"path":"count.txt","bytes":2,"digest":"sha256:' + "ab" * 32 + '","mode":"0644"}],"missing":[],"bytes":2,'
     '"declared":[{"path":"count.txt","required":true}],"manifest":"sha256:' + "cd" * 32 + '"},'
     '"logs":{"stdout_bytes":120,"stderr_bytes":0,"truncated":false}}'),
    ("a stop killed at its limit: no exit code, a reason, a file without a mode, a glob that matched nothing, no logs", "vec-2", "node-1",
     '{' + hold + ',"outcome":"limit_exceeded","reason":"killed at its limit of 10m0s","usage":{"cpu_seconds":600.5,"max_rss_bytes":536866816},'
     '"output":{"files":[{"path":"partial/out.bin","bytes":4096,"digest":"sha256:' + "ef" * 32 + '"}],"missing":["plots/*.png"],"bytes":8192,'
     '"declared":[{"path":"partial/*","required":false},{"path":"plots/*.png","required":false}],"count":2}}'),
    ("the same attempt on node-2, signed by node-2, with a negative exit code never written by e31 but signed as any", "vec-3", "node-2",
     '{"attempt":2,"node":"node-2","cpu":0.5,"memory_bytes":1,"gpu":2,"disk_bytes":0,"outcome":"failed","exit_code":-1,'
     '"usage":{"cpu_seconds":1e-3,"max_rss_bytes":0},"output":{"files":[],"missing":[],"bytes":0},'
     '"logs":{"stdout_bytes":1,"stderr_bytes":2,"truncated":true}}'),
]
out_stops = []
for why, job, node, body in stops:
    canon = stop_bytes(job, json.loads(body))
    out_stops.append({"why": why, "job": job, "body": body, "signer": node,
                      "canonical_hex": canon.hex(), "signature": b64(sign(seeds[node], canon))})

print(json.dumps({"versions": ["e31.card.v1", "e31.stop.v1"],
                  "keys": [{"name": n, "seed_hex": seeds[n].hex(), "public": keys[n]} for n in seeds],
                  "cards": cards, "stops": out_stops}, indent=1))
