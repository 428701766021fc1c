"""Time to first render of every app view for a GPT2-XL batch-1 plan, in headless chromium.

    .venv/bin/python benchmarks/app_render_bench.py [--graph G.json.gz] [--method lescea]
        [--runs 3] [--out benchmarks/results/app_render.md]

Without ``--graph`` it traces ``gpt2-xl`` (batch 1, ``roam`` setting) through ``roam_core.zoo``
(about 40 s on CPU; cached under the temp dir).  The plan uses ``--method`` (a baseline by
default: the full planner takes minutes on GPT2-XL) and is put in the app cache before the
app starts, so page load measures rendering only.  Times are from navigation start to the
first animation frame in which each view shows its content (an in-page rAF probe), plus two
interactions: zooming the curves into a window (the layout switches to vectors) and back.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: view -> JS predicate that is true once the view shows its content.
VIEWS = {
    "summary card": "!!document.querySelector('#summary-card table')",
    "memory curves": "(g => g && g._fullData && g._fullData.length > 0 && "
                     "!!g.querySelector('.scatterlayer, .gl-canvas'))"
                     "(document.querySelector('#curves-graph .js-plotly-plot'))",
    "operator timeline": "(g => g && g._fullData && g._fullData.length > 0)"
                         "(document.querySelector('#timeline-graph .js-plotly-plot'))",
    "planned layout": "(g => g && g._fullLayout && g._fullLayout.meta && "
                      "(g._fullLayout.images || []).length + g._fullData.length > 1)"
                      "(document.querySelector('#layout-graph .js-plotly-plot'))",
    "baseline layout": "(g => g && g._fullLayout && g._fullLayout.meta)"
                       "(document.querySelector('#base-layout-graph .js-plotly-plot'))",
    "task tree": "!!document.querySelector('#task-tree button, #task-tree .muted')",
    "live table": "!!document.querySelector('#live-table td')",
    "explain panel": "!!document.querySelector('#explain-panel li')",
    "module table": "!!document.querySelector('#module-table td')",
    "module icicle": "(g => g && g._fullData && g._fullData.length > 0)"
                     "(document.querySelector('#module-icicle .js-plotly-plot'))",
}
PROBE = """
window.__firstRender = {};
const checks = %s;
function tick() {
  const now = performance.now();
  for (const [name, fn] of Object.entries(checks)) {
    if (!(name in window.__firstRender)) { try { if (fn()) window.__firstRender[name] = now; }
                                           catch (e) {} }
  }
  if (Object.keys(window.__firstRender).length < Object.keys(checks).length)
    requestAnimationFrame(tick);
}
requestAnimationFrame(tick);
"""


def _graph(path: str | None) -> Any:
    from roam_core.formats.graph_io import load_graph, save_graph

    if path:
        return load_graph(path)
    cached = Path(tempfile.gettempdir()) / "roam-bench-gpt2xl-b1-roam.json.gz"
    if not cached.exists():
        from roam_core.zoo import trace_zoo

        t0 = time.perf_counter()
        save_graph(trace_zoo("gpt2-xl", 1, setting="roam").graph, cached)
        print(f"traced gpt2-xl b1 in {time.perf_counter() - t0:.1f} s")
    return load_graph(cached)


def _plan(graph: Any, method: str, time_limit_s: float) -> tuple[Any, float, str]:
    from app import planning

    settings = planning.PlanSettings(method=method, time_limit_s=time_limit_s)
    t0 = time.perf_counter()
    plan = planning.run_planner(graph, settings)
    return plan, time.perf_counter() - t0, f"roam_core.planner.make_plan(method={method!r})"


def _serve(app: Any) -> tuple[Any, str]:
    from werkzeug.serving import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log_request(self, *a: Any, **k: Any) -> None:
            pass

    srv = make_server("127.0.0.1", 0, app.server, threaded=True, request_handler=Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_port}"


def _page_run(browser: Any, url: str) -> dict[str, float]:
    import json

    checks = "{" + ",".join(f"{json.dumps(k)}: () => ({v})" for k, v in VIEWS.items()) + "}"
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.add_init_script(PROBE % checks)
    page.goto(url)
    try:
        page.wait_for_function(f"Object.keys(window.__firstRender).length >= {len(VIEWS)}",
                               timeout=120_000)
    except Exception:
        seen = page.evaluate("window.__firstRender")
        raise RuntimeError(f"views never rendered: {set(VIEWS) - set(seen)}; "
                           f"console errors: {errors}") from None
    out = {k: v / 1000 for k, v in page.evaluate("window.__firstRender").items()}
    n = page.evaluate("document.querySelector('#layout-graph .js-plotly-plot')"
                      "._fullLayout.meta.visible")
    # interaction: zoom the curves into a window -> every view follows, layout goes vector
    page.wait_for_load_state("networkidle")
    time.sleep(1.0)
    t0 = time.perf_counter()
    page.evaluate("Plotly.relayout(document.querySelector('#curves-graph .js-plotly-plot'),"
                  " {'xaxis.range[0]': 6000, 'xaxis.range[1]': 6300})")
    page.wait_for_function("document.querySelector('#layout-graph .js-plotly-plot')"
                           "._fullLayout.meta.lod === 'vector'", timeout=60_000)
    out["zoom -> vector layout"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    page.click("#reset-zoom")
    page.wait_for_function("document.querySelector('#layout-graph .js-plotly-plot')"
                           "._fullLayout.meta.lod === 'raster'", timeout=60_000)
    out["reset -> raster layout"] = time.perf_counter() - t0
    out["_tensors"] = float(n)
    ctx.close()
    if errors:
        raise RuntimeError(f"console errors: {errors}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph")
    ap.add_argument("--method", default="roam")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/app_render.md"))
    args = ap.parse_args(argv)

    from playwright.sync_api import sync_playwright

    from app import create_app, services, state
    from app.planning import PlanSettings

    graph = _graph(args.graph)
    plan, plan_s, how = _plan(graph, args.method, args.time_limit)
    cache = tempfile.mkdtemp(prefix="roam-bench-")
    state.configure(cache)
    gk = state.put_graph(graph)
    settings = PlanSettings(method=args.method, time_limit_s=args.time_limit)
    state.put_plan(plan, state.plan_key(gk, settings.as_dict()))
    gfile = Path(cache) / "graph.json.gz"
    from roam_core.formats.graph_io import save_graph

    save_graph(graph, gfile)
    t0 = time.perf_counter()
    app = create_app(gfile, cache_dir=cache, startup_time_limit_s=args.time_limit,
                     startup_method=args.method)
    start_s = time.perf_counter() - t0
    py = {}
    pk = state.plan_key(gk, settings.as_dict())
    for memo in (services._curves, services._timeline, services._layouts):
        memo.cache_clear()  # measure a cold build (derived data stays memoised)
    for name, fn in (("curves", lambda: services.curves_figure(gk, pk, "eager", None, None)),
                     ("timeline", lambda: services.timeline_fig(gk, pk, "eager", None, None)),
                     ("layouts", lambda: services.layout_figures(gk, pk, "eager", None, None))):
        t1 = time.perf_counter()
        fn()
        py[name] = time.perf_counter() - t1
    srv, url = _serve(app)
    load_before = os.getloadavg()
    runs = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        for i in range(args.runs + 1):  # the first run warms the server-side memo caches
            r = _page_run(browser, url)
            if i:
                runs.append(r)
            print(f"run {i}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()))
        version = browser.version
        browser.close()
    srv.shutdown()
    load_after = os.getloadavg()
    keys = [k for k in runs[0] if not k.startswith("_")]
    lines = [
        "# App render benchmark (GPT2-XL, batch 1)", "",
        "Made by `benchmarks/app_render_bench.py` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"* graph: {graph.name}: {len(graph.ops)} ops, {len(graph.tensors)} storages "
        f"({int(runs[0]['_tensors'])} rectangles in the layout view)",
        f"* plan: {how}; planned in {plan_s:.1f} s; peak {plan.planned_peak_bytes / 2**30:.2f} "
        f"GiB, arena {plan.arena_bytes / 2**30:.2f} GiB",
        f"* app start-up (create_app with the plan cached): {start_s:.1f} s",
        f"* machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores shared with other jobs (1-min load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after), headless chromium "
        f"{version} (software GL), viewport 1400x1000",
        "* server-side figure build (cold figure memo, derived arrays cached): " + ", ".join(
            f"{k} {v:.2f} s" for k, v in py.items()),
        "", f"Seconds from navigation start to first render, {len(runs)} page loads after "
        "one warm-up (target: <= 3 s per view):", "",
        "| view | median s | max s | median s after page boot |", "|---|---|---|---|",
    ]
    boot = "summary card"  # a few hundred bytes: its time is the page boot itself
    for k in keys:
        vals = [r[k] for r in runs]
        extra = [r[k] - r[boot] for r in runs] if "->" not in k else None
        tail = f"{statistics.median(extra):.2f}" if extra is not None else "-"
        lines.append(f"| {k} | {statistics.median(vals):.2f} | {max(vals):.2f} | {tail} |")
    lines += ["", "Interactions are measured from the triggering action to the layout "
              "figure reporting its new level of detail (round trip through the server). "
              "\"After page boot\" subtracts the summary card, whose payload is a few hundred "
              "bytes: it is the time to load Dash, React and plotly.js on this machine.", ""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
