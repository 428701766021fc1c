"""Shared infrastructure of the app, below every other package of ``app``.

The server-side cache (:mod:`~app.core.state`), per-process memos (:mod:`~app.core.memo`),
background-job processes (:mod:`~app.core.jobs`), component ids (:mod:`~app.core.ids`),
what the stores hold (:mod:`~app.core.store_types`), units for people
(:mod:`~app.core.formatting`), the app's data folders (:mod:`~app.core.paths`) and its
per-app settings (:mod:`~app.core.config`).  Nothing here knows a view.
"""
