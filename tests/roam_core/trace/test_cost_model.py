"""Per-op cost fields: FLOPs from torch's formulas at trace time, bytes, recomputability."""

from __future__ import annotations

import copy

import pytest
import torch

from roam_core.base.errors import GraphError
from roam_core.formats.graph_io import graph_from_dict, graph_to_dict, load_graph
from roam_core.model.graph import Op, Phase
from roam_core.model.recompute_ops import (
    droppable_storages,
    flops_recorded,
    op_flops,
    recompute_blocker,
    recompute_blockers,
    step_flops,
)
from roam_core.model.samples import tiny_train_step
from tests.paths import DATA_DIR


def _with_costs():
    g = tiny_train_step()
    d = graph_to_dict(g)
    for i, o in enumerate(d["ops"]):
        o.update(flops=100 * i, bytes_read=8 * i, bytes_written=4 * i,
                 recomputable=(o["id"] != "relu"))
    return d


def test_cost_fields_round_trip_and_leave_the_fingerprint_alone():
    d = _with_costs()
    g = graph_from_dict(d)
    assert [o.flops for o in g.ops] == [100 * i for i in range(len(g.ops))]
    assert g.op("relu").recomputable is False
    assert g.op("mm").recomputable is True
    assert graph_from_dict(graph_to_dict(g)) == g
    assert g.fingerprint() == tiny_train_step().fingerprint()
    assert flops_recorded(g)
    assert not flops_recorded(tiny_train_step())


def test_schema_1_files_load_without_costs():
    d = graph_to_dict(tiny_train_step())
    d["schema_version"] = 1
    g = graph_from_dict(d)
    assert all(o.flops is None and o.recomputable is None for o in g.ops)
    old = load_graph(DATA_DIR / "mlp-b8-steady-schema1.json.gz")
    # (the MLP sample as committed before graphs carried costs: schema 1)
    assert not flops_recorded(old)
    # the estimate counts the matrix products: 3 forward linears of the MLP at batch 8
    fwd = sum(op_flops(old, o) for o in old.ops if o.phase is Phase.FORWARD)
    assert fwd == 2 * 8 * (784 * 256 + 256 * 256 + 256 * 10)


@pytest.mark.parametrize(("key", "value"), [("flops", -1), ("bytes_read", 1.5),
                                       ("bytes_written", True), ("recomputable", "yes")])
def test_bad_cost_fields_are_named(key, value):
    d = copy.deepcopy(_with_costs())
    d["ops"][1][key] = value
    with pytest.raises(GraphError, match=key):
        graph_from_dict(d)


def test_tracer_flops_match_flop_counter_mode():
    from torch.utils.flop_counter import FlopCounterMode

    from roam_core.trace import trace_training_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    g = trace_training_step(model, [x], loss_fn=lambda y: y.square().mean(), optimizer="sgd")
    with FlopCounterMode(display=False) as fc:
        model(x).square().mean().backward()
    fwd_bwd = sum(o.flops for o in g.ops if o.phase is not Phase.OPTIMIZER)
    assert fwd_bwd == fc.get_total_flops() > 0
    assert flops_recorded(g)
    mm = next(o for o in g.ops if o.target == "aten.addmm.default")
    assert mm.flops == 2 * 8 * 16 * 32
    assert mm.bytes_written == 8 * 32 * 4
    assert mm.bytes_read >= (8 * 16 + 16 * 32 + 32) * 4
    views = [o for o in g.ops if o.target == "aten.t.default"]
    assert views
    assert all(o.bytes_read == o.bytes_written == 0 for o in views)


@pytest.mark.slow
def test_tracer_counts_cpu_flash_attention():
    from roam_core.zoo import trace_zoo

    g = trace_zoo("tiny_gpt", 1, 16, attention="sdpa").graph
    attn = [o for o in g.ops if "flash_attention_for_cpu" in o.target]
    assert attn
    assert all(o.flops > 0 for o in attn)
    assert step_flops(g) == sum(o.flops for o in g.ops)


def test_recompute_rules():
    g = tiny_train_step()
    why = recompute_blockers(g)
    assert why["relu"] is None
    assert why["mm"] is None
    assert "output" in why["loss"]
    assert "backward" in why["relu_bw"]
    assert "optimizer" in why["update"]
    assert droppable_storages(g) == ("relu",)
    marked = type(g)(tuple(Op(o.id, o.target, o.phase, o.inputs, o.outputs, o.mutates,
                                 o.random, recomputable=False if o.id == "relu" else None)
                              for o in g.ops), g.tensors, g.aliases, g.control_edges,
                     g.outputs)
    assert "traced" in recompute_blocker(marked, "relu")
    assert droppable_storages(marked) == ()
