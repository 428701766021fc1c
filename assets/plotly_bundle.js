// roam: dcc.Graph loads plotly.js from window._dashPlotlyJSURL, which Dash points at the
// full plotly.js (4.7 MB: maps, 3D, every trace). Evaluating it was the largest single task
// of a page load. The app draws three traces (scatter, heatmap, icicle): point the loader
// at assets/vendor/plotly-roam.min.js, those traces only (1.3 MB, built by
// scripts/build_plotly_bundle.sh). The URL stays fixed when Dash's renderer sets its own.
(function () {
  var me = document.currentScript && document.currentScript.src;
  if (!me) { return; }
  var url = me.replace(/[^/]*$/, 'vendor/plotly-roam.min.js');
  Object.defineProperty(window, '_dashPlotlyJSURL', {
    configurable: true,
    get: function () { return url; },
    set: function () {}
  });
})();
