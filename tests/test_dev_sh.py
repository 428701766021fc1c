"""./dev.sh installs only when the venv is not up to date with pyproject.toml.

A stub venv (``python`` and ``roam`` that print their arguments) shows what the script would
run, without installing anything.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("sha256sum") is None,
                                reason="needs bash and sha256sum")


def _stub_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "roam"):
        exe = venv / "bin" / name
        exe.write_text(f'#!/bin/sh\necho "{name.upper()} $@"\n')
        exe.chmod(0o755)
    return venv


def _run(venv: Path, *args: str, **env: str) -> str:
    out = subprocess.run(["bash", str(REPO / "dev.sh"), *args], cwd=REPO, check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "ROAM_VENV": str(venv), **env})
    return out.stdout


def _stamp() -> str:
    inner = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()
    text = f"{inner}\n{REPO.resolve()}\n"
    return hashlib.sha256(text.encode()).hexdigest()


def test_app_installs_once_then_starts_at_once(tmp_path: Path) -> None:
    venv = _stub_venv(tmp_path)
    first = _run(venv, "app", "--port", "1")
    assert "PYTHON -m pip install -q -e .[test]" in first
    assert first.rstrip().endswith("ROAM serve --port 1")
    assert (venv / ".roam-installed").read_text().strip() == _stamp()
    assert _run(venv, "app", "--port", "1").strip() == "ROAM serve --port 1"  # no pip


def test_a_changed_pyproject_or_reinstall_flag_installs_again(tmp_path: Path) -> None:
    venv = _stub_venv(tmp_path)
    (venv / ".roam-installed").write_text("an older pyproject.toml\n")
    assert "pip install" in _run(venv, "app")
    assert "pip install" not in _run(venv, "app")
    assert "pip install" in _run(venv, "app", ROAM_REINSTALL="1")
