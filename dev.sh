#!/usr/bin/env bash
# Set-up and entry points for roam on a fresh machine (Python 3.11 is all it needs).
#   ./dev.sh app    install everything, then start the app on a planned sample graph
#   ./dev.sh test   install everything (+ Debian chromium for browser tests, redis-server for the
#                   Celery test), run the test suite
#   ./dev.sh fast   the fast tier: ruff and every test not marked slow, browser or gpu (under
#                   90 s on 2 cores), for the edit-test loop
#   ./dev.sh matrix the rest of the matrices the suite samples (marker full_matrix): every
#                   fuzz case through every command (in-process; benchmarks/fuzz_bench.py runs
#                   it with a child per run and its peak memory), the plan-identity guard on
#                   GPT2-XL, every Hugging Face family at both batch sizes, the training-loop
#                   property at 200 sequences
# The install is skipped when the venv is up to date: after a successful install the hash of
# pyproject.toml (and this checkout's path) is stored in $VENV/.roam-installed; ROAM_REINSTALL=1
# forces a fresh install.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${ROAM_VENV:-.venv}
PY="$VENV/bin/python"

STAMP="$VENV/.roam-installed"

stamp() {  # what the venv was installed from: pyproject.toml's hash and this checkout
  { sha256sum pyproject.toml | cut -d' ' -f1; pwd -P; } | sha256sum | cut -d' ' -f1
}

up_to_date() {
  [ "${ROAM_REINSTALL:-0}" != 1 ] && [ -x "$VENV/bin/roam" ] && [ -f "$STAMP" ] \
    && [ "$(cat "$STAMP")" = "$(stamp)" ]
}

install() {
  if up_to_date; then return; fi
  if [ ! -x "$PY" ]; then python3 -m venv "$VENV"; fi
  rm -f "$STAMP"
  "$PY" -m pip install -q --upgrade pip
  # The CPU wheel of torch 2.13.0 lies on this machine's disk; install it first so that the
  # project's torch range is already satisfied and pip never pulls a CUDA build.
  "$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install -q "torch==2.13.0"
  "$PY" -m pip install -q -e ".[test]"
  stamp > "$STAMP"
}

apt_install() {
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
  fi
}

install_chromium() {
  if command -v chromium >/dev/null 2>&1; then return; fi
  apt_install chromium chromium-driver
}

# the Celery + Redis test (tests/app/test_celery.py) starts its own redis-server
install_redis() {
  if command -v redis-server >/dev/null 2>&1; then return; fi
  apt_install redis-server
}

case "${1:-}" in
  app)
    install
    shift
    exec "$VENV/bin/roam" serve "$@"
    ;;
  test)
    install
    install_chromium
    install_redis
    shift
    "$VENV/bin/ruff" check roam_core app tests scripts benchmarks
    "$VENV/bin/mypy"  # files and strictness: [tool.mypy] in pyproject.toml
    set +e
    # unbuffered, so a killed run still shows how far it got; the outer limit (default 75 min)
    # turns a hang that pytest-timeout cannot see (interpreter exit) into a failure; the 25
    # slowest tests are listed at the end, to keep the suite's time in view. One worker per
    # core, at most 4 (each holds torch and a browser), whole files per worker so that a
    # module's traced graphs are made once, the longest files first (tests/schedule.py: kept in
    # that order, not xdist's most-tests-first); ROAM_TEST_WORKERS=0 runs in this process.
    PYTHONUNBUFFERED=1 timeout -k 30 "${ROAM_TEST_TIMEOUT_S:-4500}" "$PY" -m pytest \
      -n "${ROAM_TEST_WORKERS:-auto}" --maxprocesses=4 --dist loadfile --no-loadscope-reorder \
      --durations=25 "$@"
    rc=$?
    set -e
    if [ "$rc" = 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      echo "pytest did not finish within ${ROAM_TEST_TIMEOUT_S:-4500} s: failing" >&2
    fi
    exit "$rc"
    ;;
  fast)
    install
    shift
    "$VENV/bin/ruff" check roam_core app tests scripts benchmarks
    exec "$PY" -m pytest -q -m "not slow and not browser and not gpu" "$@"
    ;;
  matrix)
    install
    shift
    exec "$PY" -m pytest -q --full-matrix -m full_matrix "$@"
    ;;
  *)
    echo "usage: ./dev.sh app [roam serve options] | ./dev.sh test [pytest options]" \
         "| ./dev.sh fast [pytest options] | ./dev.sh matrix [pytest options]" >&2
    exit 2
    ;;
esac
