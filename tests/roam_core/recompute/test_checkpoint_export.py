"""A budget plan's drops as per-module selective checkpointing decisions (no torch needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import roam_core as rc
from roam_core.base.errors import ConfigError, PlanFormatError
from roam_core.formats.policy_io import dumps_policy, load_policy, loads_policy, save_policy
from roam_core.model.checkpoint_policy import (
    CheckpointPolicyExport,
    Decision,
    ModulePolicy,
    OpPolicy,
    PolicyCursor,
)
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import recompute_ops_for
from roam_core.recompute.checkpoint_export import export_checkpoint_policy, module_calls
from tests.paths import SAMPLE_DIR as SAMPLES

TINY_GPT = SAMPLES / "tiny_gpt-b2-t32-steady.json.gz"


@pytest.fixture(scope="module")
def graph() -> rc.Graph:
    return rc.load_graph(TINY_GPT)


def _plan(graph: rc.Graph, drops: list[str]) -> Plan:
    """A plan record carrying only what the export reads: the recompute ops of ``drops``."""
    return Plan(graph.fingerprint(), graph.name, "test", order=(), offsets={},
                alignment_bytes=512, arena_bytes=0, planned_peak_bytes=1 << 20,
                resident_bytes=0, baseline_peak_bytes=0, lower_bound_bytes=0,
                recompute=recompute_ops_for(graph, drops))


def _decision(export: CheckpointPolicyExport, module: str, op_id: str) -> Decision:
    mp = next(m for m in export.modules if m.module == module)
    return next(o.decision for o in mp.ops if o.op_id == op_id)


def test_drops_inside_a_block_wrap_that_block(graph: rc.Graph) -> None:
    plan = _plan(graph, ["gelu", "addmm_2"])  # the MLP's hidden activations in h.0
    ex = export_checkpoint_policy(graph, plan)
    assert [m.module for m in ex.modules] == ["h.0"]
    assert ex.unexpressed == ()
    assert ex.extra_saved == ()
    assert ex.dropped_bytes == ex.expressed_bytes == 2 * 65536
    assert _decision(ex, "h.0", "gelu") is Decision.RECOMPUTE
    assert _decision(ex, "h.0", "addmm_2") is Decision.RECOMPUTE
    # kept for the backward: saved (the layer norm's outputs, the attention's projection)
    assert _decision(ex, "h.0", "native_layer_norm") is Decision.SAVE
    assert _decision(ex, "h.0", "addmm") is Decision.SAVE
    # every op torch's policy sees, in order, with its occurrence among ops of its overload
    h0 = ex.modules[0]
    assert [o.op_id for o in h0.ops] == [
        o for o in module_calls(graph)["h.0"][0] if graph.op(o).target != "aten.detach.default"]
    seen: dict[str, int] = {}
    for o in h0.ops:
        assert o.occurrence == seen.get(o.target, 0)
        seen[o.target] = o.occurrence + 1
    assert ex.recompute_flops > 0
    assert "1 module(s) checkpointed" in ex.summary()


def test_a_drop_across_blocks_is_not_expressed_with_its_bytes(graph: rc.Graph) -> None:
    plan = _plan(graph, ["add_2", "gelu"])  # h.0's output, read by h.1's layer norm
    ex = export_checkpoint_policy(graph, plan)
    assert [m.module for m in ex.modules] == ["h.0"]
    (u,) = ex.unexpressed
    assert (u.storage, u.size_bytes) == ("add_2", 16384)
    assert "'h'" in u.reason
    assert "forward of its own" in u.reason
    assert ex.unexpressed_bytes == 16384
    # with the model saying `h` could be wrapped, it holds two blocks: refused by default
    ex2 = export_checkpoint_policy(graph, plan, wrappable=lambda p: True)
    assert [u.storage for u in ex2.unexpressed] == ["add_2"]
    assert "max_blocks=1" in ex2.unexpressed[0].reason
    ex3 = export_checkpoint_policy(graph, plan, wrappable=lambda p: True, max_blocks=2)
    assert [m.module for m in ex3.modules] == ["h"]
    assert ex3.unexpressed == ()
    with pytest.raises(ConfigError, match="max_blocks"):
        export_checkpoint_policy(graph, plan, max_blocks=0)


def test_plan_without_recompute_wraps_nothing(graph: rc.Graph) -> None:
    ex = export_checkpoint_policy(graph, _plan(graph, []))
    assert ex.modules == ()
    assert ex.dropped_bytes == 0
    assert ex.summary().startswith("0 module(s)")


def test_plan_for_another_graph_is_refused(graph: rc.Graph) -> None:
    other = rc.load_graph(SAMPLES / "mlp-b8-steady.json.gz")
    with pytest.raises(PlanFormatError, match="made for graph"):
        export_checkpoint_policy(other, _plan(graph, ["gelu"]))


def test_policy_file_round_trip_is_atomic(graph: rc.Graph, tmp_path: Path) -> None:
    ex = export_checkpoint_policy(graph, _plan(graph, ["gelu", "add_2"]))
    out = tmp_path / "policy.json"
    save_policy(ex, out)
    assert [p.name for p in tmp_path.iterdir()] == ["policy.json"]  # no temporary left
    d = json.loads(out.read_text())
    assert d["format"] == "roam-checkpoint-policy"
    assert d["modules"]["h.0"][0] == ["aten.native_layer_norm.default", 0, "save"]
    assert d["unexpressed_bytes"] == 16384
    assert d["unexpressed"][0]["storage"] == "add_2"
    back = load_policy(out)
    assert back.modules[0].ops[0].target == ex.modules[0].ops[0].target
    assert [(o.target, o.occurrence, o.decision) for o in back.modules[0].ops] == [
        (o.target, o.occurrence, o.decision) for o in ex.modules[0].ops]
    assert back.unexpressed == ex.unexpressed
    assert back.summary() == ex.summary()
    assert loads_policy(dumps_policy(back)) == back


@pytest.mark.parametrize(("edit", "match"), [
    (lambda d: d.pop("modules"), "field 'modules' is missing"),
    (lambda d: d["unexpressed"][0].pop("size_bytes"), r"'unexpressed\[0\]\.size_bytes'"),
    (lambda d: d["modules"]["h.0"].__setitem__(0, ["aten.mm.default", 0, "keep"]),
     r"modules\['h.0'\]\[0\]"),
    (lambda d: d.__setitem__("schema_version", 9), "schema_version"),
    (lambda d: d.__setitem__("format", "roam-plan"), "not a roam checkpoint policy"),
])
def test_bad_policy_files_name_the_field(graph: rc.Graph, edit, match) -> None:  # type: ignore[no-untyped-def]
    d = json.loads(dumps_policy(export_checkpoint_policy(graph, _plan(graph, ["gelu", "add_2"]))))
    edit(d)
    with pytest.raises(PlanFormatError, match=match):
        loads_policy(json.dumps(d))
    with pytest.raises(PlanFormatError, match="not JSON"):
        loads_policy("{")


def test_cursor_follows_compiled_spellings() -> None:
    ops = ("aten.addmm.default", "aten._unsafe_view.default", "aten.empty_like.default",
           "aten.bernoulli_.float", "aten.div_.Scalar", "aten.mul.Tensor",
           "aten.relu_.default", "aten.mm.default")
    mp = ModulePolicy("m", 1, tuple(OpPolicy(t, 0, Decision.SAVE) for t in ops))
    c = PolicyCursor(mp)
    # torch.compile: views spelled `view`, CPU dropout as one native_dropout, functional relu
    for t in ("aten.addmm.default", "aten.view.default", "aten.native_dropout.default",
              "aten.relu.default"):
        assert c.next(t) is not None
    assert c.next("aten.native_dropout.default") is None  # no dropout left to match
    assert c.next("aten.mm.default", exact=True) is Decision.SAVE
    assert c.left == ()
    c = PolicyCursor(mp)
    assert c.next("aten.mul.Tensor") is Decision.SAVE  # found ahead: the ops before skipped
    assert len(c.skipped) == 5
