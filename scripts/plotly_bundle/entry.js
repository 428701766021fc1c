'use strict';
// roam's plotly.js: the core (scatter) and the traces the app draws, nothing else
// (tests/app/test_plotly_bundle.py checks that every trace app/ makes is registered here).
// Add a trace here when a figure in app/ starts using a new trace type, then rebuild with
// scripts/build_plotly_bundle.sh (a trace missing from the bundle draws nothing).
var Plotly = require('plotly.js/lib/core');

Plotly.register([
    require('plotly.js/lib/heatmap'),
    require('plotly.js/lib/icicle'),
]);

module.exports = Plotly;
