"""Every view of the page, in page order: the one list the page is built from.

How to add a view
-----------------
A view is a module ``app/views/<name>.py``, or a small package ``app/views/<name>/`` whose
``view.py`` holds the Dash part, beside (as needed) ``data.py`` (cache-backed: keys in,
figures and rows out), ``figure.py`` (pure plotly) and ``model.py`` (pure computations).
Only ``view.py`` imports Dash; ``data``, ``figure`` and ``model`` never do (import-linter
checks it, and the layers ``view > data > figure > model`` inside the package).

1. Write the view.  It defines ``VIEW = View(name, column, components, register, ...)``
   (:class:`app.views.spec.View`): ``components(defaults)`` returns its cards,
   ``register(app, config)`` adds its callbacks, ``stores()`` its own ``dcc.Store``
   components, ``warm(graph_key, plan_key)`` precomputes what it shows first.  It declares
   its own component ids in its module (``app/views/budget/view.py`` does) and reads the
   page's shared stores through :mod:`app.core.ids` (``GRAPH_KEY``, ``PLAN_KEY``,
   ``BASELINE``, ``VIEW_RANGE``, ``SELECTION``...).  A card below the fold can be a lazy
   card (:mod:`app.views.lazy`) whose body is built when it is first opened.
2. Register it here: import its ``VIEW`` and put it in :data:`VIEWS` where it goes in its
   column.

Nothing else changes: :mod:`app.views.page` lays the page out from this list and registers
every view's callbacks; tests of a view go in ``tests/app/views/test_<name>.py``.
"""

from __future__ import annotations

from app.views.budget.view import VIEW as BUDGET
from app.views.compare.view import VIEW as COMPARE
from app.views.curves.view import VIEW as CURVES
from app.views.explain.view import VIEW as EXPLAIN
from app.views.export.view import VIEW as EXPORT
from app.views.fit.view import VIEW as FIT
from app.views.layouts.view import VIEW as LAYOUTS
from app.views.linking.view import VIEW as LINKING
from app.views.live.view import VIEW as LIVE
from app.views.loading.view import VIEW as LOADING
from app.views.memory_by_module.view import VIEW as MEMORY_BY_MODULE
from app.views.planning.view import VIEW as PLANNING
from app.views.search.view import VIEW as SEARCH
from app.views.share.view import VIEW as SHARE
from app.views.snapshot.view import VIEW as SNAPSHOT
from app.views.spec import View
from app.views.summary.view import VIEW as SUMMARY
from app.views.timeline.view import VIEW as TIMELINE
from app.views.tree.view import VIEW as TREE
from app.views.use_plan.view import VIEW as USE_PLAN
from app.views.verify.view import VIEW as VERIFY
from app.views.walkthrough.view import VIEW as WALKTHROUGH

__all__ = ["VIEWS"]

#: The views in page order (each column keeps this order; see :class:`View.column`).
VIEWS: tuple[View, ...] = (
    # the side column: the controls
    LOADING,
    PLANNING,
    SEARCH,
    EXPORT,
    VERIFY,
    # the main column: the views of the plan
    SHARE,
    SUMMARY,
    WALKTHROUGH,
    LINKING,
    CURVES,
    TIMELINE,
    LAYOUTS,
    TREE,
    EXPLAIN,
    LIVE,
    MEMORY_BY_MODULE,
    BUDGET,
    COMPARE,
    FIT,
    SNAPSHOT,
    USE_PLAN,
)
