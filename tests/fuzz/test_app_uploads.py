"""The app's upload callbacks over the fuzz corpus: a graph, plan or snapshot that is bad
(or a plan that states a false figure) is refused with its message on the page, and the
previous graph stays loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roam_core.base.errors import RoamError
from tests.fuzz.corpus import Case, cases


def _params(kind: str, expects: tuple[str, ...]) -> list[Any]:
    chosen = [c for c in cases((kind,)) if not c.special and c.expect in expects]
    return [pytest.param(c, id=c.name, marks=() if i % 5 == 0 else pytest.mark.slow)
            for i, c in enumerate(chosen)]


@pytest.mark.parametrize("case", _params("graph", ("refuse",)))
def test_a_bad_graph_upload_shows_an_error_and_keeps_the_graph(case: Case,
                                                                cache_dir: Path) -> None:
    from app.core import ids
    from app.services.uploads import UploadError
    from app.views.loading import view as loading
    from app.views.uploads import result_id
    from tests.app.helpers import run, uploaded

    if not case.data:  # the upload route refuses an empty file before any view sees it
        with pytest.raises(UploadError, match=r"arrived empty"):
            uploaded(case.data, case.name)
        return
    ref = uploaded(case.data, case.name)
    out = run(loading.load_graph, result_id(ids.UPLOAD), ref, None, ref, None)
    assert out[0] is loading.dash.no_update  # the loaded graph stays
    assert out[1].startswith("Error: ")
    assert "\n" not in out[1]


@pytest.mark.parametrize("case", _params("plan", ("refuse", "false")))
def test_a_bad_or_false_plan_is_not_imported(case: Case, cache_dir: Path) -> None:
    from app.core import state
    from app.views.export.data import import_plan
    from roam_core.formats.graph_io import load_graph
    from tests.fuzz.corpus import BASE_GRAPH

    gk = state.put_graph(load_graph(BASE_GRAPH))
    with pytest.raises(RoamError):
        import_plan(case.data, case.name, gk)


@pytest.mark.parametrize("case", _params("snapshot", ("refuse",)))
def test_a_bad_snapshot_upload_is_refused(case: Case, cache_dir: Path) -> None:
    from app.views.snapshot.view import on_snapshot_upload
    from tests.app.helpers import uploaded

    out = on_snapshot_upload(uploaded(case.data, "s.pickle"))
    assert out[1].startswith("Snapshot not loaded: ")
    assert not Path("/tmp/roam-fuzz-pwned").exists()
