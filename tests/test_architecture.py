"""The import layers of ../shared/design/architecture.md, enforced on the source.

1. ``import roam_core`` loads neither torch, Dash nor plotly (checked in a fresh process).
2. Nothing in roam_core imports ``app``, ``dash`` or ``plotly``; the one exception is the
   ``roam serve`` entry point, which loads the app by name inside its handler.
3. Only the torch modules (tracer, zoo, executor) import torch at module level.
4. A roam_core module imports only modules of its own layer or lower ones.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "roam_core"

#: Layer of every roam_core module (lower layers never import higher ones).
LAYERS: dict[str, int] = {
    "errors": 0, "config": 0, "units": 0, "safe_gzip": 1,
    "graph": 1,
    "graph_io": 2, "samples": 2, "simulate": 2, "validate": 2, "reach": 2, "dsa": 2, "dag_view": 2,
    "bounds": 3, "allocator_sim": 3, "baseline": 3, "updates": 3, "brute_force": 3,
    "decompose": 3, "_cpsat": 3, "rewrites": 3, "layout_baselines": 3, "dsa_solver": 3,
    "plan": 3, "heuristics": 3, "dsa_heuristics": 3,
    "order_ilp": 4, "monolithic": 4, "arena": 4, "plan_io": 4,
    "planner": 5, "snapshot": 5,
    "bench": 6,
    "trace": 7, "zoo": 7, "execute": 7, "cli": 7, "commands": 7, "__main__": 7,
}
TORCH_MODULES = {"trace", "zoo", "execute"}
#: Modules allowed to load the app (by name, inside a function).
APP_LOADERS = {"commands.serve"}


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out.append((".".join(parts) or "__init__", path))
    return out


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import in a file."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            names = ["roam_core." + (node.module or "")]
        found.extend((n, id(node) in top) for n in names)
    # imports guarded by `if TYPE_CHECKING:` or try at top level still count as top level
    for stmt in tree.body:
        if isinstance(stmt, (ast.If, ast.Try)):
            for node in ast.walk(stmt):
                if isinstance(node, ast.Import):
                    found.extend((a.name, True) for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.append((node.module, True))
    return found


def _layer(module: str) -> int:
    head = module.split(".")[0]
    if head not in LAYERS:
        pytest.fail(f"roam_core.{module} has no layer in tests/test_architecture.py: add it")
    return LAYERS[head]


def test_import_roam_core_is_light() -> None:
    code = (
        "import sys, roam_core, roam_core.cli\n"
        "heavy = ('torch', 'dash', 'plotly', 'app')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import roam_core loaded: {out.stdout.strip()[:300]}"


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda x: str(x))
def test_module_respects_layers(module: str, path: Path) -> None:
    if module == "__init__":
        layer = 99
    else:
        layer = _layer(module)
    head = module.split(".")[0]
    for name, top_level in _imports(path):
        root = name.split(".")[0]
        assert root not in ("dash", "plotly"), f"roam_core.{module} imports {name}"
        if root == "app":
            assert module in APP_LOADERS, f"roam_core.{module} imports app"
            assert not top_level, f"roam_core.{module} imports app at module level"
        if root == "torch" and top_level:
            assert head in TORCH_MODULES, f"roam_core.{module} imports torch at module level"
        if root == "roam_core" and name != "roam_core":
            target = name.split(".")[1]
            if module == "__init__":
                assert target not in TORCH_MODULES or not top_level, (
                    f"roam_core/__init__ imports torch module {target} at module level")
                continue
            assert _layer(target) <= layer, (
                f"roam_core.{module} (layer {layer}) imports roam_core.{target} "
                f"(layer {_layer(target)})")


def test_layer_walk_sees_the_package() -> None:
    # the rules above must see every module; an empty walk would make them vacuous
    assert len(_modules()) >= 8
