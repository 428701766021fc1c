"""Old module paths (roam 0.0's flat package) still import, for one version, with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from roam_core import OLD_MODULE_PATHS


@pytest.fixture
def fresh():  # type: ignore[no-untyped-def]
    """Forget the old paths before and after each test (other tests never see them).

    Importing an old path binds the module on its parent, over a public name of the same
    name (``roam_core.simulate`` the function): those names are put back afterwards."""
    import roam_core

    kept = {old.rpartition(".")[2]: getattr(roam_core, old.rpartition(".")[2])
            for old in OLD_MODULE_PATHS if old.count(".") == 1
            and hasattr(roam_core, old.rpartition(".")[2])
            and not isinstance(getattr(roam_core, old.rpartition(".")[2]), type(sys))}

    def drop() -> None:
        for name in list(sys.modules):
            if any(name == old or name.startswith(old + ".") for old in OLD_MODULE_PATHS):
                del sys.modules[name]
                head, _, child = name.rpartition(".")
                if head in sys.modules and getattr(sys.modules[head], child, None) is not None:
                    delattr(sys.modules[head], child)
        for child, obj in kept.items():
            setattr(roam_core, child, obj)

    drop()
    yield
    drop()


@pytest.mark.slow
@pytest.mark.parametrize("old", sorted(OLD_MODULE_PATHS))
def test_every_old_path_imports_with_a_deprecation_warning(old: str, fresh: None) -> None:
    targets = OLD_MODULE_PATHS[old]
    if any(t.startswith("roam_core.runtime") for t in targets):
        pytest.importorskip("torch")
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated.*{targets[0]}"):
        mod = importlib.import_module(old)
    news = [importlib.import_module(t) for t in targets]
    if len(news) == 1:
        assert mod is news[0]
    for new in news:  # every public name of every target, the very same objects
        for name in getattr(new, "__all__", ()):
            assert getattr(mod, name) is getattr(new, name), (old, name)


def test_old_names_are_the_new_objects(fresh: None) -> None:
    from roam_core.model.graph import Graph
    from roam_core.ordering.list_schedulers import lpmf_order

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import roam_core.execute.step as old_step  # type: ignore[import-not-found]
        from roam_core.graph import Graph as OldGraph  # type: ignore[import-not-found]
        from roam_core.heuristics import lpmf_order as old_lpmf  # type: ignore[import-not-found]
    assert OldGraph is Graph
    assert old_lpmf is lpmf_order
    assert old_step.__name__ == "roam_core.runtime.step"  # one module, not a second copy


@pytest.mark.slow
def test_new_paths_never_warn_and_unknown_paths_still_fail(fresh: None) -> None:
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import roam_core, roam_core.model.graph, roam_core.planner, roam_core.bench\n"
            "try:\n    import roam_core.nope\nexcept ModuleNotFoundError:\n    pass\n"
            "else:\n    raise SystemExit('roam_core.nope imported')\n")
    subprocess.run([sys.executable, "-c", code], check=True)
