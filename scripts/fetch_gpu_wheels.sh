#!/usr/bin/env bash
# Download, here, the wheels scripts/gpu_check.sh installs on the GPU machine, which has no
# package registry: cp312 manylinux x86_64 wheels of what its image lacks.
#
#   scripts/fetch_gpu_wheels.sh [DIR]      default DIR: wheels/gpu (kept out of git)
#
# The GPU image (Python 3.12, torch 2.11) already has numpy, pandas, networkx, absl-py,
# typing-extensions and an older protobuf; roam's planner needs ortools, which needs
# immutabledict and protobuf 6.33.  dash, plotly and kaleido (the app) are not needed there.
# The wheels are installed with `pip install --no-index --no-deps --target` into a folder of
# the checkout, so the image's own packages are never changed.  Total must stay < 64 MiB
# (what one device call may carry).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-wheels/gpu}
PY=${ROAM_PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
mkdir -p "$DIR"
# Pinned to the versions the project is tested with here (see pyproject.toml ranges).
PKGS=("ortools==9.15.6755" "immutabledict==4.3.1" "protobuf==6.33.6")
"$PY" -m pip download --only-binary=:all: --no-deps --python-version 3.12 \
  --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 --platform any \
  -d "$DIR" "${PKGS[@]}"
total=$(du -cb "$DIR"/*.whl | tail -1 | cut -f1)
limit=$((64 * 1024 * 1024))
ls -l "$DIR"/*.whl >&2
echo "fetch_gpu_wheels.sh: $(ls "$DIR"/*.whl | wc -l) wheels, $((total / 1024 / 1024)) MiB in $DIR" >&2
if [ "$total" -ge "$limit" ]; then
  echo "fetch_gpu_wheels.sh: the wheels exceed 64 MiB ($total bytes)" >&2
  exit 1
fi
