"""Nothing lost: a writer killed at any moment leaves the previous file or the complete new
one (never an empty or truncated file), and a full device is a one-line error."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roam_core.base.atomic import atomic_write, atomic_writer, check_output_path
from roam_core.base.errors import OutputError
from tests.paths import REPO

#: A child that rewrites ``target`` with numbered payloads for ever (each ~8 MB, written in
#: pieces, so that a kill often lands mid-write).
_WRITER = """
import sys
from roam_core.base.atomic import atomic_writer
target = sys.argv[1]
print("ready", flush=True)
i = 0
while True:
    i += 1
    body = (f"{i:08d}" * 1_000_000).encode()
    with atomic_writer(target) as f:
        for k in range(0, len(body), 1 << 16):
            f.write(body[k:k + (1 << 16)])
        f.write(b"END")
"""


def _complete(data: bytes) -> bool:
    """The file is the old one or one whole payload."""
    if data == b"old":
        return True
    if not data.endswith(b"END"):
        return False
    body = data[:-3]
    return len(body) == 8_000_000 and body == body[:8] * 1_000_000


@pytest.mark.slow
def test_killing_a_writer_at_random_moments_loses_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    rng = random.Random(0)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    seen_new = 0
    for _ in range(12):
        p = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], env=env,
                             stdout=subprocess.PIPE)
        assert p.stdout is not None
        p.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.6))
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        data = target.read_bytes()
        assert _complete(data), f"{len(data)} bytes: neither the old file nor a whole one"
        seen_new += data != b"old"
    assert seen_new  # some kills came after a complete write


@pytest.mark.slow
def test_killing_roam_plan_mid_write_keeps_a_whole_plan(tmp_path: Path) -> None:
    from roam_core.formats.plan_io import load_plan, save_plan
    from tests.fuzz.corpus import BASE_GRAPH, base_plan

    target = tmp_path / "p.json"
    save_plan(base_plan(), target)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(1)
    for _ in range(6):
        p = subprocess.Popen([sys.executable, "-m", "roam_core", "plan", str(BASE_GRAPH), "-o",
                              str(target), "--no-progress", "--workers", "1"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 4.0))
        p.send_signal(signal.SIGKILL)
        p.wait()
        load_plan(target)  # the old plan or the new one, whole


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")

    def fail_midway() -> None:
        with atomic_writer(target) as f:
            f.write(b"half")
            raise RuntimeError("the writer fails midway")

    with pytest.raises(RuntimeError):
        fail_midway()
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]  # no temporary left
    atomic_write(target, "new")
    assert target.read_text() == "new"


def test_target_mode_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    target.chmod(0o640)
    atomic_write(target, "new")
    assert target.stat().st_mode & 0o777 == 0o640


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_device_is_a_one_line_error() -> None:
    with pytest.raises(OutputError, match="/dev/full"):
        atomic_write("/dev/full", b"x" * 100_000)


def test_bad_output_paths_are_refused_before_work(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    for bad, words in ((tmp_path, "is a directory"), (tmp_path / "no" / "x", "does not exist"),
                       (f / "x", "is not a directory"), ("", "empty path")):
        with pytest.raises(OutputError, match=words):
            check_output_path(bad)
