"""Cache-backed data that several views share: keys in, plans, graphs and arrays out.

No Dash (every function is unit-tested with plain values).  The "before" and planned sides of
a plan (:mod:`~app.services.plan_data`), the graph a plan's views are drawn over
(:mod:`~app.services.view_graph`), planning into the cache (:mod:`~app.services.planning`),
what is selected (:mod:`~app.services.selection`), uploads (:mod:`~app.services.uploads`)
and how a memoised figure is handed out (:mod:`~app.services.figure_cache`).
"""
