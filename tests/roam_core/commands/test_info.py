"""``roam info``: human and JSON output, progress on stderr, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from roam_core.base.units import format_bytes
from roam_core.cli import main
from roam_core.formats.graph_io import save_graph
from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorId, TensorKind
from roam_core.model.samples import tiny_train_step
from roam_core.oracle.baseline import eager_report


@pytest.fixture
def tiny_file(tmp_path):
    p = tmp_path / "tiny.json.gz"
    save_graph(tiny_train_step(), p)
    return p


def test_format_bytes():
    assert [format_bytes(x) for x in (0, 1023, 1024, 1536 * 1024, 2**30, 2**40)] == [
        "0 B", "1023 B", "1.00 KiB", "1.50 MiB", "1.00 GiB", "1.00 TiB"]


def test_json(tiny_file, capsys):
    assert main(["info", str(tiny_file), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert len(out.strip().splitlines()) == 1
    d = json.loads(out)
    r = eager_report(tiny_train_step())
    assert (d["ops"], d["storages"], d["aliases"]) == (8, 8, 2)
    assert set(d["bytes_by_kind"]) == {k.value for k in TensorKind}
    assert d["bytes_by_kind"] == dict(r.bytes_by_kind)
    assert d["eager_peak_allocated_bytes"] == 3072
    assert d["eager_peak_reserved_bytes"] == 2 * 1024 * 1024
    assert d["lower_bound_bytes"] == 3072
    assert d["resident_bytes"] == 1024
    assert d["control_edges_by_reason"]["mutation"] == 1
    assert d["origin"] == {"source": "custom"}


def test_human(tiny_file, capsys):
    assert main(["info", str(tiny_file)]) == 0
    out = capsys.readouterr().out
    assert "tiny_train_step" in out
    assert "optimizer_state" in out
    assert "3.00 KiB allocated, 2.00 MiB reserved" in out
    assert "lower bound    3.00 KiB" in out


def test_alignment_option(tiny_file, capsys):
    assert main(["info", str(tiny_file), "--json", "--alignment-bytes", "1"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["eager_simulated_peak_bytes"] == 1504
    assert d["resident_bytes"] == 600
    with pytest.raises(SystemExit) as ei:
        main(["info", str(tiny_file), "--alignment-bytes", "0"])
    assert ei.value.code == 2


def test_progress_for_big_graphs(tmp_path, capsys):
    n, f, k = 1200, Phase.FORWARD, TensorKind.ACTIVATION
    ops = [Op(OpId(f"o{i}"), "x", f, (f"o{i - 1}",) if i else (), (f"o{i}",))
           for i in range(n)]
    tensors = [Tensor(TensorId(f"o{i}"), 100, "f", (), k, OpId(f"o{i}")) for i in range(n)]
    p = tmp_path / "chain.json"
    save_graph(Graph.build(ops, tensors), p)
    assert main(["info", str(p), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["ops"] == n
    assert "roam info:" in err
    assert "lower bounds" in err


@pytest.mark.parametrize("content", [b'{"ops": [', b"\x1f\x8b\x08junk",
                                     b'{"schema_version": 99, "ops": [], "tensors": []}'])
def test_bad_file_exit_2_one_line(tmp_path, capsys, content):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    assert main(["info", str(p)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("roam info: error: ")


def test_missing_file_exit_2(tmp_path, capsys):
    assert main(["info", str(tmp_path / "none.json")]) == 2
    assert "none.json" in capsys.readouterr().err


@pytest.mark.slow
def test_console_script_exit_code(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("not json")
    res = subprocess.run([sys.executable, "-m", "roam_core", "info", str(p)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1
