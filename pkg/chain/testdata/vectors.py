#!/usr/bin/env python3
"""Writes vectors.json: the golden vectors of SPEC.md, computed from the
spec with hashlib alone, apart from both Go implementations (the ledger's
and the audit's), which are tested against them. Run from this folder:
python3 vectors.py > vectors.json"""
import base64, hashlib, json, struct

VERSION = "e31.event.v1"

def u32(n): return struct.pack(">I", n)
def u64(n): return struct.pack(">Q", n)
def s(b):
    if isinstance(b, str): b = b.encode()
    return u32(len(b)) + b

def kept(name):
    return name.lower().startswith("ce-") or name.lower() == "content-type"

def canonical(m):
    body = base64.b64decode(m["body_base64"])
    names = sorted((n for n in m["headers"] if kept(n)), key=lambda n: n.encode())
    out = (VERSION + "\n").encode() + u64(m["seq"]) + s(m["subject"]) + u32(len(names))
    for n in names:
        vs = m["headers"][n]
        out += s(n) + u32(len(vs)) + b"".join(s(v) for v in vs)
    return out + s(body)

def ce(job, kind, typ, t="2026-12-02T12:00:00.1Z", extra=None):
    h = {"ce-specversion": ["1.0"], "ce-id": [job + "/" + kind], "ce-type": [typ],
         "ce-source": ["e31/submit/host-1"], "ce-time": [t], "ce-subject": [job],
         "content-type": ["application/json"], "Nats-Msg-Id": [job + "/" + kind]}
    h.update(extra or {})
    return h

def b64(b):
    if isinstance(b, str): b = b.encode()
    return base64.b64encode(b).decode()

submitted = '{"submitter":"alice","spec":{"work":{"command":["/bin/true"]},"request":{"cpu":1,"memory_bytes":536870912,"gpu":0,"disk_bytes":1073741824,"limit_seconds":600}}}'
messages = [
    # The worked example: a JobSubmitted as SUBMIT stores it.
    {"why": "a JobSubmitted as SUBMIT stores it; Nats-Msg-Id is left out",
     "seq": 7, "subject": "e31.job.vec-1.submitted",
     "headers": ce("vec-1", "submitted", "e31.job.submitted.v1"), "body_base64": b64(submitted)},
    {"why": "header names keep their case and sort bytewise (upper case first); kept in any case",
     "seq": 8, "subject": "e31.job.vec-1.held.n1",
     "headers": {"Ce-Type": ["e31.job.held.v1"], "ce-id": ["vec-1/held/1"], "CE-SOURCE": ["e31/rent"],
                 "Content-Type": ["application/json"], "ce-subject": ["vec-1"]},
     "body_base64": b64('{"attempt":1,"node":"n1"}')},
    {"why": "values in stored order, several for one name; transport headers left out",
     "seq": 9, "subject": "e31.job.vec-1.started",
     "headers": {"ce-x": ["b", "a", ""], "ce-id": ["vec-1/started/1"],
                 "Nats-Expected-Last-Subject-Sequence": ["8"], "Nats-Msg-Id": ["vec-1/started/1"],
                 "ce-": ["empty name after the prefix"], "cex": ["not an attribute"]},
     "body_base64": b64('{"attempt": 1}')},
    {"why": "no headers at all, an empty body",
     "seq": 10, "subject": "e31.job.vec-1.requested.mallory", "headers": {}, "body_base64": ""},
    {"why": "a body that is not JSON, with bytes that are not UTF-8: digested as stored",
     "seq": 12, "subject": "e31.job.vec-1.requested.mallory",
     "headers": {"ce-type": ["e31.job.requested.v1"]}, "body_base64": b64(b"\x00\xff not json \xc3\x28")},
    {"why": "a node event; a name that differs from another only in case is a header of its own",
     "seq": 13, "subject": "e31.node.n1.announced",
     "headers": {"ce-id": ["n1/announced/b1"], "Ce-Id": ["n1/announced/b1"], "ce-type": ["e31.node.announced.v1"]},
     "body_base64": b64('{"node":"n1","boot":"b1","cpu":2}')},
]

chain = bytes(32)
for m in messages:
    c = canonical(m)
    d = hashlib.sha256(c).digest()
    chain = hashlib.sha256(chain + d).digest()
    m["canonical_hex"] = c.hex()
    m["digest"] = "sha256:" + d.hex()
    m["head"] = "%d:%s" % (m["seq"], chain.hex())

digests = {m["seq"]: hashlib.sha256(canonical(m)).digest() for m in messages}
records = []
for seqs in ([7], [7, 8, 9], [9, 8]):
    records.append({"why": "events_digest of a record built from these events, in this order",
                    "events": seqs,
                    "events_digest": "sha256:" + hashlib.sha256(b"".join(digests[q] for q in seqs)).hexdigest()})

print(json.dumps({"version": VERSION, "messages": messages, "records": records}, indent=1))
