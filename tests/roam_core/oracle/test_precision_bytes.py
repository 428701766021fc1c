"""Bytes by dtype, weight copies and fp32 islands of autocast graphs, and ``roam info``'s
precision output."""

from __future__ import annotations

import functools
import json

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import roam_core as rc  # noqa: E402
from roam_core.cli import main  # noqa: E402
from roam_core.formats.graph_io import save_graph  # noqa: E402
from roam_core.model.graph import TensorKind, round_size  # noqa: E402
from roam_core.oracle.precision_bytes import (  # noqa: E402
    bytes_by_dtype,
    module_group,
    precision_by_module,
    weight_copies,
)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16))
                                    for _ in range(2))
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = x + b(x)
        return nn.functional.cross_entropy(self.head(x), y)


@functools.cache
def _graph(precision: str) -> rc.Graph:
    torch.manual_seed(0)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    return rc.trace_training_step(Net(), [x, y], optimizer="adamw", precision=precision)


def test_bytes_by_dtype_adds_up_to_every_storage() -> None:
    g = _graph("bf16-mixed")
    by = bytes_by_dtype(g)
    total = sum(round_size(t.size_bytes) for t in g.tensors.values() if t.size_bytes > 0)
    assert sum(b for row in by.values() for b in row.values()) == total
    assert set(by["parameter"]) == {"float32"}
    assert "bfloat16" in by["activation"]


def test_weight_copies_are_bf16_casts_of_parameters() -> None:
    g = _graph("bf16-mixed")
    copies = weight_copies(g)
    assert len(copies) == 6  # 3 linears x (weight, bias)
    assert {g.tensors[t].dtype for t in copies} == {"bfloat16"}
    assert weight_copies(_graph("fp32")) == set()


def test_precision_by_module_splits_the_activations() -> None:
    g, ref = _graph("bf16-mixed"), _graph("fp32")
    rows = {r.module: r for r in precision_by_module(g, reference=ref)}
    assert "blocks.*.*" in rows  # both blocks in one group
    for r in rows.values():
        assert r.weight_copy_bytes + r.fp32_island_bytes + r.reduced_bytes <= r.activation_bytes
    assert sum(r.weight_copy_bytes for r in rows.values()) > 0
    assert sum(r.fp32_island_bytes for r in rows.values()) > 0
    total = sum(round_size(t.size_bytes) for t in g.tensors.values()
                if t.kind is TensorKind.ACTIVATION and t.size_bytes)
    assert sum(r.activation_bytes for r in rows.values()) == total
    assert all(r.fp32_island_bytes == 0 and r.weight_copy_bytes == 0
               for r in precision_by_module(ref))
    assert module_group("blocks.10.0") == "blocks.*.*"


def test_info_reports_precision_and_dtypes(tmp_path, capsys) -> None:
    path = tmp_path / "g.json.gz"
    save_graph(_graph("bf16-mixed"), path)
    assert main(["info", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["precision"] == "bf16-mixed"
    assert set(d["bytes_by_dtype"]) >= {"float32", "bfloat16"}
    assert d["precision_by_module"][0]["fp32_reference_bytes"] is None
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "weight copies" in out
    assert "precision      bf16-mixed" in out


def test_info_vs_fp32_retraces_a_zoo_graph(tmp_path, capsys) -> None:
    path = tmp_path / "mlp.json.gz"
    assert main(["trace", "mlp", "-b", "4", "--precision", "bf16-mixed", "-o", str(path)]) == 0
    assert main(["info", str(path), "--vs-fp32", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    rows = d["precision_by_module"]
    assert all(r["fp32_reference_bytes"] is not None for r in rows)
    assert any(r["weight_copy_bytes"] for r in rows)
