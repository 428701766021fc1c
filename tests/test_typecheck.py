"""The type checker: mypy passes on roam_core and app with the configuration in pyproject.toml
(strict on the four lowest layers), and every ``# type: ignore`` says why.

``./dev.sh test`` runs mypy before pytest too; this test keeps the check in the suite for
anyone who runs pytest alone.  mypy's cache is ``.mypy_cache`` (git-ignored): a warm run takes
seconds, a cold one about a minute.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What ``mypy --strict`` turns on, less the options that are global only.
STRICT_FLAGS = ("disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls",
                "disallow_untyped_defs", "disallow_incomplete_defs", "disallow_untyped_decorators",
                "warn_return_any", "no_implicit_reexport", "extra_checks")
STRICT_PACKAGES = ("roam_core.base.*", "roam_core.model.*", "roam_core.oracle.*",
                   "roam_core.planner.*")

_IGNORE = re.compile(r"# type: ignore")
_IGNORE_WITH_REASON = re.compile(r"# type: ignore(\[[^\]]*\])?\s+#\s*\S")


def _mypy(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=900)


def _ignores_without_reason(root: Path) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if _IGNORE.search(line) and not _IGNORE_WITH_REASON.search(line):
                bad.append(f"{path.relative_to(root.parent)}:{i}")
    return bad


@pytest.mark.slow
def test_mypy_passes() -> None:
    out = _mypy(ROOT)  # files, strictness and cache from pyproject.toml
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert out.stdout.startswith("Success: no issues found")


def test_the_four_lowest_layers_are_strict() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["roam_core", "app"]
    assert config["warn_unused_ignores"]
    assert config["check_untyped_defs"]
    (strict,) = [o for o in config["overrides"] if o.get("disallow_untyped_defs")]
    assert set(strict["module"]) == set(STRICT_PACKAGES)
    assert all(strict.get(flag) is True for flag in STRICT_FLAGS), strict


@pytest.mark.slow
def test_mypy_fails_on_a_planted_untyped_function(tmp_path: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "roam_core").mkdir()
    (tmp_path / "roam_core" / "__init__.py").write_text("")
    shutil.copytree(ROOT / "roam_core" / "base", tmp_path / "roam_core" / "base",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "roam_core" / "base" / "units.py", "a") as f:
        f.write("\n\ndef planted(x):\n    return x\n")
    out = _mypy(tmp_path, "--cache-dir", str(tmp_path / "cache"), "roam_core/base")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "units.py" in out.stdout, out.stdout
    assert "[no-untyped-def]" in out.stdout, out.stdout


def test_every_type_ignore_says_why(tmp_path: Path) -> None:
    bad = _ignores_without_reason(ROOT / "roam_core") + _ignores_without_reason(ROOT / "app")
    assert bad == [], bad
    planted = tmp_path / "pkg"
    planted.mkdir()
    (planted / "m.py").write_text("a = f()  # type: ignore[misc]\n"
                                  "b = g()  # type: ignore[misc]  # why\n"
                                  "c = h()  # type: ignore\n")
    assert _ignores_without_reason(planted) == ["pkg/m.py:1", "pkg/m.py:3"]
