"""The ``roam trace`` command."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from roam_core.cli import main
from roam_core.formats.graph_io import load_graph


@pytest.mark.slow
def test_trace_writes_a_loadable_graph(tmp_path, capsys) -> None:
    out = tmp_path / "mlp.json.gz"
    assert main(["trace", "mlp", "--batch-size", "2", "--setting", "roam", "-o", str(out)]) == 0
    g = load_graph(out)
    assert g.origin["model"] == "mlp"
    assert g.origin["setting"] == "roam"
    assert "done in" in capsys.readouterr().err


def test_unknown_model_lists_the_names(capsys) -> None:
    assert main(["trace", "resnet18", "-b", "1"]) == 2
    err = capsys.readouterr().err
    assert "gpt2-xl" in err
    assert "roberta-base" in err
    assert err.count("\n") == 1
