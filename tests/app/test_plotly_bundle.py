"""The app's own plotly.js bundle: every trace the app draws is in it, and Dash loads it
instead of the full bundle (assets/plotly_bundle.js)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_trace_the_app_makes_is_in_the_bundle() -> None:
    entry = (ROOT / "scripts/plotly_bundle/entry.js").read_text()
    registered = {"scatter", *re.findall(r"require\('plotly\.js/lib/(\w+)'\)", entry)} - {"core"}
    made = {m.lower() for p in (ROOT / "app").rglob("*.py")
            for m in re.findall(r"\bgo\.([A-Z]\w+)\(", p.read_text())} - {"figure"}
    assert made, "no trace found: the pattern is stale"
    assert made <= registered, f"traces missing from the plotly bundle: {made - registered}"
    banner = (ROOT / "assets/vendor/plotly-roam.min.js").read_text()[:300]
    built = re.search(r"traces: ([\w, ]+)\)", banner)
    assert built, "the bundle has no build banner: rebuild it (scripts/build_plotly_bundle.sh)"
    assert set(built.group(1).split(", ")) == registered  # rebuilt since entry.js changed


def test_dash_loads_the_bundle_not_the_full_plotly() -> None:
    hook = (ROOT / "assets/plotly_bundle.js").read_text()
    assert "'vendor/plotly-roam.min.js'" in hook
    assert "_dashPlotlyJSURL" in hook
