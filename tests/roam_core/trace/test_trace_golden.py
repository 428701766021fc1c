"""The tracer's output is pinned: small zoo configs traced now equal the traces made by
main 90d86dd (before the trace-time work of issue 14), stored in ``data/trace-golden-*``.

Everything a trace produces is compared: every op (target, phase, inputs, outputs, mutated
storages, random flag, module path, FLOPs, bytes, recomputable), every storage (size,
dtype, shape, kind, producer, consumers, name), aliases, control edges (as a set), the value
map, placeholders, constants, the RNG timeline and the FX graph's text.  The files were
written with torch 2.13; the FX text and op sets differ between torch releases, so another
torch skips the comparison (the other trace tests still run there).
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from roam_core.formats.graph_io import graph_to_dict  # noqa: E402
from roam_core.zoo import trace_zoo  # noqa: E402
from tests.paths import DATA_DIR  # noqa: E402

DATA = DATA_DIR
CONFIGS = [("tiny_gpt", 2, 64, "roam"), ("residual_block", 2, None, "steady")]


def _record(step: Any) -> dict[str, Any]:
    """The canonical record of a TracedStep (the one ``benchmarks/trace_bench.py`` digests)."""
    graph = graph_to_dict(step.graph)
    graph["control_edges"].sort(key=lambda e: (e["src"], e["dst"], e["reason"]))
    for op in graph["ops"]:  # source lines move with any edit of the model's file
        op.pop("source", None)
    rng = step.rng
    rec = {
        "graph": graph,
        "values": {k: [v.op, v.index, v.fx_node] for k, v in step.values.items()},
        "placeholders": [[r.node, r.kind.value, r.name] for r in step.placeholders],
        "constants": [[r.node, r.kind.value, r.name] for r in step.constants],
        "loss_value": step.loss_value, "setting": step.setting, "optimizer": step.optimizer,
        "rng": {"draws": [[d.op, d.device, d.state_in, d.state_out, d.signature]
                          for d in rng.draws], "final": dict(rng.final)},
        "fx_graph": str(step.gm.graph),
    }
    # the same JSON round trip the stored files went through (tuples -> lists)
    return json.loads(json.dumps(rec, sort_keys=True))


def _minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


@pytest.mark.slow
@pytest.mark.parametrize(("model", "batch", "seq", "setting"), CONFIGS)
def test_trace_equals_the_golden_trace(model: str, batch: int, seq: int | None,
                                       setting: str) -> None:
    path = DATA / f"trace-golden-{model}-b{batch}-t{seq or 0}-{setting}.json.gz"
    golden = json.loads(gzip.decompress(path.read_bytes()))
    made_with = golden["graph"]["origin"]["torch"]
    if _minor(made_with) != _minor(torch.__version__):
        pytest.skip(f"golden trace made with torch {made_with}, this is {torch.__version__}")
    got = _record(trace_zoo(model, batch, seq, setting))
    # the origin records the precision since the golden files were written (issue 28)
    assert got["graph"]["origin"].pop("precision") == "fp32"
    assert set(got) == set(golden)
    for key in ("ops", "tensors"):
        for i, (a, b) in enumerate(zip(got["graph"][key], golden["graph"][key], strict=True)):
            assert a == b, f"graph {key}[{i}] differs"
    for key in golden["graph"]:
        assert got["graph"][key] == golden["graph"][key], f"graph {key} differs"
    for key in golden:
        assert got[key] == golden[key], f"{key} differs"
