"""Build the graphs of the gap diagnosis (issue 13) that are not in ``sample_graphs/``.

Writes ``<out>/<name>.json.gz`` for

* ``gpt2-768w-<L>l-b1-t128-steady``: GPT-2 768 wide, ``L`` layers (narrow sequence);
* ``t5-4+4-256w-b1-t128-steady``: Hugging Face T5 from a config, 4 encoder + 4 decoder
  layers, 256 wide;
* ``gpt2-small-b1-t1024-ckpt4-steady[-nodrop]``: see below (dropout 0.1, or none);
* ``gpt2-small-b1-t1024-ckpt4-steady``: GPT-2 small, batch 1, 1024 tokens, its 12 blocks run
  under ``torch.utils.checkpoint`` in 4 segments of 3 blocks (recomputed in the backward).

Usage: ``python benchmarks/gap_graphs.py OUT_DIR [NAME ...]``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch import nn

from roam_core.formats.graph_io import save_graph
from roam_core.trace import trace_training_step
from roam_core.zoo.transformer import GPT2, GPT2Config


class _CheckpointedGPT2(nn.Module):
    """GPT-2 with ``torch.utils.checkpoint`` over segments of blocks and the tied LM head."""

    def __init__(self, config: GPT2Config, segments: int) -> None:
        super().__init__()
        self.inner = GPT2(config, lm_head=True, attention="sdpa")
        self.segments = segments

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        m = self.inner
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = m.drop(m.wte(ids) + m.wpe(pos))
        blocks = list(m.h)
        per = len(blocks) // self.segments

        def run(seg: list[nn.Module]):
            def f(h: torch.Tensor) -> torch.Tensor:
                for b in seg:
                    h = b(h)
                return h
            return f

        for k in range(self.segments):
            x = checkpoint(run(blocks[k * per:(k + 1) * per]), x, use_reentrant=False)
        x = m.ln_f(x)
        return torch.nn.functional.linear(x, m.wte.weight)


class _T5Loss(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, labels=ids).loss


class _WithIds(nn.Module):
    """``forward(ids)`` returns ``(logits, ids)`` so the loss reads the labels as an input."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(ids), ids


def _lm_loss(pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    logits, ids = pair
    v = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, v),
                                             ids[:, 1:].reshape(-1))


def build(name: str):
    if name.startswith("gpt2-768w-"):
        layers = int(name.split("-")[2].rstrip("l"))
        cfg = GPT2Config(n_layer=layers)  # GPT-2's dropout 0.1 (random ops are chained)
        with torch.device("meta"):
            model = GPT2(cfg, lm_head=True, attention="sdpa")
        ids = torch.zeros((1, 128), dtype=torch.long, device="meta")
        return trace_training_step(_WithIds(model), (ids,), _lm_loss, setting="steady", name=name)
    if name.startswith("t5-"):
        import transformers

        cfg = transformers.T5Config(d_model=256, d_kv=32, d_ff=1024, num_layers=4,
                                    num_decoder_layers=4, num_heads=8, vocab_size=32128,
                                    dropout_rate=0.1, decoder_start_token_id=0,
                                    pad_token_id=0)
        with torch.device("meta"):
            model = transformers.T5ForConditionalGeneration(cfg).train()
        ids = torch.zeros((1, 128), dtype=torch.long, device="meta")
        return trace_training_step(_T5Loss(model), (ids,), None, setting="steady", name=name)
    if name.startswith("gpt2-small-b1-t1024-ckpt4"):
        cfg = GPT2Config(dropout=0.0 if name.endswith("nodrop") else 0.1)
        with torch.device("meta"):
            model = _CheckpointedGPT2(cfg, 4)
        ids = torch.zeros((1, 1024), dtype=torch.long, device="meta")
        return trace_training_step(_WithIds(model), (ids,), _lm_loss, setting="steady", name=name)
    raise SystemExit(f"unknown graph {name}")


NAMES = ("gpt2-768w-48l-b1-t128-steady", "t5-4+4-256w-b1-t128-steady",
         "gpt2-small-b1-t1024-ckpt4-steady", "gpt2-small-b1-t1024-ckpt4-steady-nodrop")


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name in argv[1:] or NAMES:
        t0 = time.perf_counter()
        g = build(name)
        save_graph(g, out / f"{name}.json.gz")
        print(f"{name}: {len(g.ops)} ops, traced in {time.perf_counter() - t0:.1f} s",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
