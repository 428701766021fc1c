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
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
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
#: Views below the fold (1000 px viewport): mounted once scrolled into view.  The run scrolls
#: to them after every view above the fold has rendered, and times them from that scroll.
BELOW_FOLD = {"module table": "#module-card", "module icicle": "#module-card"}
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
window.__longTasks = [];
try {
  new PerformanceObserver(l => l.getEntries().forEach(e => window.__longTasks.push(
    [e.startTime, e.duration]))).observe({type: "longtask", buffered: true});
} catch (e) {}
"""
#: Applies a JS function to both layout figures' ``layout.meta``; true when both answer true.
LAYOUT_META = ("(f => ['#layout-graph', '#base-layout-graph'].every(s => f("
               "document.querySelector(s + ' .js-plotly-plot')._fullLayout.meta)))")
#: Server-side record of every callback request: (output, start s, end s, response bytes).
CALLS: list[tuple[str, float, float, int]] = []


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


def _app_api() -> SimpleNamespace:
    """The app functions this benchmark calls, from either module layout: ``--before`` may
    serve a checkout whose app predates ``app/views`` (the flat ``app.services``)."""
    try:
        from app.analysis.planner import run_planner
        from app.analysis.settings import PlanSettings
        from app.core import state
        from app.views.curves import data as curves
        from app.views.layouts import data as layouts
        from app.views.page import warm
        from app.views.timeline import data as timeline
    except ImportError:
        from app import planning, services, state  # type: ignore[attr-defined]  # old layout
        return SimpleNamespace(
            PlanSettings=planning.PlanSettings, run_planner=planning.run_planner, state=state,
            memos=(services._curves, services._timeline, services._layouts),
            curves_figure=services.curves_figure, timeline_fig=services.timeline_fig,
            layout_figures=services.layout_figures, warm=services.warm)
    return SimpleNamespace(
        PlanSettings=PlanSettings, run_planner=run_planner, state=state,
        memos=(curves._curves, timeline._timeline, layouts._layouts),
        curves_figure=curves.curves_figure, timeline_fig=timeline.timeline_fig,
        layout_figures=layouts.layout_figures, warm=warm)


def _plan(graph: Any, method: str, time_limit_s: float) -> tuple[Any, float, str]:
    from roam_core.formats.plan_io import load_plan, save_plan

    api = _app_api()
    settings = api.PlanSettings(method=method, time_limit_s=time_limit_s)
    how = f"roam_core.planner.make_plan(method={method!r})"
    cached = Path(tempfile.gettempdir()) / (
        f"roam-bench-plan-{graph.name}-{method}-{time_limit_s:g}.json.gz")
    if cached.exists():  # planning GPT2-XL takes ~20 s: reuse the last run's plan
        return load_plan(cached, graph), float("nan"), how + " (cached from an earlier run)"
    t0 = time.perf_counter()
    plan = api.run_planner(graph, settings)
    plan_s = time.perf_counter() - t0
    save_plan(plan, cached)
    return plan, plan_s, how


def _instrument(app: Any) -> None:
    """Record every callback request's output, wall-clock span and response size."""
    import flask

    @app.server.before_request
    def _t0() -> None:
        flask.g.roam_t0 = time.time()

    @app.server.after_request
    def _t1(resp: Any) -> Any:
        if flask.request.path.endswith("_dash-update-component"):
            body = flask.request.get_json(silent=True) or {}
            out = str(body.get("output", "?"))
            if len(out) > 60:
                out = out[:57] + "..."
            if os.environ.get("ROAM_BENCH_TRACE"):
                print(f"  {time.time():.3f} {resp.status_code} {out} <- "
                      f"{body.get('changedPropIds')}", file=sys.stderr)
            size = resp.calculate_content_length() or 0
            CALLS.append((out, flask.g.roam_t0, time.time(), size))
        return resp


def _serve(app: Any) -> tuple[Any, str]:
    from werkzeug.serving import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log_request(self, *a: Any, **k: Any) -> None:
            pass

    srv = make_server("127.0.0.1", 0, app.server, threaded=True, request_handler=Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_port}"


def _page_run(browser: Any, url: str) -> dict[str, float]:
    checks = "{" + ",".join(f"{json.dumps(k)}: () => ({v})" for k, v in VIEWS.items()) + "}"
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.add_init_script(PROBE % checks)
    try:
        return _page_steps(page, errors, url)
    finally:
        ctx.close()


def _wait_views(page: Any, names: Any, errors: list[str]) -> None:
    want = json.dumps(sorted(names))
    try:
        page.wait_for_function(f"{want}.every(k => k in window.__firstRender)",
                               timeout=120_000)
    except Exception:
        seen = page.evaluate("window.__firstRender")
        raise RuntimeError(f"views never rendered: {set(names) - set(seen)}; "
                           f"console errors: {errors}") from None


def _page_steps(page: Any, errors: list[str], url: str) -> dict[str, float]:
    page.goto(url)
    _wait_views(page, set(VIEWS) - set(BELOW_FOLD), errors)
    scrolled = {}
    for name, sel in BELOW_FOLD.items():
        scrolled[name] = page.evaluate(
            f"(() => {{ document.querySelector({json.dumps(sel)}).scrollIntoView(); "
            "return performance.now(); })()") / 1000
    _wait_views(page, VIEWS, errors)
    out = {k: v / 1000 for k, v in page.evaluate("window.__firstRender").items()}
    for name, t in scrolled.items():
        out[f"{name} (s after scrolling to it)"] = max(out[name] - t, 0.0)
    n = page.evaluate("document.querySelector('#layout-graph .js-plotly-plot')"
                      "._fullLayout.meta.visible")
    # interaction: zoom the curves into a window -> every view follows, and the layouts are
    # redrawn for that window (an older app without ``meta.window`` switches to vectors)
    page.wait_for_load_state("networkidle")
    time.sleep(1.0)
    t0 = time.perf_counter()
    page.evaluate("Plotly.relayout(document.querySelector('#curves-graph .js-plotly-plot'),"
                  " {'xaxis.range[0]': 6000, 'xaxis.range[1]': 6300})")
    page.wait_for_function(LAYOUT_META + "(m => m.window ? m.window[0] === 6000 && "
                           "m.window[1] === 6300 : m.lod === 'vector')", timeout=60_000)
    out["zoom -> layout of the window"] = time.perf_counter() - t0
    out["_zoom_lod"] = page.evaluate("document.querySelector('#layout-graph .js-plotly-plot')"
                                     "._fullLayout.meta.lod")
    t0 = time.perf_counter()
    page.click("#reset-zoom")
    page.wait_for_function(LAYOUT_META + "(m => m.window ? m.window[0] === 0 : "
                           "m.lod === 'raster')", timeout=60_000)
    out["reset -> whole layout"] = time.perf_counter() - t0
    out["_tensors"] = float(n)
    out["_origin"] = page.evaluate("performance.timeOrigin") / 1000
    if os.environ.get("ROAM_BENCH_TRACE"):
        print(f"origin {out['_origin']:.3f} long tasks (start s, ms): " + ", ".join(
            f"{a / 1000:.2f}:{b:.0f}" for a, b in page.evaluate("window.__longTasks")),
            file=sys.stderr)
    out["_longtask_s"] = page.evaluate(
        "window.__longTasks.filter(t => t[0] < %f).reduce((a, t) => a + t[1], 0)"
        % (1000 * max(v for k, v in out.items() if k in VIEWS))) / 1000
    if errors:
        raise RuntimeError(f"console errors: {errors}")
    return out


def _profile_lines(runs: list[dict[str, Any]], tag: str) -> list[str]:
    """Where the page load's time goes: the callbacks the server answered before the last
    view rendered (median over the runs), and the browser's main-thread long tasks."""
    per: dict[str, list[tuple[float, float, int]]] = {}
    for r in runs:
        for o, t0, dt, n in r["_calls"]:
            per.setdefault(o, []).append((t0, dt, n))
    n_calls = [len(r["_calls"]) for r in runs]
    busy = [sum(dt for _, _, dt, _ in r["_calls"]) for r in runs]
    lines = [f"## Where the page load's time goes ({tag})", "",
             f"* callback requests answered before the last view rendered: median "
             f"{statistics.median(n_calls):g} per page load; server seconds in them (summed "
             f"over threads): median {statistics.median(busy):.2f} s",
             f"* browser main-thread long tasks (> 50 ms) before the last view rendered: "
             f"median {statistics.median(r['_longtask_s'] for r in runs):.2f} s", "",
             "| callback output | requests | median start s | median server s | KiB |",
             "|---|---|---|---|---|"]
    for o, v in sorted(per.items(), key=lambda kv: statistics.median(x[0] for x in kv[1])):
        lines.append(f"| {o} | {len(v) / len(runs):g} | "
                     f"{statistics.median(x[0] for x in v):.2f} | "
                     f"{statistics.median(x[1] for x in v):.3f} | "
                     f"{statistics.median(x[2] for x in v) / 1024:.0f} |")
    return [*lines, ""]


def _server_main(args: argparse.Namespace) -> int:
    """``--serve-to FILE``: build the app (from ``--app-root``'s code), serve it and write
    ``{"url", "info"}`` to FILE; serve until stdin closes.  ``GET /_bench/calls`` returns
    (and clears) the callback records."""
    if args.app_root:
        sys.path.insert(0, str(Path(args.app_root).resolve()))
    import flask

    from app import create_app
    from roam_core.formats.graph_io import save_graph

    api = _app_api()
    state = api.state
    graph = _graph(args.graph)
    plan, plan_s, how = _plan(graph, args.method, args.time_limit)
    cache = tempfile.mkdtemp(prefix="roam-bench-")
    state.configure(cache)
    gk = state.put_graph(graph)
    settings = api.PlanSettings(method=args.method, time_limit_s=args.time_limit)
    pk = state.plan_key(gk, settings.as_dict())
    state.put_plan(plan, pk)
    gfile = Path(cache) / "graph.json.gz"
    save_graph(graph, gfile)
    t0 = time.perf_counter()
    app = create_app(gfile, cache_dir=cache, startup_time_limit_s=args.time_limit,
                     startup_method=args.method)
    start_s = time.perf_counter() - t0
    py = {}
    for memo in api.memos:
        memo.cache_clear()  # measure a cold build (derived data stays memoised)
    for name, fn in (("curves", lambda: api.curves_figure(gk, pk, "eager", None, None)),
                     ("timeline", lambda: api.timeline_fig(gk, pk, "eager", None, None)),
                     ("layouts", lambda: api.layout_figures(gk, pk, "eager", None, None))):
        t1 = time.perf_counter()
        fn()
        py[name] = time.perf_counter() - t1
    api.warm(gk, pk)  # the memos as create_app leaves them
    _instrument(app)

    @app.server.route("/_bench/calls")
    def _calls() -> Any:
        out = list(CALLS)
        CALLS.clear()
        return flask.jsonify(out)

    srv, url = _serve(app)
    info = {"graph": f"{graph.name}: {len(graph.ops)} ops, {len(graph.tensors)} storages",
            "plan": f"{how}; planned in {plan_s:.1f} s; peak "
                    f"{plan.planned_peak_bytes / 2**30:.2f} GiB, arena "
                    f"{plan.arena_bytes / 2**30:.2f} GiB",
            "start_s": start_s, "py": py}
    Path(args.serve_to).write_text(json.dumps({"url": url, "info": info}))
    sys.stdin.read()  # until the parent closes the pipe
    srv.shutdown()
    return 0


def _start_server(args: argparse.Namespace, app_root: Path, tag: str) -> tuple[Any, Path]:
    import subprocess

    port_file = Path(tempfile.mkdtemp(prefix="roam-bench-srv-")) / f"{tag}.json"
    cmd = [sys.executable, __file__, "--serve-to", str(port_file), "--app-root", str(app_root),
           "--method", args.method, "--time-limit", str(args.time_limit)]
    if args.graph:
        cmd += ["--graph", args.graph]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, cwd=str(app_root))
    return proc, port_file


def _wait_server(proc: Any, port_file: Path, timeout_s: float = 900.0) -> dict[str, Any]:
    t0 = time.monotonic()
    while not port_file.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"bench server exited with {proc.returncode}")
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError("bench server did not start")
        time.sleep(0.5)
    time.sleep(0.2)  # the file is written in one call; let it land
    return json.loads(port_file.read_text())


def _fetch_calls(url: str) -> list[tuple[str, float, float, int]]:
    import urllib.request

    with urllib.request.urlopen(f"{url}/_bench/calls", timeout=30) as r:
        return [tuple(x) for x in json.loads(r.read())]


def _table(runs: list[dict[str, Any]], before: list[dict[str, Any]] | None) -> list[str]:
    boot = "summary card"  # a few hundred bytes: its time is the page boot itself
    keys = [k for k in runs[0] if not k.startswith("_")]
    head = "| view | median s | max s | median s after page boot |"
    rule = "|---|---|---|---|"
    if before:
        head += " before: median s | before: max s | before: after page boot |"
        rule += "---|---|---|"
    lines = [head, rule]

    def cols(rs: list[dict[str, Any]], k: str) -> str:
        if k not in rs[0]:
            return " - | - | - |"
        vals = [r[k] for r in rs]
        plain = "->" not in k and "after scrolling" not in k
        extra = f"{statistics.median(r[k] - r[boot] for r in rs):.2f}" if plain else "-"
        return f" {statistics.median(vals):.2f} | {max(vals):.2f} | {extra} |"

    for k in keys:
        lines.append(f"| {k} |" + cols(runs, k) + (cols(before, k) if before else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph")
    ap.add_argument("--method", default="roam")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/app_render.md"))
    ap.add_argument("--before", help="a checkout of the code to compare with (for example "
                    "`git worktree add /tmp/base main`): its app is served beside this one "
                    "and the page loads alternate between the two")
    ap.add_argument("--app-root", help=argparse.SUPPRESS)
    ap.add_argument("--serve-to", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_to:
        return _server_main(args)

    from playwright.sync_api import sync_playwright

    variants = {"now": ROOT} | ({"before": Path(args.before).resolve()} if args.before else {})
    procs = {}
    try:
        for tag, root in variants.items():  # one at a time: they share two cores
            procs[tag] = _start_server(args, root, tag)
            procs[tag] = (procs[tag][0], _wait_server(*procs[tag]))
        load_before = os.getloadavg()
        runs: dict[str, list[dict[str, Any]]] = {t: [] for t in variants}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                for i in range(args.runs + 1):  # the first run warms the browser's caches
                    for tag in variants:
                        url = procs[tag][1]["url"]
                        _fetch_calls(url)
                        r = _page_run(browser, url)
                        last = max(v for k, v in r.items() if k in VIEWS)
                        r["_calls"] = [(o, t0 - r["_origin"], t1 - t0, n)
                                       for o, t0, t1, n in _fetch_calls(url)
                                       if t0 - r["_origin"] <= last]  # the load's callbacks
                        if i:
                            runs[tag].append(r)
                        print(f"run {i} {tag}: " + ", ".join(
                            f"{k} {v:.2f}" for k, v in r.items() if not k.startswith("_")))
                version = browser.version
            finally:
                browser.close()
    finally:
        for proc, _ in procs.values():
            if proc.stdin:
                proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except Exception:
                proc.kill()
                proc.wait()
    load_after = os.getloadavg()
    info = procs["now"][1]["info"]
    now = runs["now"]
    lines = [
        "# App render benchmark (GPT2-XL, batch 1)", "",
        "Made by `benchmarks/app_render_bench.py` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        + (f", beside the code in `{args.before}` (\"before\"; page loads alternate between "
           "the two apps, each served by its own process)" if args.before else "") + ".",
        "",
        f"* graph: {info['graph']} ({int(now[0]['_tensors'])} rectangles in the layout view)",
        f"* plan: {info['plan']}",
        f"* app start-up (create_app with the plan cached): {info['start_s']:.1f} s",
        f"* machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores shared with other jobs (1-min load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after), headless chromium "
        f"{version} (software GL), viewport 1400x1000",
        "* server-side figure build (cold figure memo, derived arrays cached): " + ", ".join(
            f"{k} {v:.2f} s" for k, v in info["py"].items()),
        *([f"* the machine was overloaded (1-min load average above its {os.cpu_count()} "
           "cores): every second here is inflated, and by how much changes from one page "
           "load to the next; compare the columns, not the targets"]
          if max(load_before[0], load_after[0]) > (os.cpu_count() or 1) else []),
        "", f"Seconds from navigation start to first render, {len(now)} page loads after "
        "one warm-up (target: <= 3 s per view):", "",
        *_table(now, runs.get("before")),
        "", "Interactions are measured from the triggering action to both layout "
        "figures showing the new window (round trip through the server); the zoom "
        "(steps 6000-6300) is drawn as "
        + " / ".join(f"{tag}: {rs[0]['_zoom_lod']}" for tag, rs in runs.items()) + ". "
        "\"After page boot\" subtracts the summary card, whose payload is a few hundred "
        "bytes: it is the time to load Dash, React and plotly.js on this machine. "
        "The module view sits below the fold: each run scrolls to it once every view above "
        "the fold has rendered (it is mounted when scrolled into view).", "",
        *_profile_lines(now, "now"),
    ]
    if args.before:
        lines += _profile_lines(runs["before"], "before")
    Path(args.out).write_text("\n".join(lines))
    Path(args.out).with_suffix(".json").write_text(json.dumps({
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "info": info,
        "load_average_1min": [load_before[0], load_after[0]], "nproc": os.cpu_count(),
        "chromium": version, "before": args.before,
        "runs": {t: [{k: v for k, v in r.items() if k != "_calls"} for r in rs]
                 for t, rs in runs.items()}}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
