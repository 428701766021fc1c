"""The fuzz corpus: bad graphs, plans, MiniMalloc CSVs and memory snapshots, made from one
small valid graph (``mlp-b8-steady``, a zoo graph, so ``roam execute`` applies) and its plan.

Every case is small (at most a few hundred KB, gzip bombs included) and generated here, not
committed.  Each names what it breaks and what roam must do with it:

* ``refuse``: every reader refuses it with a one-line error (CLI: exit status 2);
* ``false``: a plan file that parses but states something false or breaks a rule: ``roam
  check`` lists violations (exit 1), and nothing else uses it (``execute``, ``report``: exit 2);
* ``accept``: odd but harmless, read as documented (a byte-order mark, frames that are not a
  list).

Special cases are paths rather than bytes: a FIFO, ``/dev/zero``, a directory, a missing file.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from tests.paths import SAMPLE_DIR

__all__ = ["BASE_GRAPH", "Case", "base_graph_dict", "base_plan", "cases", "write_case"]

BASE_GRAPH = SAMPLE_DIR / "mlp-b8-steady.json.gz"
#: Limits the CLI runs use (environment), so that small bombs and big graphs pass them.
FUZZ_ENV = {"ROAM_MAX_JSON_BYTES": str(16 << 20), "ROAM_MAX_OPS": "100000"}
#: A gzip bomb of the corpus expands to this (twice the limit above).
BOMB_BYTES = 32 << 20


@dataclass(frozen=True)
class Case:
    """One input: ``kind`` (``graph``, ``plan``, ``csv``, ``snapshot``), the bytes (or a
    ``special`` path kind), and the expected outcome (``refuse`` or ``false``)."""

    name: str
    kind: str
    data: bytes = b""
    special: str = ""
    expect: str = "refuse"


@cache
def base_graph_dict() -> dict[str, Any]:
    """The base graph's JSON object."""
    return json.loads(gzip.decompress(BASE_GRAPH.read_bytes()))


@cache
def base_plan() -> Any:
    """A valid eager plan of the base graph (quick: no solver)."""
    import roam_core as rc

    g = rc.load_graph(BASE_GRAPH)
    return rc.make_plan(g, rc.PlannerConfig(workers=1, solve_layout=False), method="eager")


def _plan_dict() -> dict[str, Any]:
    from roam_core.formats.plan_io import plan_to_dict

    return plan_to_dict(base_plan())


def _j(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@cache
def _bomb(n_bytes: int) -> bytes:
    """Gzip of ``n_bytes`` zero bytes (about 1/1000 of that)."""
    return gzip.compress(b"0" * n_bytes, compresslevel=9)


def _graph_edit(name: str, edit: Callable[[dict[str, Any]], None]) -> Case:
    d = copy.deepcopy(base_graph_dict())
    edit(d)
    return Case(name, "graph", _j(d))


def _op(d: dict[str, Any], i: int = 3) -> dict[str, Any]:
    return d["ops"][i]


def _act(d: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in d["tensors"] if t.get("producer"))


def _graph_cases() -> Iterator[Case]:
    raw = _j(base_graph_dict())
    yield Case("graph: empty file", "graph", b"")
    yield Case("graph: not JSON", "graph", b"{nope")
    yield Case("graph: truncated", "graph", raw[: len(raw) // 2])
    yield Case("graph: invalid UTF-8", "graph", b"\xff\xfe" + raw)
    yield Case("graph: a JSON array", "graph", b"[1, 2]")
    yield Case("graph: nested 100k deep", "graph", b"[" * 100_000 + b"]" * 100_000)
    yield Case("graph: ops nested 100k deep", "graph",
               b'{"format":"roam-graph","schema_version":2,"ops":[' + b"[" * 100_000
               + b"]" * 100_000 + b'],"tensors":[]}')
    yield Case("graph: trailing garbage", "graph", raw + b" xyz")
    yield Case("graph: a byte-order mark (read as UTF-8)", "graph", b"\xef\xbb\xbf" + raw,
               expect="accept")
    yield Case("graph: not gzip after the magic", "graph", b"\x1f\x8b\x08\x00garbage" * 4)
    yield Case("graph: gzip bomb (32 MiB of zeros)", "graph", _bomb(BOMB_BYTES))
    yield Case("graph: duplicate member 'ops'", "graph",
               raw[:-1] + b',"ops":[]}')
    edits: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
        ("size_bytes 2**63", lambda d: _act(d).update(size_bytes=2**63)),
        ("size_bytes 2**62", lambda d: _act(d).update(size_bytes=2**62)),
        ("size_bytes -1", lambda d: _act(d).update(size_bytes=-1)),
        ("size_bytes '12'", lambda d: _act(d).update(size_bytes="12")),
        ("size_bytes 1.5", lambda d: _act(d).update(size_bytes=1.5)),
        ("size_bytes true", lambda d: _act(d).update(size_bytes=True)),
        ("consumers 5", lambda d: _act(d).update(consumers=5)),
        ("consumers wrong", lambda d: _act(d).update(consumers=["nope"])),
        ("lone surrogate in an op id", lambda d: _op(d).update(id="relu\ud800")),
        ("lone surrogate in a target", lambda d: _op(d).update(target="aten.\udfff")),
        ("op id of 200k characters", lambda d: _op(d).update(id="x" * 200_000)),
        ("op id an integer", lambda d: _op(d).update(id=7)),
        ("op an array", lambda d: d["ops"].__setitem__(2, [1, 2])),
        ("ops missing", lambda d: d.pop("ops")),
        ("ops an object", lambda d: d.update(ops={"a": 1})),
        ("tensors null", lambda d: d.update(tensors=None)),
        ("duplicate op id", lambda d: d["ops"].append(copy.deepcopy(d["ops"][0]))),
        ("duplicate tensor id", lambda d: d["tensors"].append(copy.deepcopy(d["tensors"][0]))),
        ("dangling input", lambda d: _op(d)["inputs"].append("nowhere")),
        ("inputs a string", lambda d: _op(d).update(inputs="abc")),
        ("unknown phase", lambda d: _op(d).update(phase="sideways")),
        ("phase a list", lambda d: _op(d).update(phase=["forward"])),
        ("unknown kind", lambda d: _act(d).update(kind="weird")),
        ("shape with 2**70", lambda d: _act(d).update(shape=[2**70])),
        ("shape negative", lambda d: _act(d).update(shape=[-3])),
        ("shape a dict", lambda d: _act(d).update(shape={"a": 1})),
        ("dtype an object", lambda d: _act(d).update(dtype={"x": 1})),
        ("flops NaN", lambda d: _op(d).update(flops=float("nan"))),
        ("flops 2**64", lambda d: _op(d).update(flops=2**64)),
        ("random 'yes'", lambda d: _op(d).update(random="yes")),
        ("origin a list", lambda d: d.update(origin=[1])),
        ("origin 100 deep", lambda d: d.update(origin=_deep(100))),
        ("name an integer", lambda d: d.update(name=5)),
        ("schema_version 99", lambda d: d.update(schema_version=99)),
        ("format other", lambda d: d.update(format="other")),
        ("outputs unknown", lambda d: d.update(outputs=["nowhere"])),
        ("outputs 5", lambda d: d.update(outputs=5)),
        ("cycle", _cycle),
        ("control edge to itself", lambda d: d["control_edges"].append(
            {"src": d["ops"][1]["id"], "dst": d["ops"][1]["id"], "reason": "rng"})),
    ]
    for name, edit in edits:
        yield _graph_edit(f"graph: {name}", edit)
    text = raw.decode()
    yield Case("graph: integer of 5000 digits", "graph",
               text.replace('"size_bytes":', '"size_bytes":' + "9" * 5000 + ",\"x\":", 1)
               .encode())
    for special in ("fifo", "dev_zero", "directory", "missing"):
        yield Case(f"graph: {special}", "graph", special=special)


def _deep(n: int) -> dict[str, Any]:
    d: dict[str, Any] = {"source": "custom"}
    cur = d
    for _ in range(n):
        cur["x"] = {}
        cur = cur["x"]
    return d


def _cycle(d: dict[str, Any]) -> None:
    a, b = d["ops"][1]["id"], d["ops"][5]["id"]
    d["control_edges"].append({"src": b, "dst": a, "reason": "rng"})


def _plan_edit(name: str, edit: Callable[[dict[str, Any]], None], expect: str) -> Case:
    d = _plan_dict()
    edit(d)
    return Case(f"plan: {name}", "plan", _j(d), expect=expect)


def _plan_cases() -> Iterator[Case]:
    yield Case("plan: empty file", "plan", b"")
    yield Case("plan: not JSON", "plan", b"{nope")
    yield Case("plan: nested 100k deep", "plan", b"[" * 100_000 + b"]" * 100_000)
    yield Case("plan: gzip bomb", "plan", _bomb(BOMB_BYTES))
    refuse: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
        ("format other", lambda d: d.update(format="x")),
        ("another graph", lambda d: d.update(graph_fingerprint="0" * 64)),
        ("alignment_bytes 0", lambda d: d.update(alignment_bytes=0)),
        ("offsets 2**63", lambda d: d["offsets"].update({next(iter(d["offsets"])): 2**63})),
        ("offsets 'x'", lambda d: d["offsets"].update({next(iter(d["offsets"])): "x"})),
        ("offset negative", lambda d: d["offsets"].update({next(iter(d["offsets"])): -512})),
        ("solve_seconds NaN", lambda d: d.update(solve_seconds=float("nan"))),
        ("solve_seconds inf", lambda d: d.update(solve_seconds=float("inf"))),
        ("lower_bound 10**400", lambda d: d.update(lower_bound_bytes=10**400)),
        ("order a string", lambda d: d.update(order="abc")),
        ("lone surrogate in the order", lambda d: d["order"].__setitem__(0, "\udc80")),
        ("notes of numbers", lambda d: d.update(notes=[1, 2])),
        ("task_tree 200 deep", lambda d: d.update(task_tree=_deep(200))),
        ("provenance status unknown", lambda d: d.update(provenance=[
            {"stage": "x", "task_id": "t", "status": "great", "wall_time_s": 1}])),
        ("provenance objective inf", lambda d: d.update(provenance=[
            {"stage": "x", "task_id": "t", "status": "optimal", "objective": float("inf"),
             "wall_time_s": 1}])),
        ("recompute entry malformed", lambda d: d.update(recompute=[{"id": 1}])),
        ("schema_version true", lambda d: d.update(schema_version=True)),
    ]
    for name, edit in refuse:
        yield _plan_edit(name, edit, "refuse")
    false: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
        ("planned_peak_bytes 1", lambda d: d.update(planned_peak_bytes=1)),
        ("lower_bound_bytes 10**15", lambda d: d.update(lower_bound_bytes=10**15)),
        ("baseline_peak_bytes doubled", lambda d: d.update(
            baseline_peak_bytes=2 * d["baseline_peak_bytes"])),
        ("resident_bytes 0", lambda d: d.update(resident_bytes=0)),
        ("live_bytes shifted", lambda d: d.update(live_bytes=[x + 512 for x in d["live_bytes"]])),
        ("arena_bytes too big", lambda d: d.update(arena_bytes=d["arena_bytes"] + 512)),
        ("extra_flops 5", lambda d: d.update(extra_flops=5)),
        ("step_flops 7", lambda d: d.update(step_flops=7)),
        ("alignment_bytes 3", lambda d: d.update(alignment_bytes=3)),
        ("two storages at one offset", _overlap),
        ("order misses an op", lambda d: d["order"].pop()),
        ("order names an op twice", lambda d: d["order"].append(d["order"][0])),
        ("order reversed", lambda d: d["order"].reverse()),
        ("an offset missing", lambda d: d["offsets"].pop(next(iter(d["offsets"])))),
    ]
    for name, edit in false:
        yield _plan_edit(name, edit, "false")
    for special in ("fifo", "dev_zero", "directory", "missing"):
        yield Case(f"plan: {special}", "plan", special=special)


def _overlap(d: dict[str, Any]) -> None:
    offs = d["offsets"]
    keys = sorted(offs, key=lambda k: -offs[k])
    offs[keys[0]] = offs[keys[1]]


def _csv_cases() -> Iterator[Case]:
    ok = "id,lower,upper,size\na,0,2,4\nb,1,3,4\n"
    yield Case("csv: empty", "csv", b"")
    yield Case("csv: no columns", "csv", b"x,y\n1,2\n")
    yield Case("csv: not an integer", "csv", ok.replace("4\nb", "four\nb").encode())
    yield Case("csv: 2**63", "csv", ok.replace("a,0,2,4", f"a,0,2,{2**63}").encode())
    yield Case("csv: 5000 digits", "csv", ok.replace("a,0,2,4", "a,0,2," + "9" * 5000).encode())
    yield Case("csv: a field of 200k characters", "csv",
               ok.replace("a,0", "a" * 200_000 + ",0").encode())
    yield Case("csv: a NUL byte", "csv", ok.replace("b,1", "b\x00,1").encode())
    yield Case("csv: negative size", "csv", ok.replace("a,0,2,4", "a,0,2,-4").encode())
    yield Case("csv: empty lifetime", "csv", ok.replace("a,0,2,4", "a,2,2,4").encode())
    yield Case("csv: duplicate id", "csv", (ok + "a,5,6,1\n").encode())
    yield Case("csv: invalid UTF-8", "csv", b"\xff" + ok.encode())
    yield Case("csv: gzip bomb", "csv", _bomb(BOMB_BYTES))
    yield Case("csv: too many cells", "csv", (ok + "c,1,2,3,4,5\n").encode())
    for special in ("fifo", "dev_zero", "directory", "missing"):
        yield Case(f"csv: {special}", "csv", special=special)


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch /tmp/roam-fuzz-pwned",))


def _snapshot_cases() -> Iterator[Case]:
    ok_trace = [{"action": "alloc", "addr": 0, "size": 1024, "frames": []}]

    def snap(**kw: Any) -> bytes:
        return pickle.dumps({"segments": [], "device_traces": [ok_trace], **kw})

    yield Case("snapshot: not a pickle", "snapshot", b"not a pickle")
    yield Case("snapshot: truncated pickle", "snapshot", snap()[:-5])
    yield Case("snapshot: os.system reduce", "snapshot", pickle.dumps(_Evil()))
    yield Case("snapshot: a list", "snapshot", pickle.dumps([1, 2]))
    yield Case("snapshot: no device_traces", "snapshot", pickle.dumps({"segments": []}))
    yield Case("snapshot: device_traces an int", "snapshot", pickle.dumps({"device_traces": 5}))
    yield Case("snapshot: a trace an int", "snapshot", pickle.dumps({"device_traces": [5]}))
    yield Case("snapshot: an entry a string", "snapshot", pickle.dumps({"device_traces": [["x"]]}))
    yield Case("snapshot: no events", "snapshot", pickle.dumps({"device_traces": [[]]}))
    for name, entry in [("size a string", {"size": "12"}), ("size 2**63", {"size": 2**63}),
                        ("size a float", {"size": 1.5}), ("size negative", {"size": -1}),
                        ("addr 2**64", {"addr": 2**64}), ("no size", {"size": None})]:
        trace = [{**ok_trace[0], **entry}]
        yield Case(f"snapshot: {name}", "snapshot", pickle.dumps({"device_traces": [trace]}))
    yield Case("snapshot: frames an int (read as no frames)", "snapshot",
               pickle.dumps({"device_traces": [[{**ok_trace[0], "frames": 5}]]}),
               expect="accept")
    yield Case("snapshot: segments an int", "snapshot", snap(segments=5))
    yield Case("snapshot: blocks a string", "snapshot", snap(segments=[{"blocks": "x"}]))
    yield Case("snapshot: block size 'x'", "snapshot", snap(segments=[
        {"address": 0, "total_size": 4096,
         "blocks": [{"size": "x", "state": "active_allocated"}]}]))
    yield Case("snapshot: total_size inf", "snapshot",
               snap(segments=[{"address": 0, "total_size": float("inf"), "blocks": []}]))
    yield Case("snapshot: lists 50k deep", "snapshot", _deep_pickle(50_000))
    yield Case("snapshot: a huge integer", "snapshot",
               pickle.dumps({"device_traces": [[{**ok_trace[0], "size": 10**5000}]]}))
    for special in ("fifo", "dev_zero", "directory", "missing"):
        yield Case(f"snapshot: {special}", "snapshot", special=special)


def _deep_pickle(n: int) -> bytes:
    """A pickle of lists nested ``n`` deep, written opcode by opcode (pickling such a list
    with the pickle module would itself overflow the recursion limit)."""
    return b"\x80\x04" + b"]" * n + b"a" * (n - 1) + b"."


@cache
def cases(kinds: tuple[str, ...] = ("graph", "plan", "csv", "snapshot")) -> list[Case]:
    """Every case of these kinds (made once per process)."""
    make = {"graph": _graph_cases, "plan": _plan_cases, "csv": _csv_cases,
            "snapshot": _snapshot_cases}
    return [c for k in kinds for c in make[k]()]


def write_case(case: Case, directory: Path) -> str:
    """The path the case is read from: its bytes written to a file, or the special path."""
    if case.special == "dev_zero":
        return "/dev/zero"
    if case.special == "missing":
        return str(directory / "missing.json")
    if case.special == "directory":
        d = directory / f"dir-{abs(hash(case.name))}"
        d.mkdir(exist_ok=True)
        return str(d)
    if case.special == "fifo":
        p = directory / f"fifo-{abs(hash(case.name))}"
        if not p.exists():
            os.mkfifo(p)
        return str(p)
    suffix = {"graph": ".json", "plan": ".json", "csv": ".csv", "snapshot": ".pickle"}
    p = directory / f"case-{abs(hash(case.name)):x}{suffix[case.kind]}"
    p.write_bytes(case.data)
    return str(p)


def false_plan(case: Case) -> Any:
    """The :class:`~roam_core.model.plan.Plan` of a ``false`` case (built without the
    reader, so that a figure the reader would refuse still reaches the validator)."""
    from roam_core.formats.plan_io import plan_from_dict

    return plan_from_dict(json.loads(case.data))


def with_plan_field(**changes: Any) -> Any:
    """The base plan with fields replaced (for tests that build false plans directly)."""
    return replace(base_plan(), **changes)
