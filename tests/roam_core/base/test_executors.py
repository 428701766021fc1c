"""The ``--executor`` seam: Dask distributed gives the same plans as the local pool.

A real ``LocalCluster`` of worker processes on 127.0.0.1 is started and stopped by these tests
(module-scoped; those tests are marked slow: about 15 s on a busy 2-core machine).  Both the
``dask-local`` spec (roam starts the cluster) and the ``dask://HOST:PORT`` spec (roam connects
to a running scheduler) are exercised.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import time

import pytest

from roam_core.base.errors import ConfigError
from roam_core.base.executors import (
    ExecutorSpec,
    _BoundedExecutor,
    open_executor,
    parse_executor,
)
from roam_core.formats.graph_io import load_graph
from roam_core.oracle.validate import check_plan
from roam_core.ordering.config import OrderSolverConfig
from roam_core.planner import make_plan
from roam_core.planner.config import PlannerConfig

distributed = pytest.importorskip("distributed")

SAMPLE = "sample_graphs/tiny_gpt-b2-t32-steady.json.gz"
# many small sub-tasks, each a real CP-SAT solve with a deterministic time limit
CFG = PlannerConfig(node_limit=24, workers=1, solve_layout=False, polish_rounds=0,
                    order=OrderSolverConfig(time_limit_s=0.5, stop_at_lower_bound=False,
                                            random_seed=3))


@pytest.fixture(scope="module")
def graph():  # type: ignore[no-untyped-def]
    return load_graph(SAMPLE)


@pytest.fixture(scope="module")
def reference(graph):  # type: ignore[no-untyped-def]
    return make_plan(graph, CFG)  # in-process


@pytest.fixture(scope="module")
def cluster():  # type: ignore[no-untyped-def]
    c = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                 host="127.0.0.1", dashboard_address="127.0.0.1:0")
    try:
        yield c
    finally:
        c.close()


def _solved(plan) -> int:  # type: ignore[no-untyped-def]
    return sum(r.stage == "order" and r.status in ("optimal", "feasible", "hint")
               for r in plan.provenance)


def test_reference_solves_real_models(reference) -> None:  # type: ignore[no-untyped-def]
    assert _solved(reference) >= 5  # the comparison below is not between trivial plans


@pytest.mark.slow
def test_local_process_pool_matches_in_process(graph, reference) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    pooled = make_plan(graph, replace(CFG, workers=2))
    assert pooled.order == reference.order


@pytest.mark.slow
def test_dask_scheduler_matches_local(graph, reference, cluster) -> None:  # type: ignore[no-untyped-def]
    host_port = cluster.scheduler_address.removeprefix("tcp://")

    def executed() -> int:
        with distributed.Client(cluster) as c:
            return sum(c.run(lambda dask_worker: dask_worker.state.executed_count).values())

    before = executed()
    with open_executor(f"dask://{host_port}") as ex:
        assert ex is not None
        plan = make_plan(graph, CFG, executor=ex)
    assert executed() - before >= _solved(reference)  # the solves ran on the workers
    assert plan.order == reference.order
    assert plan.planned_peak_bytes == reference.planned_peak_bytes
    assert [(r.task_id, r.status, r.objective, r.best_bound) for r in plan.provenance] == \
        [(r.task_id, r.status, r.objective, r.best_bound) for r in reference.provenance]
    assert not check_plan(graph, plan)


@pytest.mark.slow
def test_dask_local_spec_matches_local(graph, reference) -> None:  # type: ignore[no-untyped-def]
    with open_executor("dask-local:1") as ex:
        plan = make_plan(graph, CFG, executor=ex)
    assert plan.order == reference.order


@pytest.mark.slow
def test_cli_plan_on_a_dask_scheduler(tmp_path, capsys, cluster, reference) -> None:  # type: ignore[no-untyped-def]
    from roam_core.cli import main

    out = tmp_path / "plan.json"
    host_port = cluster.scheduler_address.removeprefix("tcp://")
    rc = main(["plan", SAMPLE, "-o", str(out), "--executor", f"dask://{host_port}",
               "--node-limit", "24", "--time-limit", "0.5", "--seed", "3", "--json",
               "--no-progress"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_subtasks"] > 5
    from roam_core.formats.plan_io import load_plan

    assert len(load_plan(str(out)).order) == len(reference.order)


@pytest.mark.slow
def test_cli_bench_roam_rows_on_a_dask_scheduler(tmp_path, cluster) -> None:  # type: ignore[no-untyped-def]
    from roam_core.bench import read_csv
    from roam_core.cli import main

    host_port = cluster.scheduler_address.removeprefix("tcp://")
    rc = main(["bench", "--graphs", "sample_graphs/mlp-b8-steady.json.gz", "--methods",
               "lpmf,roam", "--layout", "none", "--executor", f"dask://{host_port}",
               "--out", str(tmp_path), "--name", "b"])
    assert rc == 0
    rows = {r["method"]: r for r in read_csv(str(tmp_path / "b.csv"))}
    assert rows["roam"]["status"] in ("ok", "partial")
    assert int(rows["roam"]["peak_bytes"]) <= int(rows["lpmf"]["peak_bytes"])


@pytest.mark.slow
def test_unreachable_scheduler_is_a_config_error() -> None:
    import socket

    with socket.socket() as s:  # a free port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConfigError, match="cannot reach the Dask scheduler"), \
            open_executor(f"dask://127.0.0.1:{port}"):
        pass


@pytest.mark.parametrize(("text", "spec"), [
    ("local", ExecutorSpec("local")),
    ("dask-local", ExecutorSpec("dask-local")),
    ("dask-local:3", ExecutorSpec("dask-local", num_workers=3)),
    ("dask://h.example:8786", ExecutorSpec("dask", address="tcp://h.example:8786")),
    ("tcp://10.1.2.3:1", ExecutorSpec("dask", address="tcp://10.1.2.3:1")),
])
def test_parse(text: str, spec: ExecutorSpec) -> None:
    assert parse_executor(text) == spec


@pytest.mark.parametrize("text", ["", "dask", "dask-local:0", "dask-local:x", "dask://host",
                                  "dask://:99", "ray://h:1", "threads"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="--executor"):
        parse_executor(text)


def test_cli_rejects_a_bad_spec(capsys) -> None:  # type: ignore[no-untyped-def]
    from roam_core.cli import main

    rc = main(["plan", SAMPLE, "-o", "/nonexistent/x.json", "--executor", "dask-local:0"])
    assert rc != 0
    assert "dask-local" in capsys.readouterr().err


def test_local_spec_is_the_planners_own_pool() -> None:
    with open_executor("local") as ex:
        assert ex is None


def test_bounded_executor_caps_tasks_in_flight() -> None:
    running = [0]
    most = [0]
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return i * i

    with cf.ThreadPoolExecutor(8) as inner:
        ex = _BoundedExecutor(inner, 3)
        futs = [ex.submit(work, i) for i in range(20)]
        assert [f.result(timeout=10) for f in futs] == [i * i for i in range(20)]
    assert most[0] == 3


def test_bounded_executor_cancels_queued_work() -> None:
    gate = threading.Event()
    with cf.ThreadPoolExecutor(2) as inner:
        ex = _BoundedExecutor(inner, 1)
        first = ex.submit(gate.wait, 10)
        queued = [ex.submit(lambda: 1) for _ in range(3)]
        assert all(f.cancel() for f in queued)
        gate.set()
        assert first.result(timeout=10) is True
        assert all(f.cancelled() for f in queued)


def test_bounded_executor_passes_errors() -> None:
    with cf.ThreadPoolExecutor(2) as inner:
        ex = _BoundedExecutor(inner, 1)
        f = ex.submit(int, "x")
        with pytest.raises(ValueError, match="invalid literal"):
            f.result(timeout=10)


@pytest.mark.slow
def test_cli_frontier_and_fit_on_a_dask_scheduler(capsys, cluster) -> None:  # type: ignore[no-untyped-def]
    """The sweep commands take ``--executor`` too, and answer as the local pool does."""
    from roam_core.cli import main

    host_port = cluster.scheduler_address.removeprefix("tcp://")
    frontier = ["frontier", "sample_graphs/mlp-b8-steady.json.gz", "--budgets", "3",
                "--time-limit", "0.5", "--json"]
    fit = ["fit", "mlp", "--memory", "64MiB", "--batch-sizes", "1", "2", "--json"]
    answers = []
    for args in (frontier, fit):
        for executor in ("local", f"dask://{host_port}"):
            assert main([*args, "--executor", executor]) == 0
            answers.append(json.loads(capsys.readouterr().out))
    assert answers[0] == answers[1]
    assert [p["method"] for p in answers[0]["points"]].count("roam") >= 1
    assert answers[2] == answers[3]
    assert answers[2]["configs"]


def test_sweep_commands_refuse_a_bad_executor(capsys) -> None:  # type: ignore[no-untyped-def]
    from roam_core.cli import main

    assert main(["frontier", "/nonexistent.json", "--executor", "dask-local:0"]) != 0
    assert main(["fit", "mlp", "--memory", "1GiB", "--executor", "nope"]) != 0
    err = capsys.readouterr().err
    assert err.count("--executor") >= 2
