#!/usr/bin/env bash
# Rebuild assets/vendor/plotly-roam.min.js: plotly.js with only the traces the app draws
# (scripts/plotly_bundle/entry.js), about a third of the 4.7 MB bundle Dash serves.
# Needs node and npm (the npm registry); the app itself never does: the bundle is committed.
#   scripts/build_plotly_bundle.sh [PLOTLY_JS_VERSION]
# The version defaults to the plotly.js inside the installed Python plotly package, so the
# browser draws what kaleido exports.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
version="${1:-$("$py" -c 'from plotly.offline import get_plotlyjs_version as v; print(v())')}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/plotly_bundle/entry.js" "$work/"
traces="scatter$(sed -n "s|.*require('plotly.js/lib/\([a-z0-9]*\)').*|, \1|p" "$work/entry.js" | grep -v core | tr -d '\n')"
cd "$work"
echo '{"name": "roam-plotly-bundle", "version": "1.0.0", "private": true}' > package.json
npm install --no-audit --no-fund --silent "plotly.js@$version" esbuild@0.25 buffer@6
# the flags are plotly.js's own esbuild-config.js; its CSS and GLSL plugins are not needed
# (the only CSS is maplibre's, for map traces, written beside the bundle and dropped; the
# traces kept have no .glsl); the banner keeps the licence
npx esbuild entry.js --bundle --format=iife --global-name=Plotly --minify --target=es2016 \
  --define:global=window --define:define.amd=false \
  --alias:regl=@plotly/regl --alias:stream=stream-browserify --log-level=warning \
  --banner:js="/*! plotly.js v$version (traces: $traces) | MIT License | Copyright 2012-2026, Plotly, Inc. | built by roam scripts/build_plotly_bundle.sh */" \
  --outfile=plotly-roam.min.js
mkdir -p "$root/assets/vendor"
cp plotly-roam.min.js "$root/assets/vendor/plotly-roam.min.js"
ls -l "$root/assets/vendor/plotly-roam.min.js"
