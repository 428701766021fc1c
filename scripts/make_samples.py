"""Regenerate ``sample_graphs/``: pre-traced training-step graphs (gzip JSON) plus a README.

Usage::

    python scripts/make_samples.py [--out sample_graphs] [--only NAME_SUBSTRING]

Every graph is traced with :func:`roam_core.zoo.trace_zoo` (fake tensors, CPU, torch's
single-tensor optimizers, default attention of the setting), exactly as ``roam trace``
does, and written as
``<graph name>.json.gz``.  GPT2-XL graphs are large and made on demand with ``roam trace``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from roam_core.formats.graph_io import save_graph
from roam_core.oracle.simulate import simulate
from roam_core.zoo import ROAM_CONFIGS, trace_zoo

_logger = logging.getLogger(__name__)

#: (model, batch size, seq len, setting) of every sample.
SAMPLES: tuple[tuple[str, int, int | None, str], ...] = (
    *((m, b, None, "roam") for m, b in ROAM_CONFIGS),
    ("gpt2", 1, 128, "steady"),
    ("resnet50", 8, None, "steady"),
    ("mobilenet_v2", 8, None, "steady"),
    ("mlp", 8, None, "steady"),
    ("tiny_gpt", 2, 32, "steady"),
    ("residual_block", 4, None, "steady"),
    ("teach_order", 256, None, "steady"),
    ("teach_updates", 8, None, "steady"),
    ("teach_layout", 512, None, "steady"),
    ("teach_recompute", 256, None, "steady"),
)

_HEADER = """# Sample graphs

Pre-traced training-step graphs (gzip JSON, `roam_core.formats.graph_io` format), made by
`python scripts/make_samples.py` with torch {torch} on CPU: each model is built on the meta
device from `roam_core.zoo`, traced with fake tensors (no real memory) by
`roam_core.trace.trace_fx`, with torch's single-tensor optimizer implementations
(per-parameter update ops).  Attention is explicit matmul/softmax ("math") in the roam
setting, as in the paper's traces, and `F.scaled_dot_product_attention` in steady.  Each
file's `origin` records the model, batch size, sequence length, setting, optimizer and
attention, so it can be rebuilt.

Settings: **roam** is the ROAM paper's evaluation (the optimizer's first step, Adam lr 0.1,
weight decay 1e-4, state created inside the step; loss = cross-entropy of the model output
against zeros; RoBERTa fed `<s> Hello world </s>`), **steady** is a regular step (AdamW state
resident, cross-entropy on random labels or the LM loss).  The eager peak is
`roam_core.oracle.simulate.simulate` in program order (512 B rounding, resident bytes included).
One file can be re-made with the command in the last column.  GPT2-XL graphs are not
committed (make them with `roam trace gpt2-xl --batch-size 1 --setting roam -o gpt2xl.json.gz`).

| file | model | batch | seq | setting | optimizer | ops | storages | KiB | eager MiB | command |
|---|---|---|---|---|---|---|---|---|---|---|
"""


def main(argv: list[str] | None = None) -> int:
    """Trace every sample and write the files and README."""
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "sample_graphs"))
    ap.add_argument("--only", default=None, help="only samples whose file name contains this")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model, batch, seq, setting in SAMPLES:
        if args.only and not any(args.only in n for n in (model, f"{model}-b{batch}")):
            continue  # tracing is the slow part: skip before it
        t0 = time.perf_counter()
        ts = trace_zoo(model, batch, seq, setting)
        g = ts.graph
        path = out / f"{g.name}.json.gz"
        if args.only and args.only not in path.name:
            continue
        save_graph(g, path)
        peak = simulate(g, g.op_ids).peak_bytes
        o = g.origin
        cmd = (f"`roam trace {model} -b {batch}" + (f" -t {seq}" if seq else "")
               + f" --setting {setting} -o {path.name}`")
        rows.append(f"| {path.name} | {model} | {batch} | {o['seq_len'] or ''} | {setting} | "
                    f"{o['optimizer']} | {len(g)} | {len(g.tensors)} | "
                    f"{path.stat().st_size / 1024:.0f} | {peak / 2**20:.1f} | {cmd} |")
        print(f"{path.name}: {len(g)} ops, {path.stat().st_size / 1024:.0f} KiB, "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    if args.only:
        print("\n".join(rows))  # README rows of the samples made
    else:
        total = sum(p.stat().st_size for p in out.glob("*.json.gz"))
        text = _HEADER.format(torch=torch.__version__) + "\n".join(rows)
        text += f"\n\nTotal size: {total / 2**20:.1f} MiB in {len(rows)} files.\n"
        (out / "README.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
