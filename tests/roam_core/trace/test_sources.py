"""Source lines in the tracer: ``Op.source`` of forward and backward ops, and the file."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from roam_core.formats.graph_io import dumps_graph, graph_to_dict, load_graph, loads_graph
from roam_core.model.graph import Phase
from roam_core.trace.sources import relative_path
from tests.paths import DATA_DIR

OLD_FILE = DATA_DIR / "mlp-b8-steady.v1.json.gz"


@pytest.fixture(scope="module")
def tiny_gpt():
    from roam_core.zoo.steps import trace_zoo
    return trace_zoo("tiny_gpt", 1, attention="math").graph


@pytest.mark.slow
def test_attention_matmuls_point_into_attend(tiny_gpt):
    fwd = [o for o in tiny_gpt.ops if o.target.startswith("aten.bmm") and o.phase is Phase.FORWARD]
    assert fwd
    for o in fwd:
        path, _, rest = o.source.partition(":")
        assert path == "roam_core/zoo/transformer.py"
        assert rest.endswith(" in attend")


@pytest.mark.slow
def test_backward_ops_take_their_forward_frame(tiny_gpt):
    bwd = [o for o in tiny_gpt.ops if o.target.startswith("aten.bmm")
           and o.phase is Phase.BACKWARD]
    fwd_lines = {o.source for o in tiny_gpt.ops if o.target.startswith("aten.bmm")
                 and o.phase is Phase.FORWARD}
    assert bwd
    assert all(o.source in fwd_lines for o in bwd)
    assert all(o.source == "" for o in tiny_gpt.ops if o.phase is Phase.OPTIMIZER)


@pytest.mark.slow
def test_sources_round_trip_and_stay_out_of_the_fingerprint(tiny_gpt):
    back = loads_graph(dumps_graph(tiny_gpt))
    assert [o.source for o in back.ops] == [o.source for o in tiny_gpt.ops]
    d = graph_to_dict(tiny_gpt)
    for op in d["ops"]:
        op.pop("source", None)
    stripped = loads_graph(json.dumps(d))
    assert all(o.source == "" for o in stripped.ops)
    assert stripped.fingerprint() == tiny_gpt.fingerprint()


def test_old_files_load_without_sources():
    g = load_graph(OLD_FILE)
    assert all(o.source == "" for o in g.ops)


@pytest.mark.slow
def test_a_bad_source_is_refused(tiny_gpt):
    from roam_core.base.errors import GraphError
    d = graph_to_dict(tiny_gpt)
    d["ops"][0]["source"] = 7
    with pytest.raises(GraphError, match="field 'source'"):
        loads_graph(json.dumps(d))


def test_paths_are_never_absolute(tmp_path):
    assert not relative_path("/nowhere/at/all/model.py").startswith("/")
