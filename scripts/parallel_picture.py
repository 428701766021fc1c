"""The per-rank picture of docs/parallel.md, from benchmarks/results/fsdp_rank.json.

Usage: ``python scripts/parallel_picture.py`` (writes ``docs/images/parallel_rank.png``;
plotly's PNG export drives chromium through kaleido).
"""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
SERIES = (("FSDPMemTracker (peer)", "peer_peak_bytes", "#8c8c8c"),
          ("roam eager (simulated)", "eager_sim_peak_bytes", "#4c72b0"),
          ("roam eager + FSDP2's holds", "fsdp2_eager_peak_bytes", "#8172b2"),
          ("roam planned", "planned_peak_bytes", "#55a868"),
          ("roam + recompute <= 5 % FLOPs", "recompute_5pct_arena_bytes", "#c44e52"))


def main() -> None:
    rows = json.loads((ROOT / "benchmarks/results/fsdp_rank.json").read_text())["rows"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig = make_subplots(rows=1, cols=len(models), subplot_titles=models)
    for c, m in enumerate(models, start=1):
        mine = [r for r in rows if r["model"] == m]
        xs = [f"W={r['world_size']}" for r in mine]
        for label, key, colour in SERIES:
            fig.add_trace(go.Bar(name=label, x=xs, y=[r[key] / MIB for r in mine],
                                 marker_color=colour, showlegend=c == 1), row=1, col=c)
    fig.update_layout(barmode="group", template="plotly_white",
                      title="Per-rank peak, FSDP2 (batch 2 x 512 per rank, fp32, AdamW)",
                      yaxis_title="MiB per rank", legend={"orientation": "h", "y": -0.15})
    out = ROOT / "docs/images/parallel_rank.png"
    out.write_bytes(fig.to_image(format="png", width=1200, height=520))


if __name__ == "__main__":
    main()
