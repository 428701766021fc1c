"""The architecture of roam_core and of the app, enforced on the source.

The folder tree is the architecture: every layer is a package of roam_core (of app), and the
layer order lives in one place, the import-linter contracts of ``pyproject.toml``.

1. ``lint-imports`` keeps every contract (layers, acyclic siblings at any depth, no app/Dash/
   plotly in roam_core; the app's layers, view packages, Dash only in views), and breaks when
   a violation is planted in a copy of the tree.
2. ``import roam_core`` loads neither torch, Dash nor plotly (checked in a fresh process);
   ``import app`` loads neither, and the app's figure, data and model modules load no Dash.
3. Only the torch packages (tracer, zoo, runtime) import torch at module level.
4. No private name crosses a module boundary, and no module imports the ``roam_core`` facade.
5. In the app: files of at most 800 lines, functions of at most 120, a reason on every
   ``# type: ignore``.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "roam_core"
APP = ROOT / "app"
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


def _layers(container: str = "roam_core") -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"]
                 if c["type"] == "layers" and c.get("containers") == [container]]
    return [[p.strip() for p in row.replace("|", ":").split(":")] for row in layers["layers"]]


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
         "sys.exit(lint_imports(no_cache=True, config_filename='pyproject.toml'))"],
        cwd=root, capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": ""},
    )


# ------------------------------------------------------------------ import-linter
@pytest.mark.slow
def test_contracts_are_kept() -> None:
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "8 kept, 0 broken" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("where", "planted", "contract"), [
    ("roam_core/model/graph.py", "    from roam_core.planner import make_plan\n", "layered"),
    ("roam_core/ordering/decompose.py", "    from roam_core.layout import arena_layout\n",
     "layered"),
    ("roam_core/base/units.py", "    from roam_core.model import graph\n", "layered"),
    ("roam_core/model/reach.py", "    from roam_core.model import samples\n", "cycles"),
    ("roam_core/oracle/bounds/live_set.py", "    import plotly\n", "Dash or plotly"),
    ("app/core/state.py", "    from app.views.curves import view\n", "app is layered"),
    ("app/services/plan_data.py", "    from app.views.tree import data\n", "app is layered"),
    ("app/views/tree/data.py", "    from app.views.linking import data\n", "cycles"),
    ("app/views/timeline/figure.py", "    from app.views.timeline import data\n",
     "view > data > figure > model"),
    ("app/views/curves/figure.py", "    import dash\n", "import no Dash"),
    ("app/views/summary/model.py", "    import plotly.graph_objects\n", "nor plotly"),
    ("app/views/search/view.py", "    from app.views import registry\n", "the registry"),
], ids=["up-a-layer", "sibling", "base-imports-model", "cycle", "plotly", "app-core-imports-view",
        "app-service-imports-view", "app-view-cycle", "app-figure-imports-data",
        "app-figure-imports-dash", "app-model-imports-plotly", "app-view-imports-registry"])
def test_contracts_break_on_a_planted_violation(tmp_path: Path, where: str, planted: str,
                                                contract: str) -> None:
    for tree in (CORE, APP):  # both roots: the contracts name both
        shutil.copytree(tree, tmp_path / tree.name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    if where == "roam_core/model/reach.py":  # make samples import reach too: a cycle
        samples = tmp_path / "roam_core/model/samples.py"
        samples.write_text(samples.read_text() + "\n\ndef _planted():\n"
                           "    from roam_core.model import reach\n")
    target = tmp_path / where
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


@pytest.mark.slow
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


# ------------------------------------------------------------------ the app
#: Every module of the app whose code must run without Dash (figures, data, models, services).
def _dash_free_app_modules() -> list[str]:
    names = []
    for path in sorted(APP.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = rel.parts
        pure_layer = parts[1] in ("analysis", "figures", "services", "report")
        view_part = parts[1] == "views" and len(parts) == 4 and parts[3] in (
            "data", "figure", "model")
        if pure_layer or view_part:
            names.append(".".join(p for p in parts if p != "__init__"))
    return names


def test_every_app_package_has_a_layer() -> None:
    declared = {m for row in _layers("app") for m in row}
    children = {p.name for p in APP.iterdir() if (p / "__init__.py").exists()}
    children |= {p.stem for p in APP.glob("*.py")} - {"__init__", "__main__"}
    assert children == declared, "every app package and module needs a row in app's layers"


@pytest.mark.slow
def test_import_app_is_light_and_figures_data_models_load_no_dash() -> None:
    modules = _dash_free_app_modules()
    assert len(modules) >= 40  # the walk sees the slices (an empty list would prove nothing)
    code = (
        "import sys, importlib, app\n"
        "light = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'dash', 'plotly'))\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(','.join(light), '|', 'dash' in sys.modules, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "| False False", out.stdout


def _app_rule_breaks(root: Path) -> list[str]:
    """Files over 800 lines, functions over 120, ``# type: ignore`` without a reason, private
    names imported from another module."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(root.parent)
        lines = text.splitlines()
        if len(lines) > 800:
            bad.append(f"{where} has {len(lines)} lines (at most 800)")
        for i, line in enumerate(lines, 1):
            if "# type: ignore" in line and not re.search(
                    r"# type: ignore(\[[^\]]*\])?\s+#\s*\S", line):
                bad.append(f"{where}:{i} # type: ignore without a reason")
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]  # set by ast.parse
                if n > 120:
                    bad.append(f"{where}:{node.lineno} {node.name} has {n} lines (at most 120)")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("app") \
                    and node.module != module:
                bad += [f"{where}:{node.lineno} imports the private name {a.name}"
                        for a in node.names if a.name.startswith("_")]
    return bad


def test_app_files_and_functions_are_small_and_type_ignores_say_why() -> None:
    assert _app_rule_breaks(APP) == []


def test_the_app_rules_fail_on_planted_violations(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "big.py").write_text("x = 1\n" * 801)
    (app / "long.py").write_text("def f():\n" + "    x = 1\n" * 120)
    (app / "why.py").write_text("y = f()  # type: ignore[misc]\n"
                                "z = g()  # type: ignore  # a reason\n")
    (app / "private.py").write_text("from app.big import _x\n")
    found = _app_rule_breaks(app)
    assert len(found) == 4, found
    for words in ("801 lines", "f has 121 lines", "why.py:1 # type: ignore without", "_x"):
        assert any(words in f for f in found), (words, found)
