"""Pure computations the views share: roam_core objects in, numbers, rows and words out.

No cache, no plotly, no Dash: the planner door and the plan-settings record
(:mod:`~app.analysis.planner`, :mod:`~app.analysis.settings`), the rectangles of a layout
(:mod:`~app.analysis.layout_view`), module paths (:mod:`~app.analysis.modules`) and what is
live at a peak (:mod:`~app.analysis.peaks`).  A computation that only one view needs lives in
that view's ``model`` module instead.
"""
