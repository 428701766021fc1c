"""The app's background jobs on Celery + Redis, end to end on 127.0.0.1.

The test starts a private ``redis-server`` (free port, no persistence) and a Celery worker
(``celery -A app.worker worker``, the deployment command in docs/app.md) in subprocesses, serves
the app with ``REDIS_URL`` set, and runs one plan job the way the browser does: a POST to
``/_dash-update-component`` for the Plan button's background callback, then polls with the
signed job handles until the result arrives.  The job only completes if the Celery worker ran
it (the web server has no job runner of its own in this mode).  Both processes are stopped at
the end.  Skipped, with the reason, when ``redis-server`` or Celery is missing (``./dev.sh test``
installs both).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core import ids

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_graphs" / "tiny_gpt-b2-t32-steady.json.gz"  # 470 ops
TIMEOUT_S = 120.0  # a shared 2-core machine: generous, never reached when things work


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server on 127.0.0.1 (no persistence), stopped afterwards."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is missing: apt-get install redis-server (./dev.sh test "
                    "installs it)")
    pytest.importorskip("celery", reason="celery is not installed: pip install -e '.[celery]'")
    pytest.importorskip("redis", reason="redis-py is not installed: pip install -e '.[celery]'")
    import redis

    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        t0 = time.monotonic()
        while True:
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() - t0 > 20:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        _stop(proc)


@pytest.fixture
def celery_app_server(redis_url: str, tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    """A Celery worker and the app served with ``REDIS_URL``: ``(url, dash app)``."""
    from werkzeug.serving import WSGIRequestHandler, make_server

    from app.core import state
    from app.services import plan_data

    cache = tmp_path / "cache"
    monkeypatch.setenv("REDIS_URL", redis_url)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "REDIS_URL": redis_url,
           "ROAM_CACHE_DIR": str(cache),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "app.worker", "worker", "--concurrency", "1",
         "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
         "-n", f"roam-test-{os.getpid()}@127.0.0.1"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    class Quiet(WSGIRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    old = os.environ.get("ROAM_CACHE_DIR")
    srv = None
    try:
        from app import create_app

        dash_app = create_app(cache_dir=str(cache), plan_on_start=False)
        dash_app.roam_test_worker_log = str(tmp_path / "worker.log")
        srv = make_server("127.0.0.1", 0, dash_app.server, threaded=True, request_handler=Quiet)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{srv.server_port}", dash_app
    finally:
        if srv is not None:
            srv.shutdown()
        _stop(worker)
        log.close()
        state._get_graph.cache_clear()
        plan_data.before_data.cache_clear()
        plan_data.after_data.cache_clear()
        if old is not None:
            state.configure(old)


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None)


def _plan_callback_body(dash_app: Any, graph_key: str) -> dict[str, Any]:
    """The renderer's request for a click on Plan (see dash-renderer's fillVals)."""
    out_id = next(k for k in dash_app.callback_map
                  if f"{ids.PLAN_RESULT}.data" in k and f"{ids.PLAN_STATUS}.children" in k)
    cb = dash_app.callback_map[out_id]
    values = {f"{ids.PLAN_BTN}.n_clicks": 1, f"{ids.GRAPH_KEY}.data": {"key": graph_key},
              f"{ids.METHOD}.value": "roam", f"{ids.TIME_LIMIT}.value": 1.0,
              f"{ids.NODE_LIMIT}.value": 30, f"{ids.WORKERS}.value": 2,
              f"{ids.ALIGNMENT}.value": 512, f"{ids.SESSION}.data": "celery-test"}

    def dep(d: dict[str, Any]) -> dict[str, Any]:
        return {**d, "value": values[f"{d['id']}.{d['property']}"]}

    return {"output": out_id,
            "outputs": [{"id": o.split(".")[0], "property": o.split(".")[1]}
                        for o in (f"{ids.PLAN_RESULT}.data", f"{ids.PLAN_STATUS}.children")],
            "inputs": [dep(d) for d in cb["inputs"]],
            "state": [dep(d) for d in cb["state"]],
            "changedPropIds": [f"{ids.PLAN_BTN}.n_clicks"]}


def test_plan_job_runs_in_the_celery_worker(celery_app_server: tuple[str, Any]) -> None:
    from dash import CeleryManager

    from app.core import state
    from roam_core.formats.graph_io import load_graph
    from roam_core.oracle.validate import check_plan

    url, dash_app = celery_app_server
    assert isinstance(dash_app._background_manager, CeleryManager)
    graph = load_graph(SAMPLE)
    graph_key = state.put_graph(graph)
    page = urllib.request.urlopen(url + "/", timeout=60).read().decode()
    config = json.loads(re.search(r'<script id="_dash-config" type="application/json">'
                                  r"(.*?)</script>", page, re.S).group(1))  # type: ignore[union-attr]
    end_id = config["end_id"]
    body = _plan_callback_body(dash_app, graph_key)
    endpoint = url + "/_dash-update-component"
    q = urllib.parse.urlencode
    status, handles = _post(f"{endpoint}?{q({'endId': end_id})}", body)
    assert status == 200
    assert "job" in handles, handles
    assert "cacheKey" in handles, handles
    t0 = time.monotonic()
    while True:
        status, resp = _post(f"{endpoint}?" + q({"endId": end_id, "cacheKey": handles["cacheKey"],
                                                 "job": handles["job"]}), body)
        if resp and "response" in resp:
            break
        assert time.monotonic() - t0 < TIMEOUT_S, "the Celery worker never finished the job"
        time.sleep(0.3)
    result = resp["response"][ids.PLAN_RESULT]["data"]
    status_text = resp["response"][ids.PLAN_STATUS]["children"]
    assert status_text.startswith("planned with roam"), status_text
    assert result["graph"] == graph_key
    plan = state.get_plan(result["key"])  # written to the shared cache by the worker
    assert plan.graph_fingerprint == graph.fingerprint()
    assert not check_plan(graph, plan)
    assert plan.planned_peak_bytes <= plan.baseline_peak_bytes
    # many sub-tasks, solved by a 2-process pool inside the Celery worker's child process
    assert sum(r.stage == "order" for r in plan.provenance) > 5
    # the worker's own log names the task it ran
    log = Path(dash_app.roam_test_worker_log)
    t1 = time.monotonic()
    while "succeeded" not in log.read_text(errors="replace"):
        assert time.monotonic() - t1 < 20, log.read_text(errors="replace")[-2000:]
        time.sleep(0.2)
