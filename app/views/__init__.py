"""The views of the page, one module or small package each, and the page built from them.

:mod:`app.views.registry` lists the views (its docstring says how to add one);
:mod:`app.views.page` lays them out and registers their callbacks.  Shared by the views:
:mod:`~app.views.spec` (what a view is), :mod:`~app.views.components` (cards, graphs),
:mod:`~app.views.lazy` (mount on demand), :mod:`~app.views.callback_tools` and
:mod:`~app.views.running` (the job buttons).
"""
