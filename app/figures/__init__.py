"""Pure figure helpers the views share: roam_core objects and view models in, plotly out.

No cache and no Dash: colours and the base layout (:mod:`~app.figures.style`), the shared
step axis and binary byte ticks (:mod:`~app.figures.axes`), the NumPy rasteriser of the
layout overview (:mod:`~app.figures.raster`) and the offline HTML report page
(:mod:`~app.figures.html_report`).  A view's own figure lives in its ``figure`` module.
"""
