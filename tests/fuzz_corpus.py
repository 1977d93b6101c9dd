"""Seeded mutants of the shared traces, for tests/test_fuzz.py.

Each mutant is built at test time from a small real trace: hostile types and ranges in event fields,
``args`` and top-level keys, truncation, byte flips, deep nesting, broken structure, odd file names,
files that are not regular files and decompression bombs. The same seed always gives the same corpus.
"""
from __future__ import annotations

import copy
import gzip
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import trace_path

BASES = ("a100_event_sync.json.gz", "compare_base.json.gz", "mi250_rocm_toy_train.json.gz",
         "cpu_only_gloo_rank34.json.gz", "legacy_capitalized_categories.json.gz",
         "mi300_torch_compile_triton.json.gz", "a100_triton_kernel.json.gz")
SEED = 20261130

HOSTILE: tuple[Any, ...] = (
    None, True, False, 0, -1, 1.5, -1e300, 1e300, 2**53 + 1, 2**63, 2**64 + 1, -(2**63) - 1, 2**70, -(2**70),
    1e17, -1e17, 9.3e15, 1e19, "", "x", "123", "-5", "1e5", "\u0000", "é🙂", "x" * 5000, [0, 1], [], {}, {"a": 1},
    [[[[1]]]], ["a", None], {"name": None},
)
EVENT_FIELDS = ("name", "cat", "ph", "pid", "tid", "ts", "dur", "id", "args", "bp")
ARG_KEYS = ("External id", "external id", "correlation", "device", "stream", "stream_id", "Input Dims",
            "Input type", "grid", "block", "Python id", "Python parent id", "Sequence number", "Fwd thread id",
            "bytes", "flops", "name", "labels")
TOP_KEYS = ("deviceProperties", "baseTimeNanoseconds", "distributedInfo", "traceName", "schemaVersion",
            "displayTimeUnit", "roctracer_version", "cuda_runtime_version")
DEVICE_PROPS: tuple[Any, ...] = (
    {"name": "A100"}, [1, 2], ["A100"], [None], [{"name": None}], [{"name": 5}], [{"name": ["x"]}],
    [{"name": "A100", "totalGlobalMem": "lots", "computeMajor": None, "numSms": -1}],
    [{"name": "H100", "numSms": 2**70, "maxThreadsPerBlock": "x", "smCount": [1]}], "A100", 7, [[{"name": "A"}]],
)


@dataclass
class Case:
    """One mutant: the file (or folder) to run, the CLI arguments, and how it was made."""

    family: str
    label: str
    path: Path
    argv: list[str]
    subprocess: bool = False  # may hang or eat memory on a broken build: run it in a bounded child
    env: dict[str, str] = field(default_factory=dict)


def load_doc(name: str) -> dict[str, Any]:
    with gzip.open(trace_path(name)) as fh:
        doc: dict[str, Any] = json.load(fh)
    return doc


def _events(doc: dict[str, Any]) -> list[dict[str, Any]]:
    evs = doc.get("traceEvents")
    return [e for e in evs if isinstance(e, dict)] if isinstance(evs, list) else []


def _pick_event(rng: random.Random, doc: dict[str, Any], *, complete: bool = True) -> dict[str, Any]:
    evs = [e for e in _events(doc) if not complete or e.get("ph") == "X"] or _events(doc)
    return rng.choice(evs)


def _dump(doc: Any) -> bytes:
    return json.dumps(doc).encode()


class Builder:
    """Writes mutants into ``folder`` and collects them as cases."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cases: list[Case] = []
        self.docs = {b: load_doc(b) for b in BASES}
        self.raw = {b: gzip.decompress(trace_path(b).read_bytes()) for b in BASES}

    def add(self, family: str, label: str, data: bytes | None = None, *, name: str | None = None,
            gz: bool = False, argv: list[str] | None = None, path: Path | None = None, **kw: Any) -> None:
        n = len(self.cases)
        if path is None:
            path = self.folder / (name or f"m{n:04d}-{family}.json{'.gz' if gz else ''}")
            assert data is not None
            path.write_bytes(gzip.compress(data, 1) if gz else data)
        self.cases.append(Case(family, label, path, _argv(n, path, argv), **kw))

    # --- families ---------------------------------------------------------------------------

    def event_types(self, rng: random.Random, count: int) -> None:
        for _ in range(count):
            base = rng.choice(BASES)
            doc = copy.deepcopy(self.docs[base])
            ev = _pick_event(rng, doc, complete=rng.random() < 0.7)
            key, value = rng.choice(EVENT_FIELDS), rng.choice(HOSTILE)
            ev[key] = value
            self.add("event_types", f"{base}: {key}={_short(value)}", _dump(doc))

    def arg_types(self, rng: random.Random, count: int) -> None:
        for _ in range(count):
            base = rng.choice(BASES)
            doc = copy.deepcopy(self.docs[base])
            ev = _pick_event(rng, doc, complete=rng.random() < 0.8)
            if not isinstance(ev.get("args"), dict):
                ev["args"] = {}
            key, value = rng.choice(ARG_KEYS), rng.choice(HOSTILE)
            ev["args"][key] = value
            self.add("arg_types", f"{base}: args[{key}]={_short(value)}", _dump(doc))

    def top_level(self, rng: random.Random, count: int) -> None:
        for _ in range(count):
            base = rng.choice(BASES)
            doc = copy.deepcopy(self.docs[base])
            key = rng.choice(TOP_KEYS)
            value = rng.choice(DEVICE_PROPS if key == "deviceProperties" and rng.random() < 0.7 else HOSTILE)
            doc[key] = value
            self.add("top_level", f"{base}: {key}={_short(value)}", _dump(doc))

    def ranges(self, rng: random.Random, count: int) -> None:
        """Times and ids at and past the edges of int64, double precision and nanosecond spans."""
        edges: tuple[Any, ...] = (2**53, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64, 2**64 + 7, 2**80, 1e16, 1e17,
                                  1e18, 9.2e15, 4.6e15, 1.7e15, -(2**63), 1e300, 0.0004)
        for _ in range(count):
            base = rng.choice(BASES)
            doc = copy.deepcopy(self.docs[base])
            what = rng.choice(("ts", "dur", "pid", "tid", "base", "span", "ext"))
            value = rng.choice(edges)
            if what == "base":
                doc["baseTimeNanoseconds"] = value if isinstance(value, int) else int(value)
            elif what == "span":  # one event far from the rest: the trace spans more than 2^53 ns
                ev = _pick_event(rng, doc)
                ev["ts"] = (ev.get("ts") or 0) + rng.choice((2**53 / 1000 + 5, 1e13, 9e12))
            elif what == "ext":
                _pick_event(rng, doc).setdefault("args", {})[rng.choice(("External id", "correlation"))] = value
            else:
                for ev in rng.sample(_events(doc), k=min(3, len(_events(doc)))):
                    ev[what] = value
            self.add("ranges", f"{base}: {what}={_short(value)}", _dump(doc))

    def listed(self) -> None:
        """The shapes issue 9 lists by name, on every kind of event, deterministically."""
        base = "a100_event_sync.json.gz"
        cats = ("kernel", "cpu_op", "cuda_runtime", "user_annotation", "gpu_memcpy")
        args: tuple[tuple[str, Any], ...] = (("Input Dims", 5), ("device", [0, 1]), ("flops", "x"),
                                             ("Input type", 7), ("stream", [1]), ("grid", "x"))
        for cat in cats:
            for key, value in ((None, None), *args):
                doc = copy.deepcopy(self.docs[base])
                ev = next((e for e in _events(doc) if e.get("cat") == cat and e.get("ph") == "X"), None)
                if ev is None:
                    continue
                if key is None:
                    ev["name"] = None
                else:
                    ev.setdefault("args", {})[key] = value
                label = f"{cat}: " + ("name=None" if key is None else f"args[{key}]={value!r}")
                name = f"m{len(self.cases):04d}-listed.json"
                shape = ["report", str(self.folder / name), "--format", "json", "--group-by", "shape", "--no-cache"]
                self.add("listed", label, _dump(doc), name=name, argv=shape if key == "Input Dims" else None)
        for value in DEVICE_PROPS:
            doc = copy.deepcopy(self.docs[base])
            doc["deviceProperties"] = value
            self.add("listed", f"deviceProperties={_short(value)}", _dump(doc))
        for key in ("pid", "tid", "ts"):
            doc = copy.deepcopy(self.docs[base])
            _pick_event(random.Random(1), doc)[key] = 2**64 + 1
            self.add("listed", f"{key} beyond 64 bits", _dump(doc))
        for value in (2**64 + 1, -(2**63), 2**62):
            doc = copy.deepcopy(self.docs[base])
            doc["baseTimeNanoseconds"] = value
            self.add("listed", f"baseTimeNanoseconds={value}", _dump(doc))
        for far in (2**53 / 1000 + 1, 2.4e15, 4e15):
            doc = copy.deepcopy(self.docs[base])
            _pick_event(random.Random(2), doc)["ts"] += far
            self.add("listed", f"one event {far:g} µs after the rest", _dump(doc))
        for dur in (1e17, 2**63, 1e16):
            doc = copy.deepcopy(self.docs[base])
            next(e for e in _events(doc) if e.get("cat") == "kernel")["dur"] = dur
            self.add("listed", f"kernel dur={dur:g}", _dump(doc))

    def truncation(self, rng: random.Random, count: int) -> None:
        for i in range(count):
            base = rng.choice(BASES)
            raw = self.raw[base]
            if i % 3 == 2:
                data = trace_path(base).read_bytes()
                cut = rng.randrange(1, len(data))
                self.add("truncation", f"{base}: gzip cut at {cut}", data[:cut], name=f"m{len(self.cases):04d}-cut.json.gz")
            else:
                cut = rng.randrange(0, len(raw))
                self.add("truncation", f"{base}: json cut at {cut}", raw[:cut], gz=bool(i % 2))

    def byte_flips(self, rng: random.Random, count: int) -> None:
        for _ in range(count):
            base = rng.choice(BASES)
            data = bytearray(self.raw[base])
            flips = rng.choice((1, 1, 2, 5, 20))
            for _ in range(flips):
                pos = rng.randrange(len(data))
                data[pos] = rng.choice((rng.randrange(256), ord("["), ord("{"), ord('"'), ord(","), ord("9"), 0xFF))
            self.add("byte_flips", f"{base}: {flips} flipped", bytes(data), gz=rng.random() < 0.5)

    def nesting(self, rng: random.Random) -> None:
        base = "a100_event_sync.json.gz"
        raw = self.raw[base]
        for depth in (50, 900, 5000, 100_000):
            deep = b"[" * depth + b"]" * depth
            self.add("nesting", f"{depth} nested [ as the document", deep)
            self.add("nesting", f"{depth} nested [ in traceEvents", b'{"traceEvents": ' + deep + b"}")
            self.add("nesting", f"{depth} nested [ in a top key", raw.replace(b"{", b'{"deep": ' + deep + b",", 1))
            for key in ("device", "Input Dims", "labels", "flops"):
                doc = copy.deepcopy(self.docs[base])
                ev = _pick_event(rng, doc)
                ev.setdefault("args", {})[key] = "@@DEEP@@"
                data = _dump(doc).replace(b'"@@DEEP@@"', deep)
                self.add("nesting", f"{depth} nested [ in args[{key}]", data)
            self.add("nesting", f"{depth} unclosed [", b'{"traceEvents": [' + b"[" * depth)

    def structure(self, rng: random.Random) -> None:
        doc = self.docs["compare_base.json.gz"]
        evs = _events(doc)
        variants: list[tuple[str, Any]] = [
            ("events are numbers", {"traceEvents": [1, 2, 3]}),
            ("events are strings", {"traceEvents": ["a", "b"]}),
            ("events hold null", {"traceEvents": [None, *evs[:5]]}),
            ("events are lists", {"traceEvents": [[1], [2]]}),
            ("traceEvents is an object", {"traceEvents": {"a": 1}}),
            ("traceEvents is null", {"traceEvents": None}),
            ("empty events", {"traceEvents": []}),
            ("bare list of events", evs),
            ("top level is a list of numbers", [1, 2, 3]),
            ("top level is a string", "trace"),
            ("top level is a number", 5),
            ("only metadata events", {"traceEvents": [e for e in evs if e.get("ph") == "M"]}),
            ("only flow events", {"traceEvents": [e for e in evs if e.get("ph") in ("s", "f")]}),
            ("all names null", {"traceEvents": [dict(e, name=None) for e in evs]}),
            ("all args null", {"traceEvents": [dict(e, args=None) for e in evs]}),
            ("every event twice", {"traceEvents": evs + evs}),
        ]
        for label, value in variants:
            self.add("structure", label, _dump(value))
        self.add("structure", "duplicate traceEvents keys", b'{"traceEvents": [], "traceEvents": [1]}')
        self.add("structure", "NaN and Infinity", _dump(doc).replace(b'"dur": ', b'"dur": NaN, "x": ', 1))
        self.add("structure", "lone surrogate escape", _dump(doc).replace(b'"name": "', b'"name": "\\ud800', 1))
        self.add("structure", "NUL bytes", b"\x00" * 1000)
        self.add("structure", "whitespace only", b" \n\t " * 100)
        self.add("structure", "UTF-16 BOM", b"\xff\xfe" + _dump(doc).decode().encode("utf-16-le"))
        self.add("structure", "UTF-8 BOM", b"\xef\xbb\xbf" + _dump(doc))
        self.add("structure", "gzip of garbage", b"\x1f\x8b" + bytes(rng.randrange(256) for _ in range(500)))
        self.add("structure", "gzip then garbage", gzip.compress(_dump(doc)) + b"garbage", name="trail.json.gz")
        self.add("structure", "two gzip members", gzip.compress(_dump(doc)[:200]) + gzip.compress(_dump(doc)[200:]),
                 name="members.json.gz")
        self.add("structure", "empty gzip", gzip.compress(b""), name="empty.json.gz")

    def duplicate_ids(self, rng: random.Random, count: int) -> None:
        """Ids that should be unique, repeated: correlations, External ids, flow ids, Python ids."""
        for _ in range(count):
            base = rng.choice(BASES)
            doc = copy.deepcopy(self.docs[base])
            evs = _events(doc)
            how = rng.choice(("correlation", "External id", "flow id", "Python id", "every id"))
            if how == "flow id":
                for e in evs:
                    if e.get("ph") in ("s", "f", "t"):
                        e["id"] = 1
            else:
                for e in rng.sample(evs, k=min(len(evs), max(2, len(evs) // 2))):
                    args = e.setdefault("args", {}) if isinstance(e.get("args", {}), dict) else {}
                    for key in (("correlation", "External id", "Python id") if how == "every id" else (how,)):
                        args[key] = 7
            self.add("dup_ids", f"{base}: {how} repeated", _dump(doc))

    def cycles(self, rng: random.Random, count: int) -> None:
        """Parent links that loop: a Python parent id naming itself or a descendant, flows that go round."""
        for _ in range(count):
            base = rng.choice(BASES)
            doc = copy.deepcopy(self.docs[base])
            evs = [e for e in _events(doc) if e.get("ph") == "X"]
            how = rng.choice(("self parent", "two-cycle", "ring", "flow ring"))
            picked = rng.sample(evs, k=min(len(evs), 6))
            if how == "flow ring":
                for k, e in enumerate(picked):
                    nxt = picked[(k + 1) % len(picked)]
                    doc["traceEvents"] += [{"ph": "s", "id": 900 + k, "pid": e.get("pid"), "tid": e.get("tid"),
                                            "ts": e.get("ts"), "cat": "ac2g", "name": "f"},
                                           {"ph": "f", "id": 900 + k, "pid": nxt.get("pid"), "tid": nxt.get("tid"),
                                            "ts": nxt.get("ts"), "cat": "ac2g", "name": "f", "bp": "e"}]
            else:
                n = {"self parent": 1, "two-cycle": 2, "ring": len(picked)}[how]
                for k, e in enumerate(picked[:n]):
                    args = e.setdefault("args", {}) if isinstance(e.get("args", {}), dict) else {}
                    args["Python id"] = 500 + k
                    args["Python parent id"] = 500 + (k + 1) % n
            self.add("cycles", f"{base}: {how}", _dump(doc))

    def time_units(self, rng: random.Random, count: int) -> None:
        """Times in other units or with float noise: displayTimeUnit, ns written as µs, ms, noise digits."""
        for _ in range(count):
            base = rng.choice(BASES)
            doc = copy.deepcopy(self.docs[base])
            how = rng.choice(("displayTimeUnit ns", "x1000", "/1000", "noise", "noise small", "negative"))
            for e in _events(doc):
                for key in ("ts", "dur"):
                    v = e.get(key)
                    if not isinstance(v, (int, float)) or isinstance(v, bool):
                        continue
                    if how == "x1000":
                        e[key] = v * 1000
                    elif how == "/1000":
                        e[key] = v / 1000
                    elif how == "noise":
                        e[key] = v + rng.uniform(1e-7, 4e-4)
                    elif how == "noise small" and key == "ts":
                        e[key] = (v % 1e6) + rng.uniform(1e-7, 4e-4)
                    elif how == "negative" and key == "ts":
                        e[key] = -v
            if how == "displayTimeUnit ns":
                doc["displayTimeUnit"] = rng.choice(("ns", "ms", "s", 5, None))
            self.add("time_units", f"{base}: {how}", _dump(doc))

    def overlaps(self, rng: random.Random, count: int) -> None:
        """Events on one thread that overlap without nesting; kernels that overlap on one stream; graph
        launches whose kernels run before them or overlap the next replay."""
        for _ in range(count):
            base = rng.choice(BASES)
            doc = copy.deepcopy(self.docs[base])
            evs = [e for e in _events(doc) if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))
                   and isinstance(e.get("dur"), (int, float))]
            how = rng.choice(("partial", "child longer", "same start", "graph replay"))
            for e in rng.sample(evs, k=min(len(evs), 8)):
                if how == "partial":
                    e["ts"] = e["ts"] + e["dur"] / 2
                    e["dur"] = e["dur"] * 3
                elif how == "child longer":
                    e["dur"] = e["dur"] * 50 + 10
                elif how == "same start":
                    e["ts"] = evs[0]["ts"]
                else:
                    e["name"] = "cudaGraphLaunch" if rng.random() < 0.5 else e.get("name")
                    e["ts"] = e["ts"] - rng.uniform(0, 50)
                    e.setdefault("args", {})["correlation"] = 42
            self.add("overlaps", f"{base}: {how}", _dump(doc))

    def int_edges(self, rng: random.Random) -> None:
        """64-bit edges in every numeric field profuse reads, strict and --lenient."""
        edges: tuple[Any, ...] = (2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 2**70, 1e308, -1e308, 1.5e19)
        fields = ("ts", "dur", "pid", "tid", "id", "External id", "correlation", "device", "stream", "Python id",
                  "Python parent id", "Sequence number", "Fwd thread id", "bytes", "flops")
        for k, key in enumerate(fields):
            for j, value in enumerate(edges):  # every edge in every field, half of them --lenient
                base = BASES[(k + len(self.cases)) % len(BASES)]
                doc = copy.deepcopy(self.docs[base])
                # an event that has the field already (a kernel's device, a flow's id), else any
                holding = [e for e in _events(doc) if key in e or key in (e.get("args") or {})]
                ev = rng.choice(holding) if holding else _pick_event(rng, doc, complete=key != "id")
                if key in EVENT_FIELDS:
                    ev[key] = value
                else:
                    ev.setdefault("args", {})[key] = value
                lenient = (j + k) % 2 == 1
                path_name = f"m{len(self.cases):04d}-int_edges.json"
                argv = ["report", str(self.folder / path_name), "--format", "json", "--no-cache",
                        *(["--lenient"] if lenient else [])]
                self.add("int_edges", f"{base}: {key}={_short(value)}{' lenient' if lenient else ''}", _dump(doc),
                         name=path_name, argv=argv)

    def names(self) -> None:
        data = self.raw["a100_event_sync.json.gz"]
        for raw_name in (b"t\xff\xfe.json", b"caf\xe9.json", b"a'b\";c.json", b"new\nline.json", b"-dash.json"):
            self.add("names", f"file name {raw_name!r}", data, name=os.fsdecode(raw_name))
        sub = self.folder / os.fsdecode(b"bundle-\xff")
        sub.mkdir()
        (sub / "trace.json.gz").write_bytes(gzip.compress(data, 1))
        self.add("names", "bundle folder with a non-UTF-8 name", path=sub)

    def special_files(self) -> None:
        fifo = self.folder / "fifo.json"
        os.mkfifo(fifo)
        self.add("special", "a FIFO as the trace", path=fifo, subprocess=True)
        self.add("special", "/dev/zero as the trace", path=Path("/dev/zero"), subprocess=True)
        link = self.folder / "zero.json.gz"
        link.symlink_to("/dev/zero")
        self.add("special", "a link to /dev/zero", path=link, subprocess=True)
        bundle = self.folder / "bundle-dir"
        (bundle / "trace.json.gz").mkdir(parents=True)
        self.add("special", "a bundle whose trace.json.gz is a folder", path=bundle)
        fifo_bundle = self.folder / "bundle-fifo"
        fifo_bundle.mkdir()
        os.mkfifo(fifo_bundle / "trace.json.gz")
        self.add("special", "a bundle whose trace.json.gz is a FIFO", path=fifo_bundle, subprocess=True)
        self.add("special", "a folder named like a trace", path=(self.folder / "dir.json.gz"), subprocess=False)
        (self.folder / "dir.json.gz").mkdir()

    def bundles(self) -> None:
        """Bundle folders whose optional side files (meta.json, saved kernels) are hostile."""
        gz = trace_path("compare_base.json.gz").read_bytes()  # no deviceProperties: measured peaks are used
        metas: tuple[bytes, ...] = (
            b"[1]", b"null", b"{}", b"\xff\xfe\x00", b"[" * 100_000,
            b'{"schema": "profuse.bundle/1", "status": {}, "error": [1], "run": "x", "peaks": "x"}',
            b'{"peaks": {"matmul_tflops_fp32": 1e400, "copy_bandwidth_gbps": 1}}',
            b'{"peaks": {"matmul_tflops_fp32": "x", "copy_bandwidth_gbps": -1}}',
            b'{"peaks": {"matmul_tflops_fp32": 10, "copy_bandwidth_gbps": 0}}',
        )
        for i, meta in enumerate(metas):
            b = self.folder / f"bundle-meta-{i}"
            b.mkdir()
            (b / "trace.json.gz").write_bytes(gz)
            (b / "meta.json").write_bytes(meta)
            self.add("bundles", f"meta.json = {meta[:40]!r}", path=b)
        for what in ("meta.json FIFO", "saved kernel FIFO", "saved kernel -> /dev/zero"):
            b = self.folder / f"bundle-{what.replace(' ', '-').replace('/', '')}"
            (b / "artifacts" / "inductor").mkdir(parents=True)
            (b / "trace.json.gz").write_bytes(gz)
            if what == "meta.json FIFO":
                os.mkfifo(b / "meta.json")
            elif what == "saved kernel FIFO":
                os.mkfifo(b / "artifacts" / "inductor" / "k.py")
            else:
                (b / "artifacts" / "inductor" / "k.py").symlink_to("/dev/zero")
            self.add("bundles", what, path=b, subprocess=True)

    def bombs(self) -> None:
        """Gzip members of 1 MiB of spaces, concatenated: about 1 KB in, 1 MiB out, each."""
        member = gzip.compress(b" " * (1 << 20), 9)
        for mib, label in ((2048, "2 MB gzip inflating to 2 GiB"), (300, "inflating to 300 MiB")):
            data = gzip.compress(b'{"traceEvents": [', 9) + member * mib + gzip.compress(b"]}", 9)
            self.add("bombs", label, data, name=f"bomb{mib}.json.gz", subprocess=True,
                     env={"PROFUSE_MAX_TRACE_BYTES": str(64 << 20)})
        sparse = self.folder / "sparse.json"
        with open(sparse, "wb") as fh:
            fh.write(b'{"traceEvents": [')
            fh.truncate(3 << 30)  # 3 GiB of NUL bytes that take no disk
        self.add("bombs", "a 3 GiB plain JSON file", path=sparse, subprocess=True,
                 env={"PROFUSE_MAX_TRACE_BYTES": str(64 << 20)})


class Round4:
    """The structure-aware families of the fourth attack round (issue 45): flows to missing or cyclic
    events, correlation ids repeated across devices, nested/overlapping/out-of-order steps, graph launches
    without kernels, extreme numbers, hostile unicode, lying device properties, malformed memory events,
    mixed units, top-level shapes, gzip oddities and 10^6 tiny events."""

    def __init__(self, b: Builder, rng: random.Random) -> None:
        self.b, self.rng = b, rng

    def _doc(self) -> tuple[str, dict[str, Any]]:
        base = self.rng.choice(BASES)
        return base, copy.deepcopy(self.b.docs[base])

    def _complete(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        return [e for e in _events(doc) if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))
                and isinstance(e.get("dur"), (int, float))]

    def flows(self, count: int) -> None:
        """Flow arrows whose ends are missing, point at no event, at themselves or loop."""
        for _ in range(count):
            base, doc = self._doc()
            evs = self._complete(doc)
            e = self.rng.choice(evs)
            how = self.rng.choice(("start only", "end only", "end before start", "end at no event", "self loop",
                                   "many ends"))
            fid, ts = 77_000 + self.rng.randrange(1000), e["ts"]
            start = {"ph": "s", "id": fid, "pid": e.get("pid"), "tid": e.get("tid"), "ts": ts, "cat": "ac2g",
                     "name": "ac2g"}
            end = {**start, "ph": "f", "bp": "e"}
            if how == "start only":
                flows = [start]
            elif how == "end only":
                flows = [end]
            elif how == "end before start":
                flows = [start, {**end, "ts": ts - 1e6}]
            elif how == "end at no event":
                flows = [start, {**end, "pid": 999_999, "tid": 999_999, "ts": ts + 1e9}]
            elif how == "self loop":
                flows = [start, end]
            else:
                flows = [start] + [{**end, "ts": ts + k} for k in range(50)]
            doc["traceEvents"] += flows
            self.b.add("flows", f"{base}: {how}", _dump(doc))

    def correlation_across_devices(self, count: int) -> None:
        """The same correlation id on kernels of two devices, and on launches of two threads."""
        for _ in range(count):
            base, doc = self._doc()
            dev = [e for e in _events(doc) if isinstance(e.get("args"), dict) and "correlation" in e["args"]]
            if len(dev) < 2:
                continue
            for k, e in enumerate(self.rng.sample(dev, k=min(len(dev), 12))):
                e["args"]["correlation"] = 5
                if "device" in e["args"]:
                    e["args"]["device"] = k % 3
            self.b.add("corr_devices", f"{base}: one correlation on three devices", _dump(doc))

    def steps(self, count: int) -> None:
        """ProfilerStep marks nested, overlapping, out of order, zero-length or repeated."""
        for _ in range(count):
            base, doc = self._doc()
            evs = self._complete(doc)
            t0 = min(e["ts"] for e in evs)
            t1 = max(e["ts"] + e["dur"] for e in evs)
            span = max(t1 - t0, 1)
            how = self.rng.choice(("nested", "overlapping", "out of order", "zero length", "same number",
                                   "outside the trace"))
            pid, tid = evs[0].get("pid"), evs[0].get("tid")
            mk = lambda n, a, d: {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": pid,
                                  "tid": tid, "ts": a, "dur": d, "args": {}}
            steps = {"nested": [mk(1, t0, span), mk(2, t0 + span / 4, span / 2)],
                     "overlapping": [mk(1, t0, span * 0.6), mk(2, t0 + span * 0.4, span * 0.6)],
                     "out of order": [mk(3, t0, span / 3), mk(1, t0 + span / 3, span / 3),
                                      mk(2, t0 + 2 * span / 3, span / 3)],
                     "zero length": [mk(1, t0, 0), mk(2, t0 + span / 2, 0)],
                     "same number": [mk(1, t0, span / 2), mk(1, t0 + span / 2, span / 2)],
                     "outside the trace": [mk(1, t1 + span * 10, span), mk(2, t0 - span * 10, span / 2)]}[how]
            doc["traceEvents"] += steps
            self.b.add("steps", f"{base}: {how}", _dump(doc))

    def graph_launches(self, count: int) -> None:
        """cudaGraphLaunch / hipGraphLaunch calls with no kernel, or with a correlation no kernel has."""
        for _ in range(count):
            base, doc = self._doc()
            evs = self._complete(doc)
            for e in self.rng.sample(evs, k=min(len(evs), 5)):
                doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": self.rng.choice(
                    ("cudaGraphLaunch", "hipGraphLaunch", "cudaGraphLaunch_v10000")), "pid": e.get("pid"),
                    "tid": e.get("tid"), "ts": e["ts"], "dur": 3, "args": {"correlation": 10**9 + self.rng.randrange(9),
                                                                        "graph id": 1}})
            self.b.add("graph_empty", f"{base}: graph launches without kernels", _dump(doc))

    def extreme_numbers(self, count: int) -> None:
        """Figures at the edge of what a double holds, in fields the analysis multiplies and sums."""
        values: tuple[Any, ...] = (1e308, 5e-324, 2**63 - 1, 1e-300, 1.7976931348623157e308, 4.9e-324, 1e15, 1e18)
        for _ in range(count):
            base, doc = self._doc()
            evs = self._complete(doc)
            for e in self.rng.sample(evs, k=min(len(evs), 4)):
                key = self.rng.choice(("dur", "ts", "flops", "bytes", "Input Dims"))
                v = self.rng.choice(values)
                if key in ("dur", "ts"):
                    e[key] = v
                elif key == "Input Dims":
                    e.setdefault("args", {})[key] = [[2**62, 2**62], [10**30]]
                else:
                    e.setdefault("args", {})[key] = v
            self.b.add("extreme", f"{base}: extreme figures", _dump(doc))

    def unicode(self) -> None:
        """Names with bidi overrides, zero-width and combining marks, lone surrogates (escaped in JSON),
        noncharacters, NUL, very wide characters and 64 KiB names."""
        shapes = ("\\u202eevil\\u202c", "\\u200b\\u200d\\ufeff", "e\\u0301\\u0301\\u0301", "\\ud800", "\\udfff\\ud800",
                  "\\uffff\\ufffe", "a\\u0000b", "\\u6a21\\u578b" * 40, "\\u001b[2J\\u009b31m", "x" * 65536,
                  "\\ud83d\\ude42" * 300)
        for k, shape in enumerate(shapes):
            base = BASES[k % len(BASES)]
            text = self.b.raw[base].decode()
            # every name of a few events, as JSON text (lone surrogates cannot be Python str in the doc)
            text = text.replace('"name": "aten::', f'"name": "{shape}aten::', 3)
            text = text.replace('"name":"aten::', f'"name":"{shape}aten::', 3)
            self.b.add("unicode", f"{base}: {shape[:24]}", text.encode())

    def lying_device(self, count: int) -> None:
        """deviceProperties that disagree with the kernels: a CPU name on a GPU trace, 0 or 10^9 SMs, a
        memory size of 1 byte, two devices with one id, an AMD name on CUDA kernels."""
        lies: tuple[Any, ...] = (
            [{"id": 0, "name": "Intel Xeon", "totalGlobalMem": 1, "numSms": 0}],
            [{"id": 0, "name": "AMD Instinct MI300X", "computeMajor": 9, "numSms": 10**9}],
            [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}, {"id": 0, "name": "NVIDIA A100-SXM4-40GB"}],
            [{"id": 5, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": -1, "maxThreadsPerBlock": 0}],
            [{"id": 0, "name": "", "totalGlobalMem": 2**70, "computeMajor": -3, "numSms": 1.5}],
        )
        for _ in range(count):
            base, doc = self._doc()
            doc["deviceProperties"] = self.rng.choice(lies)
            self.b.add("lying_dev", f"{base}: lying deviceProperties", _dump(doc))

    def memory_events(self, count: int) -> None:
        """[memory] instants with negative, absurd, mistyped or missing figures, and frees before allocs."""
        for _ in range(count):
            base, doc = self._doc()
            evs = self._complete(doc)
            e = self.rng.choice(evs)
            how = self.rng.choice(("negative", "huge", "typed", "missing", "free first", "device id"))
            mem: list[dict[str, Any]] = []
            for k in range(6):
                args: dict[str, Any] = {"Addr": 4096 * (k + 1), "Bytes": 1 << 20, "Total Allocated": (k + 1) << 20,
                                        "Total Reserved": 8 << 20, "Device Type": 1, "Device Id": 0}
                if how == "negative":
                    args["Bytes"], args["Total Allocated"] = -(1 << 40), -(1 << 40)
                elif how == "huge":
                    args["Total Allocated"] = 2**64 + k
                elif how == "typed":
                    args["Bytes"] = self.rng.choice(("1MB", None, [1], 1.5, True))
                elif how == "missing":
                    args.pop(self.rng.choice(list(args)))
                elif how == "free first":
                    args["Bytes"] = -(1 << 20)
                else:
                    args["Device Id"] = self.rng.choice((2**40, -7, 2**31, "cuda:0"))
                mem.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": e.get("pid"),
                            "tid": e.get("tid"), "ts": e["ts"] + k, "args": args})
            doc["traceEvents"] += mem
            self.b.add("memory", f"{base}: [memory] {how}", _dump(doc))

    def mixed_units(self, count: int) -> None:
        """Device events in ns beside host events in µs (or the reverse), and a trace shifted by 10^15."""
        for _ in range(count):
            base, doc = self._doc()
            how = self.rng.choice(("device x1000", "host x1000", "device shifted", "baseTime huge"))
            for e in _events(doc):
                cat = str(e.get("cat", "")).lower()
                device = cat in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
                ts, dur = e.get("ts"), e.get("dur")
                if not isinstance(ts, (int, float)) or isinstance(ts, bool):
                    continue
                if (how == "device x1000" and device) or (how == "host x1000" and not device):
                    e["ts"] = ts * 1000
                    if isinstance(dur, (int, float)) and not isinstance(dur, bool):
                        e["dur"] = dur * 1000
                elif how == "device shifted" and device:
                    e["ts"] = ts + 1e15
            if how == "baseTime huge":
                doc["baseTimeNanoseconds"] = 2**63 - 1
            self.b.add("mixed_units", f"{base}: {how}", _dump(doc))

    def top_shapes(self) -> None:
        """The document's top level as something other than an object with a traceEvents list."""
        doc = self.b.docs[BASES[0]]
        shapes: tuple[Any, ...] = (doc["traceEvents"], {"traceEvents": {"0": doc["traceEvents"][0]}},
                                   {"traceEvents": None}, {"traceEvents": [doc["traceEvents"]]}, [doc], "trace", 7,
                                   {"traceEvents": [], "deviceProperties": []}, {"TRACEEVENTS": doc["traceEvents"]},
                                   {"traceEvents": doc["traceEvents"], "traceEvents ": []})
        for k, shape in enumerate(shapes):
            self.b.add("top_shapes", f"top level #{k}: {type(shape).__name__}", _dump(shape))

    def gzip_oddities(self) -> None:
        """Gzip with a header name and comment, an extra field, a wrong CRC, a wrong size, level 0, a
        zero-length member in the middle, and a plain JSON file named .gz."""
        raw = self.b.raw[BASES[1]]
        good = gzip.compress(raw, 6)
        wrong_crc = good[:-8] + bytes(4) + good[-4:]
        wrong_size = good[:-4] + (123).to_bytes(4, "little")
        named = bytearray(gzip.compress(raw, 1))
        named[3] |= 0x08 | 0x10  # FNAME | FCOMMENT: insert both after the 10-byte header
        named[10:10] = b"trace.json\x00a comment\x00"
        extra = bytearray(gzip.compress(raw, 1))
        extra[3] |= 0x04
        extra[10:10] = (6).to_bytes(2, "little") + b"AB\x02\x00xy"
        cases = {"wrong CRC": wrong_crc, "wrong size": wrong_size, "name and comment": bytes(named),
                 "extra field": bytes(extra), "level 0": gzip.compress(raw, 0),
                 "empty member between": gzip.compress(raw[:100]) + gzip.compress(b"") + gzip.compress(raw[100:]),
                 "plain JSON named .gz": raw}
        for label, data in cases.items():
            self.b.add("gzip", label, data, name=f"m{len(self.b.cases):04d}-gzip.json.gz")

    def tiny_events(self) -> None:
        """10^6 one-µs CPU ops on one thread, nested two deep: the load and the report stay bounded."""
        parts = ['{"traceEvents": [']
        row = ('{{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":{t},"dur":3}},'
               '{{"ph":"X","cat":"cpu_op","name":"aten::empty","pid":1,"tid":1,"ts":{t1},"dur":1}}')
        parts.append(",".join(row.format(t=4 * k, t1=4 * k + 1) for k in range(500_000)))
        parts.append("]}")
        self.b.add("tiny_events", "10^6 tiny CPU ops", "".join(parts).encode(), gz=True, subprocess=True)


def round4(b: Builder, rng: random.Random) -> None:
    """Every family of the fourth round, deterministic for ``rng``."""
    r = Round4(b, rng)
    r.flows(12)
    r.correlation_across_devices(6)
    r.steps(12)
    r.graph_launches(6)
    r.extreme_numbers(8)
    r.unicode()
    r.lying_device(6)
    r.memory_events(12)
    r.mixed_units(8)
    r.top_shapes()
    r.gzip_oddities()
    r.tiny_events()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 40 else text[:37] + "..."


def _argv(n: int, path: Path, extra: list[str] | None) -> list[str]:
    """Most mutants go through ``report --format json``; some through --lenient, ``sql``, and the cache."""
    if extra is not None:
        return extra
    p = str(path)
    if n % 7 == 3:
        return ["sql", p, "SELECT kind, count(*) AS n, sum(dur) AS dur FROM events GROUP BY kind", "--format", "json",
                "--no-cache"]
    if n % 5 == 1:
        return ["report", p, "--format", "json", "--lenient", "--no-cache"]
    if n % 11 == 4:
        return ["report", p, "--format", "json"]  # writes and then reads a cache
    return ["report", p, "--format", "json", "--no-cache"]


def build_corpus(folder: Path) -> list[Case]:
    """Every mutant, deterministic for a given SEED."""
    rng = random.Random(SEED)
    b = Builder(folder)
    families: list[Callable[[], None]] = [
        b.listed, lambda: b.event_types(rng, 80), lambda: b.arg_types(rng, 70), lambda: b.top_level(rng, 40),
        lambda: b.ranges(rng, 40), lambda: b.truncation(rng, 24), lambda: b.byte_flips(rng, 40),
        lambda: b.nesting(rng), b.names, lambda: b.structure(rng), b.special_files, b.bundles, b.bombs,
        # structure-aware families (what an outside probe's 318 mutants found): repeated ids, parent
        # cycles, time units and float noise, overlapping events and graph replays, 64-bit edges
        lambda: b.duplicate_ids(rng, 10), lambda: b.cycles(rng, 10), lambda: b.time_units(rng, 12),
        lambda: b.int_edges(rng),
        # the fourth round's families (issue 45)
        lambda: round4(b, random.Random(SEED + 4)),
    ]
    for make in families:
        make()
    return b.cases


def build_overlaps(folder: Path) -> list[Case]:
    """The overlapping-events and graph-replay family (kept apart: see test_fuzz_overlaps)."""
    b = Builder(folder)
    b.overlaps(random.Random(SEED + 1), 16)
    return b.cases
