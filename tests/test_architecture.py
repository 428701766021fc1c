"""The architecture of roam_core, enforced on the source.

The folder tree is the architecture: every layer is a package of roam_core, and the layer order
lives in one place, the import-linter contracts of ``pyproject.toml``.

1. ``lint-imports`` keeps every contract (layers, acyclic siblings at any depth, no app/Dash/
   plotly), and breaks when a violation is planted in a copy of the tree.
2. ``import roam_core`` loads neither torch, Dash nor plotly (checked in a fresh process).
3. Only the torch packages (tracer, zoo, runtime) import torch at module level.
4. No private name crosses a module boundary, and no module imports the ``roam_core`` facade.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "roam_core"
TORCH_PACKAGES = {"trace", "zoo", "runtime"}
#: Top-level modules of roam_core that are the facade, not a layer.
FACADE = {"__init__", "__main__", "cli"}


def _modules(core: Path = CORE) -> list[tuple[str, Path]]:
    out = []
    for path in sorted(core.rglob("*.py")):
        rel = path.relative_to(core).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out.append((".".join(parts) or "__init__", path))
    return out


def _imports(path: Path, module: str) -> list[tuple[str, tuple[str, ...], bool, int]]:
    """(imported module, names, at module level?, line) for every import in a file."""
    tree = ast.parse(path.read_text())
    top: set[int] = set()
    for stmt in tree.body:  # module level, including `if TYPE_CHECKING:` and try blocks
        if isinstance(stmt, (ast.If, ast.Try)):
            top.update(id(n) for n in ast.walk(stmt))
        top.add(id(stmt))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, (), id(node) in top, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(["roam_core", *base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            found.append((name, tuple(a.name for a in node.names), id(node) in top,
                          node.lineno))
    return found


def _layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [[p.strip() for p in row.replace("|", ":").split(":")] for row in layers["layers"]]


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
         "sys.exit(lint_imports(no_cache=True, config_filename='pyproject.toml'))"],
        cwd=root, capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": ""},
    )


# ------------------------------------------------------------------ import-linter
def test_contracts_are_kept() -> None:
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "3 kept, 0 broken" in out.stdout


@pytest.mark.parametrize(("where", "planted", "contract"), [
    ("model/graph.py", "    from roam_core.planner import make_plan\n", "layered"),
    ("ordering/decompose.py", "    from roam_core.layout import arena_layout\n", "layered"),
    ("base/units.py", "    from roam_core.model import graph\n", "layered"),
    ("model/reach.py", "    from roam_core.model import samples\n", "cycles"),
    ("oracle/bounds/live_set.py", "    import plotly\n", "Dash or plotly"),
], ids=["up-a-layer", "sibling", "base-imports-model", "cycle", "plotly"])
def test_contracts_break_on_a_planted_violation(tmp_path: Path, where: str, planted: str,
                                                contract: str) -> None:
    shutil.copytree(CORE, tmp_path / "roam_core",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    if contract == "cycles":  # make samples import reach too, so the pair is a cycle
        samples = tmp_path / "roam_core/model/samples.py"
        samples.write_text(samples.read_text() + "\n\ndef _planted():\n"
                           "    from roam_core.model import reach\n")
    target = tmp_path / "roam_core" / where
    target.write_text(target.read_text() + "\n\ndef _planted_violation():\n" + planted)
    out = _lint(tmp_path)
    assert out.returncode != 0, out.stdout[-2000:]
    broken = [line for line in out.stdout.splitlines() if " BROKEN" in line]
    assert any(contract in line for line in broken), out.stdout[-3000:]


def test_every_package_has_a_layer() -> None:
    declared = {m for row in _layers() for m in row}
    packages = {p.name for p in CORE.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in CORE.glob("*.py")} - FACADE
    assert packages | modules <= declared | {"commands"}, (
        "every roam_core package needs a row in pyproject's layers contract")
    assert modules == set(), f"loose modules outside a layer package: {sorted(modules)}"


# ------------------------------------------------------------------ what lint-imports cannot see
def test_import_roam_core_is_light() -> None:
    code = (
        "import sys, roam_core, roam_core.cli\n"
        "heavy = ('torch', 'dash', 'plotly', 'app')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import roam_core loaded: {out.stdout.strip()[:300]}"


def _violations(core: Path) -> list[str]:
    bad = []
    for module, path in _modules(core):
        head = module.split(".")[0]
        for name, names, top_level, line in _imports(path, module):
            root = name.split(".")[0]
            where = f"roam_core/{path.relative_to(core)}:{line}"
            torch_ok = head in TORCH_PACKAGES or module == "__init__"
            if root == "torch" and top_level and not torch_ok:
                bad.append(f"{where} imports torch at module level")
            if name == "roam_core" and module != "__init__":
                subpackages = {p.name for p in core.iterdir() if p.is_dir()}
                bad += [f"{where} imports {n!r} from the roam_core facade"
                        for n in names if n not in subpackages]
            if root == "roam_core" and name != f"roam_core.{module}":
                bad += [f"{where} imports the private name {n} from {name}"
                        for n in names if n.startswith("_") and not n.startswith("__")]
    return bad


def test_torch_private_names_and_facade() -> None:
    assert _violations(CORE) == []


def test_the_ast_rules_fail_on_planted_violations(tmp_path: Path) -> None:
    core = tmp_path / "roam_core"
    (core / "model").mkdir(parents=True)
    (core / "__init__.py").write_text("import torch\n")  # the facade may (it does not)
    (core / "model" / "__init__.py").write_text("")
    (core / "model" / "a.py").write_text(
        "import torch\nfrom roam_core import make_plan\nfrom roam_core.model.b import _x\n")
    found = _violations(core)
    assert len(found) == 3, found
    for words in ("imports torch at module level", "from the roam_core facade",
                  "the private name _x"):
        assert any(words in f for f in found), (words, found)


def test_the_walk_sees_the_package() -> None:
    # the rules above must see every module; an empty walk would make them vacuous
    assert len(_modules()) >= 60


def test_no_package_attribute_is_shadowed_by_a_submodule() -> None:
    """``from pkg.step import compare`` in ``pkg/__init__`` and a module ``pkg/compare.py``:
    importing the module rebinds ``pkg.compare`` to it, silently replacing the function."""
    clashes = []
    for init in sorted(CORE.rglob("__init__.py")):
        pkg = init.parent
        subs = {p.stem for p in pkg.glob("*.py")} - {"__init__"} | {p.name for p in pkg.iterdir()
                                                     if (p / "__init__.py").exists()}
        pkg_name = ".".join(("roam_core", *pkg.relative_to(CORE).parts))
        for node in ast.walk(ast.parse(init.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != pkg_name:
                clashes += [f"{pkg_name}.{a.asname or a.name}" for a in node.names
                            if (a.asname or a.name) in subs]
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in subs:
                clashes.append(f"{pkg_name}.{node.name}")
    assert clashes == [], f"names shadowed by a submodule of the same name: {clashes}"
