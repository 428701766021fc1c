// roam: a click on the per-module icicle selects that module (every view highlights it);
// it does not zoom. Plotly's icicle zoom transition leaves broken (NaN) paths in the app,
// so the click is cancelled and its node handed to Dash as the graph's clickData.
(function () {
  function attach() {
    const gd = document.querySelector('#module-icicle .js-plotly-plot');
    if (!gd || !gd.on || gd.__roamIcicle) { return; }
    gd.__roamIcicle = true;
    gd.on('plotly_icicleclick', function (ev) {
      const p = ev && ev.points && ev.points[0];
      const dc = window.dash_clientside;
      if (p && dc && dc.set_props) {
        dc.set_props('module-icicle', {clickData: {points: [{id: p.id, label: p.label}]}});
      }
      return false;
    });
  }
  new MutationObserver(attach).observe(document.documentElement,
                                       {childList: true, subtree: true});
})();
