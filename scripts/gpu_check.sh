#!/usr/bin/env bash
# Trace, plan and execute gpt2, GPT2-XL (batch 1), resnet50 and mobilenet_v2 on one NVIDIA
# GPU; every report goes to one folder (default benchmarks/results/gpu/).  Budget: < 8 min
# on an H200 (short planner time limits).
#
#   scripts/gpu_check.sh                 GPU run (needs nvidia-smi and a CUDA torch)
#   scripts/gpu_check.sh --dry-run       the same pipeline on CPU with tiny models
#   scripts/gpu_check.sh --out DIR [-- extra arguments for scripts/gpu_check.py]
#
# Python environment (GPU run), first that works:
#   1. $ROAM_PYTHON, if set;
#   2. the venv $ROAM_GPU_VENV (default ~/.cache/roam/venv-gpu) if its torch sees CUDA;
#   3. a new venv on top of the system python3 (--system-site-packages) if that torch sees CUDA;
#   4. a new venv with torch==2.13.0 from PyPI (a CUDA build; only ever on the GPU machine).
# The project's own .venv (CPU torch) is never modified.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=gpu
OUT=""
TIMEOUT_S=${ROAM_GPU_TIMEOUT_S:-480}
VENV=${ROAM_GPU_VENV:-$HOME/.cache/roam/venv-gpu}
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run|--cpu) MODE=cpu; shift ;;
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "gpu_check.sh: $*" >&2; }
die() { say "$*"; exit 2; }

has_cuda_torch() {  # $1 = python
  "$1" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
}

ensure_project() {  # $1 = python: roam importable with its planner dependencies
  local py=$1
  if ! "$py" -c "import roam_core.planner, roam_core.zoo" 2>/dev/null; then
    say "installing roam (editable, no dependency resolution) into $($py -c 'import sys; print(sys.prefix)')"
    "$py" -m pip install -q --no-deps -e . || die "pip install -e . failed"
  fi
  if ! "$py" -c "import numpy, networkx, ortools" 2>/dev/null; then
    say "installing numpy, networkx, ortools"
    "$py" -m pip install -q "numpy>=1.26,<3" "networkx>=3.2,<4" "ortools>=9.12,<10" \
      || die "cannot install numpy/networkx/ortools (offline?); set ROAM_PYTHON to a python that has them"
  fi
}

if [ "$MODE" = cpu ]; then
  OUT=${OUT:-${TMPDIR:-/tmp}/roam-gpu-check-smoke}
  PY=${ROAM_PYTHON:-}
  if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
  fi
  "$PY" -c "import torch" 2>/dev/null || die "$PY has no torch: run ./dev.sh test once, or set ROAM_PYTHON"
  ensure_project "$PY"
  say "CPU smoke run with tiny models -> $OUT"
  exec timeout "$TIMEOUT_S" "$PY" scripts/gpu_check.py --smoke --out "$OUT" "${EXTRA[@]}"
fi

OUT=${OUT:-benchmarks/results/gpu}
command -v nvidia-smi >/dev/null 2>&1 \
  || die "nvidia-smi not found: this needs a machine with an NVIDIA GPU (try --dry-run on CPU)"
nvidia-smi -L >&2 || die "nvidia-smi cannot talk to the driver"
[ "$(nvidia-smi -L | wc -l)" -ge 1 ] || die "no GPU listed by nvidia-smi"

if [ -n "${ROAM_PYTHON:-}" ]; then
  PY=$ROAM_PYTHON
  has_cuda_torch "$PY" || die "ROAM_PYTHON=$PY: its torch does not see a CUDA device"
elif [ -x "$VENV/bin/python" ] && has_cuda_torch "$VENV/bin/python"; then
  PY=$VENV/bin/python
elif command -v python3 >/dev/null 2>&1 && has_cuda_torch python3; then
  say "using the system torch through a venv with system site-packages: $VENV"
  python3 -m venv --system-site-packages "$VENV"
  PY=$VENV/bin/python
else
  say "creating $VENV with torch==2.13.0 from PyPI (CUDA build; GPU machine only)"
  python3 -m venv "$VENV"
  PY=$VENV/bin/python
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q "torch==2.13.0" || die "cannot install torch==2.13.0 (offline?)"
  has_cuda_torch "$PY" || die "the installed torch does not see the GPU (driver too old for its CUDA?)"
fi
ensure_project "$PY"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" >&2
mkdir -p "$OUT"
say "GPU run -> $OUT (time limit ${TIMEOUT_S}s)"
set +e
timeout "$TIMEOUT_S" "$PY" scripts/gpu_check.py --device cuda --out "$OUT" "${EXTRA[@]}"
rc=$?
set -e
if [ "$rc" = 124 ]; then say "timed out after ${TIMEOUT_S}s; partial reports are in $OUT"; fi
exit "$rc"
