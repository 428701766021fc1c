#!/usr/bin/env bash
# Trace, plan and train resnet50 b32, gpt2 b8 t1024 and GPT2-XL b1 on one NVIDIA GPU, eagerly
# and with roam_core.PlannedStep, each loop in a fresh process, then clipping + accumulation +
# two batch shapes (loops.json); every report goes to one folder (default
# benchmarks/results/gpu/).  One call, at most 9 minutes in all: 300 s for this part
# (ROAM_GPU_TIMEOUT_S), 160 s for the export and 80 s for the FSDP2 peaks below, under the
# device's 10-minute call.
#
#   scripts/gpu_check.sh                 GPU run (needs nvidia-smi and a CUDA torch >= 2.11)
#   scripts/gpu_check.sh --dry-run       the same code path on CPU with tiny models
#   scripts/gpu_check.sh --out DIR [-- extra arguments for scripts/gpu_check.py]
#   scripts/gpu_check.sh --export-only   only the exported checkpointing policy (below)
#   scripts/gpu_check.sh --no-export     skip it
#   scripts/gpu_check.sh --fsdp-only     only the FSDP2 per-rank peaks (below)
#   scripts/gpu_check.sh --no-fsdp       skip them
#
# First the cost model's device profile, measured on the device (roam calibrate --device
# cuda -> DIR/device_profile.json, at most 60 s, inside this part's time; the dry run
# measures the CPU): the published GPU profiles are datasheet figures until this runs.
#
# Then the exported checkpointing policy (roam_core.apply_checkpoint_plan): peaks held
# against the budget plan, max_memory_allocated and step times beside torch's checkpoint of
# every block and the unwrapped model, eager and torch.compile (benchmarks/export_bench.py
# -> DIR/export/, at most ROAM_GPU_EXPORT_TIMEOUT_S = 160 s; the dry run: tiny_gpt, eager).
#
# Then FSDP2's per-rank peaks (scripts/gpu_fsdp_check.py -> DIR/fsdp/, at most
# ROAM_GPU_FSDP_TIMEOUT_S = 80 s): eager FSDP2 on the GPU over a fake process group of world
# size 8 (fully_shard per block and the root, real weights, two AdamW steps),
# max_memory_allocated beside FSDPMemTracker, roam's simulated eager peak (with and without
# FSDP2's holds of gathered parameters) and its planned peak, for gpt2 and llama-125m b2 t512
# (llama also bf16-mixed).  The dry run: tiny_gpt and tiny_llama on CPU (no measured peak).
#
# Installs nothing from a package registry (the GPU machine has none).  What its image lacks
# (ortools, immutabledict, protobuf 6.33) comes as wheels in wheels/gpu/ (ROAM_GPU_WHEELS),
# fetched beforehand on a machine with a registry by scripts/fetch_gpu_wheels.sh and carried
# along (kept out of git, < 64 MiB); they are unpacked into .gpu-site/ of this checkout with
# `pip install --no-index --no-deps --target` (or plain unzip), and nothing else changes.
# roam itself runs from this checkout (PYTHONPATH), not installed.
#
# Python: $ROAM_PYTHON, else /opt/torch/.venv/bin/python3, else python3 (GPU run: the first
# whose torch sees CUDA; dry run: .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

MODE=gpu
OUT=""
TIMEOUT_S=${ROAM_GPU_TIMEOUT_S:-300}
EXPORT_TIMEOUT_S=${ROAM_GPU_EXPORT_TIMEOUT_S:-160}
FSDP_TIMEOUT_S=${ROAM_GPU_FSDP_TIMEOUT_S:-80}
EXPORT=yes
MAIN=yes
FSDP=yes
WHEELS=${ROAM_GPU_WHEELS:-wheels/gpu}
SITE=$ROOT/.gpu-site
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run|--cpu) MODE=cpu; shift ;;
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    --export-only) MAIN=no; FSDP=no; shift ;;
    --no-export) EXPORT=no; shift ;;
    --fsdp-only) MAIN=no; EXPORT=no; shift ;;
    --no-fsdp) FSDP=no; shift ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "gpu_check.sh: $*" >&2; }
die() { say "$*"; exit 2; }

has_cuda_torch() {  # $1 = python
  "$1" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
}

ensure_planner_deps() {  # $1 = python: numpy, networkx and ortools importable (offline)
  local py=$1
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  if [ -d "$SITE" ]; then export PYTHONPATH="$SITE:$PYTHONPATH"; fi
  if "$py" -c "import numpy, networkx, ortools.sat.python.cp_model" 2>/dev/null; then
    return 0
  fi
  "$py" -c "import numpy, networkx" 2>/dev/null \
    || die "$py lacks numpy or networkx (expected on the GPU image)"
  ls "$WHEELS"/ortools-*.whl >/dev/null 2>&1 \
    || die "ortools is missing and no wheels are in $WHEELS: run scripts/fetch_gpu_wheels.sh where a registry is reachable, and carry $WHEELS along"
  say "unpacking $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE (no registry)"
  mkdir -p "$SITE"
  if ! "$py" -m pip install -q --no-index --no-deps --disable-pip-version-check \
        --target "$SITE" "$WHEELS"/*.whl 2>/dev/null; then
    say "pip unavailable or failed: unzipping the wheels instead"
    "$py" - "$SITE" "$WHEELS"/*.whl <<'PY'
import sys, zipfile
site, wheels = sys.argv[1], sys.argv[2:]
for w in wheels:
    with zipfile.ZipFile(w) as z:
        z.extractall(site)
PY
  fi
  export PYTHONPATH="$SITE:$PYTHONPATH"
  "$py" -c "import ortools.sat.python.cp_model" \
    || die "ortools from $WHEELS does not import with $py (wrong Python version or platform?)"
}

if [ "$MODE" = cpu ]; then
  OUT=${OUT:-${TMPDIR:-/tmp}/roam-gpu-check-dry-run}
  PY=${ROAM_PYTHON:-}
  if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
  fi
  "$PY" -c "import torch" 2>/dev/null || die "$PY has no torch: run ./dev.sh test once, or set ROAM_PYTHON"
  ensure_planner_deps "$PY"
  say "CPU dry run with tiny models -> $OUT"
  # the limits are sized for the GPU machine; a shared CPU (CI) gets three times as long
  if [ "$MAIN" = yes ]; then
    mkdir -p "$OUT"
    timeout 180 "$PY" -m roam_core calibrate --device cpu -o "$OUT/device_profile.json" >&2
    timeout $((3 * TIMEOUT_S)) "$PY" scripts/gpu_check.py --dry-run --out "$OUT" "${EXTRA[@]}"
  fi
  if [ "$EXPORT" = yes ]; then
    say "exported checkpointing policy (tiny_gpt, eager) -> $OUT/export"
    timeout $((3 * EXPORT_TIMEOUT_S)) "$PY" benchmarks/export_bench.py --device cpu --only tiny_gpt \
      --steps 2 --time-limit 2 --out "$OUT/export"
  fi
  if [ "$FSDP" = yes ]; then
    say "FSDP2 per-rank peaks (tiny_gpt, tiny_llama, CPU) -> $OUT/fsdp"
    timeout $((3 * FSDP_TIMEOUT_S)) "$PY" scripts/gpu_fsdp_check.py --dry-run --time-limit 2 \
      --out "$OUT/fsdp"
  fi
  exit 0
fi

OUT=${OUT:-benchmarks/results/gpu}
command -v nvidia-smi >/dev/null 2>&1 \
  || die "nvidia-smi not found: this needs a machine with an NVIDIA GPU (try --dry-run on CPU)"
nvidia-smi -L >&2 || die "nvidia-smi cannot talk to the driver"

PY=""
for cand in "${ROAM_PYTHON:-}" /opt/torch/.venv/bin/python3 python3; do
  [ -n "$cand" ] || continue
  command -v "$cand" >/dev/null 2>&1 || [ -x "$cand" ] || continue
  if has_cuda_torch "$cand"; then PY=$cand; break; fi
done
[ -n "$PY" ] || die "no python whose torch sees a CUDA device (set ROAM_PYTHON)"
"$PY" -c "import torch, sys; v = tuple(int(x) for x in torch.__version__.split('+')[0].split('.')[:2]); sys.exit(0 if v >= (2, 11) else 1)" \
  || die "$PY has torch $("$PY" -c 'import torch; print(torch.__version__)'): roam needs >= 2.11"
ensure_planner_deps "$PY"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" >&2
mkdir -p "$OUT"
rc=0
if [ "$MAIN" = yes ]; then
  say "device profile (roam calibrate --device cuda) -> $OUT/device_profile.json"
  set +e
  cal_t0=$SECONDS
  timeout 60 "$PY" -m roam_core calibrate --device cuda -o "$OUT/device_profile.json" >&2 \
    || say "calibrate failed or timed out; the run goes on without a measured profile"
  left=$((TIMEOUT_S - (SECONDS - cal_t0)))
  say "GPU run -> $OUT (time limit ${left}s)"
  timeout "$left" "$PY" scripts/gpu_check.py --device cuda --out "$OUT" \
    --budget-s $((left - 30)) "${EXTRA[@]}"
  rc=$?
  set -e
  if [ "$rc" = 124 ]; then say "timed out after ${TIMEOUT_S}s; partial reports are in $OUT"; fi
fi
if [ "$EXPORT" = yes ]; then
  say "exported checkpointing policy, eager and compiled -> $OUT/export (time limit ${EXPORT_TIMEOUT_S}s)"
  set +e
  timeout "$EXPORT_TIMEOUT_S" "$PY" benchmarks/export_bench.py --device cuda --compile \
    --steps 5 --out "$OUT/export"
  erc=$?
  set -e
  if [ "$erc" = 124 ]; then say "export check timed out; partial rows are in $OUT/export"; fi
  if [ "$rc" = 0 ]; then rc=$erc; fi
fi
if [ "$FSDP" = yes ]; then
  say "FSDP2 per-rank peaks, W=8 on a fake process group -> $OUT/fsdp (time limit ${FSDP_TIMEOUT_S}s)"
  set +e
  timeout "$FSDP_TIMEOUT_S" "$PY" scripts/gpu_fsdp_check.py --device cuda --world-sizes 8 \
    --time-limit 5 --out "$OUT/fsdp"
  frc=$?
  set -e
  if [ "$frc" = 124 ]; then say "FSDP2 peaks timed out; partial rows are in $OUT/fsdp"; fi
  if [ "$rc" = 0 ]; then rc=$frc; fi
fi
exit "$rc"
