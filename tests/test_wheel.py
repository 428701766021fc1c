"""The project installs as users install it: from a built wheel, not only in editable mode."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(ROOT)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (path,) = out.glob("roam-*.whl")
    return path


def test_wheel_holds_every_package_of_the_source_tree(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    in_tree = {p.relative_to(ROOT).as_posix() for top in ("roam_core", "app")
               for p in (ROOT / top).rglob("__init__.py") if "__pycache__" not in p.parts}
    missing = sorted(in_tree - names)
    assert missing == [], f"the wheel lacks these packages: {missing}"
    assert not any(n.startswith(("tests/", "benchmarks/", "scripts/")) for n in names)


def test_wheel_carries_the_app_assets_and_samples(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for top, dest in (("assets", "app/assets"), ("sample_graphs", "app/sample_graphs")):
        want = {f"{dest}/{p.relative_to(ROOT / top).as_posix()}"
                for p in (ROOT / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
        assert want, f"{top}/ is empty in the source tree"
        assert sorted(want - names) == [], f"the wheel lacks files of {top}/"


def test_the_installed_app_finds_its_css_and_samples(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import app, app.core.paths as p, app.views.loading.data as s; "
            "print(app.ASSETS / 'roam.css'); print(len(s.sample_options(p.SAMPLE_DIR)))\n"
            "assert (app.ASSETS / 'roam.css').is_file()")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(site), "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    css, n_options = out.stdout.split()
    assert css.startswith(str(site)), "the app read its CSS from outside the wheel"
    n_files = len(list((ROOT / "sample_graphs").glob("*.json*")))
    assert int(n_options) >= n_files > 0


def test_cli_runs_from_the_unpacked_wheel(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import roam_core, sys; print(roam_core.__file__, file=sys.stderr); "
            "from roam_core.cli import main; sys.exit(main(['--help']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(site), "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert str(site) in out.stderr, "roam_core was not imported from the wheel"
    for command in ("trace", "plan", "check", "execute", "info", "serve"):
        assert command in out.stdout
    every = subprocess.run(
        [sys.executable, "-c", "import pkgutil, importlib, roam_core\n"
         "for m in pkgutil.walk_packages(roam_core.__path__, 'roam_core.'):\n"
         "    if not m.name.endswith('__main__'):\n"
         "        importlib.import_module(m.name)\n"],
        cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(site), "PATH": ""},
        timeout=300)
    assert every.returncode == 0, every.stderr[-2000:]
