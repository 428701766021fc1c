"""Exported checkpointing policy: peaks held against the budget plan, step times beside
torch's own ``checkpoint`` of every block and the unwrapped model, interleaved in one run.

Usage::

    nice python benchmarks/export_bench.py [--only NAME] [--steps N] [--frac F] [--compile]
                                           [--device cpu|cuda] [--out benchmarks/results]

For each configuration the script traces the steady training step, plans it with roam at a
budget ``F`` of the way from the lowest peak recomputation reaches to the plain plan's
(``BudgetPlanner``), and

1. exports the plan (:func:`roam_core.apply_checkpoint_plan`): modules wrapped, bytes of the
   plan's drops it expresses and those it cannot;
2. holds it against the plan (:func:`roam_core.check_checkpoint_plan`): the wrapped step
   traced and planned by roam without a budget (goal: within 5 % of the budget plan's peak),
   and in the order eager PyTorch runs it; the same for ``torch.utils.checkpoint`` around
   every block (plain, no policy) and for the unwrapped model;
3. trains ``N`` steps of three copies from identical weights on the same batch --
   unwrapped, exported policy, checkpoint of every block -- interleaved step by step
   (rotating which goes first), AdamW; step times are medians after the first step;
   every loss of the exported policy must equal the unwrapped model's (bit for bit on CPU);
   on CUDA each step's ``max_memory_allocated`` above what was allocated before it is
   recorded; with ``--compile`` the same three under ``torch.compile`` (compile time apart).

Results go to ``export_policy.md`` / ``.json`` with the date, the device and the load
average before and after each configuration.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's roam_core

import torch
from torch import nn

Case = tuple[nn.Module, list[Any], Any, str]
GOAL_RATIO = 1.05


class _HFLoss(nn.Module):
    """``forward(ids)``: a Hugging Face causal LM's own loss (graph paths: the HF model's)."""

    roam_name_scope = "model"

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, labels=ids).loss


def _zoo(name: str, batch: int, seq: int | None, **kw: Any) -> Callable[[str], Case]:
    def build(device: str) -> Case:
        from roam_core.zoo import build_zoo_step

        s = build_zoo_step(name, batch, seq, device=device, **kw)
        return s.model, list(s.example_inputs), s.loss_fn, "adamw"
    return build


def _gpt_dropout(batch: int, seq: int, d: int, layers: int) -> Callable[[str], Case]:
    def build(device: str) -> Case:
        from roam_core.zoo.steps import SelfSupervised, lm_shifted
        from roam_core.zoo.transformer import GPT2, GPT2Config

        torch.manual_seed(0)
        cfg = GPT2Config(vocab_size=1024, n_positions=max(seq, 64), n_embd=d, n_layer=layers,
                         n_head=max(1, d // 64), dropout=0.1)
        ids = torch.randint(0, 1024, (batch, seq), generator=torch.Generator().manual_seed(0))
        return (SelfSupervised(GPT2(cfg, lm_head=True, attention="math")).to(device),
                [ids.to(device)], lm_shifted, "adamw")
    return build


def _hf_llama(batch: int, seq: int, d: int, layers: int) -> Callable[[str], Case]:
    def build(device: str) -> Case:
        import transformers

        cfg = transformers.AutoConfig.for_model(
            "llama", hidden_size=d, intermediate_size=int(d * 8 / 3), num_hidden_layers=layers,
            num_attention_heads=max(1, d // 64), num_key_value_heads=max(1, d // 64),
            vocab_size=1024, max_position_embeddings=max(seq, 64))
        cfg.use_cache = False  # training: a re-run must not append to a key/value cache
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg).train()
        ids = torch.randint(0, 1024, (batch, seq), generator=torch.Generator().manual_seed(0))
        return _HFLoss(model).to(device), [ids.to(device)], None, "adamw"
    return build


def _resnet(batch: int, size: int, layers: tuple[int, ...]) -> Callable[[str], Case]:
    def build(device: str) -> Case:
        from roam_core.zoo.cnn import ResNet50
        from roam_core.zoo.steps import Supervised, ce_labels

        torch.manual_seed(0)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(batch, 3, size, size, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
        return (Supervised(ResNet50(num_classes=10, layers=layers)).to(device),
                [x.to(device), y.to(device)], ce_labels, "adamw")
    return build


#: name -> builder(device): small enough for a loaded 2-core CPU.
CPU_CONFIGS: dict[str, Callable[[str], Case]] = {
    "tiny_gpt b4 t64": _zoo("tiny_gpt", 4, 64),
    "gpt2-class d256 l4 b4 t128, dropout 0.1": _gpt_dropout(4, 128, 256, 4),
    "hf-llama d256 l4 b2 t128": _hf_llama(2, 128, 256, 4),
    "resnet50-class (1,1,1,1) b8 96px": _resnet(8, 96, (1, 1, 1, 1)),
}
#: on a GPU: the zoo's gpt2 and resnet50 at the issue's sizes.
CUDA_CONFIGS: dict[str, Callable[[str], Case]] = {
    "resnet50 b32": _zoo("resnet50", 32, None),
    "gpt2 b8 t512": _zoo("gpt2", 8, 512),
    "gpt2-class d768 l12 b8 t512, dropout 0.1": _gpt_dropout(8, 512, 768, 12),
}


# ------------------------------------------------------------------ variants
def _every_block(model: nn.Module, blocks: tuple[str, ...]) -> nn.Module:
    """``model`` with each block's forward in plain ``torch.utils.checkpoint``."""

    from roam_core.trace.modules import SCOPE_ATTRIBUTE

    m = copy.deepcopy(model)
    scope = getattr(m, SCOPE_ATTRIBUTE, "") or ""
    base = m.get_submodule(scope) if scope else m
    for path in blocks:
        blk = base.get_submodule(path)
        blk.forward = _Plain(blk)  # type: ignore[method-assign]
    return m


class _Plain:
    """A block's forward inside plain non-reentrant ``torch.utils.checkpoint``."""

    def __init__(self, block: nn.Module) -> None:
        self.block = block

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        f = type(self.block).forward.__get__(self.block)
        return checkpoint(f, *args, use_reentrant=False, **kwargs)


def _step_fn(model: nn.Module, inputs: list[Any], loss_fn: Any, dev: torch.device
             ) -> Callable[[], tuple[float, float, int]]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)

    def step() -> tuple[float, float, int]:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            before = torch.cuda.memory_allocated(dev)
        t0 = time.perf_counter()
        y = model(*inputs)
        loss = y if loss_fn is None else loss_fn(y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        peak = 0
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            peak = torch.cuda.max_memory_allocated(dev) - before
        return float(loss.detach()), time.perf_counter() - t0, peak

    return step


def _interleaved(fns: dict[str, Callable[[], tuple[float, float, int]]], steps: int
                 ) -> dict[str, dict[str, Any]]:
    names = list(fns)
    out: dict[str, dict[str, Any]] = {n: {"losses": [], "times": [], "peaks": []} for n in names}
    for k in range(steps):
        order = names[k % len(names):] + names[:k % len(names)]
        for n in order:
            torch.manual_seed(1000 + k)  # same dropout draws for every variant
            loss, secs, peak = fns[n]()
            out[n]["losses"].append(loss)
            out[n]["times"].append(secs)
            out[n]["peaks"].append(peak)
    for r in out.values():
        r["median_s"] = statistics.median(r["times"][1:] or r["times"])
        r["max_step_peak_bytes"] = max(r["peaks"])
    return out


def _measure(name: str, build: Callable[[str], Case], args: argparse.Namespace
             ) -> dict[str, Any]:
    import roam_core as rc
    from roam_core.model.recompute_ops import step_flops
    from roam_core.oracle.simulate import simulate
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.recompute.baselines import find_blocks
    from roam_core.trace import trace_fx

    dev = torch.device(args.device)
    row: dict[str, Any] = {"config": name, "load_before": [round(x, 2)
                                                           for x in os.getloadavg()]}
    t0 = time.perf_counter()
    model, inputs, loss_fn, opt = build(args.device)
    graph = trace_fx(model, inputs, loss_fn, opt, device=args.device).graph
    cfg = rc.PlannerConfig(workers=1, time_limit_s=args.time_limit)
    bp = BudgetPlanner(graph, cfg)
    lo, hi = bp.lowest_bytes(), bp.base.planned_peak_bytes
    plan = bp.plan_at(int(lo + (hi - lo) * args.frac))
    check = rc.check_checkpoint_plan(copy.deepcopy(model), inputs, loss_fn, opt, plan, graph,
                                     config=cfg, device=args.device)
    blocks = find_blocks(graph)
    every = _every_block(model, blocks)
    every_graph = trace_fx(every, inputs, loss_fn, opt, device=args.device).graph
    ex = check.export
    row |= {
        "ops": len(graph), "blocks": len(blocks), "budget_frac": args.frac,
        "plain_plan_peak_bytes": hi, "lowest_peak_bytes": lo,
        "budget_plan_peak_bytes": plan.planned_peak_bytes, "plan_extra_flops": plan.extra_flops,
        "step_flops": plan.step_flops, "modules_wrapped": len(ex.modules),
        "dropped_bytes": ex.dropped_bytes, "expressed_bytes": ex.expressed_bytes,
        "unexpressed_bytes": ex.unexpressed_bytes, "unexpressed_drops": len(ex.unexpressed),
        "extra_saved_bytes": ex.extra_saved_bytes, "policy_recompute_flops": ex.recompute_flops,
        "wrapped_planned_peak_bytes": check.wrapped_planned_peak_bytes,
        "ratio": round(check.ratio, 4),
        "wrapped_eager_peak_bytes": check.wrapped_eager_peak_bytes,
        "eager_peak_bytes": check.eager_peak_bytes,
        "every_block_eager_peak_bytes": simulate(every_graph).peak_bytes,
        "every_block_planned_peak_bytes": rc.make_plan(every_graph, cfg).planned_peak_bytes,
        "every_block_extra_flops": step_flops(every_graph) - step_flops(graph),
        "summary": ex.summary(),
        "unexpressed_reasons": sorted({u.reason for u in ex.unexpressed}),
        "prepare_seconds": round(time.perf_counter() - t0, 1),
    }
    variants = {"eager": copy.deepcopy(model), "exported": copy.deepcopy(model),
                "every_block": every}
    applied = rc.apply_checkpoint_plan(variants["exported"], plan, graph)
    row["timing"] = _interleaved(
        {n: _step_fn(m, inputs, loss_fn, dev) for n, m in variants.items()}, args.steps)
    row["exported_losses_equal"] = (row["timing"]["exported"]["losses"]
                                    == row["timing"]["eager"]["losses"])
    row["mismatches"] = len(applied.mismatches)
    if args.compile:
        row["compiled"] = _compiled(variants, inputs, loss_fn, dev, args.steps)
    row["load_after"] = [round(x, 2) for x in os.getloadavg()]
    row["wall_seconds"] = round(time.perf_counter() - t0, 1)
    return row


def _compiled(variants: dict[str, nn.Module], inputs: list[Any], loss_fn: Any,
              dev: torch.device, steps: int) -> dict[str, Any]:
    import torch._dynamo

    fns, compile_s = {}, {}
    for n, m in variants.items():
        torch._dynamo.reset()
        c = torch.compile(copy.deepcopy(m))
        fns[n] = _step_fn(c, inputs, loss_fn, dev)
        t0 = time.perf_counter()
        torch.manual_seed(999)
        fns[n]()  # compiles forward and backward
        compile_s[n] = round(time.perf_counter() - t0, 1)
    out = _interleaved(fns, steps)
    for n in out:
        out[n]["compile_seconds"] = compile_s[n]
    return out


# ------------------------------------------------------------------ report
def _mib(b: int) -> str:
    return f"{b / 2**20:.2f}"


def _pct(flops: int, r: dict[str, Any]) -> str:
    return f"{100 * flops / r['step_flops']:.1f}%" if r["step_flops"] else "-"


def _md(rows: list[dict[str, Any]], args: argparse.Namespace, started: str) -> str:
    lines = [
        "# Exported checkpointing policy: held against the plan, and its step time",
        "",
        f"`python benchmarks/export_bench.py --steps {args.steps} --frac {args.frac} "
        f"--time-limit {args.time_limit}{' --compile' if args.compile else ''} --device "
        f"{args.device}` on {platform.machine()} with {os.cpu_count()} CPUs "
        f"(`nproc`), torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, "
        f"started {started}. The load averages (1 min) before and after each configuration "
        "are in the last table: the machine is shared with other work, absolute times are "
        "noisy, the interleaved ratios less so.",
        "",
        "Budget: `frac` of the way from the lowest peak roam's recomputation reaches to the "
        "plain plan's peak. *Exported* = `apply_checkpoint_plan` (selective checkpointing of "
        "the modules the plan's drops need, per-op save/recompute); *every block* = plain "
        "`torch.utils.checkpoint(use_reentrant=False)` around every block, torch's own "
        "answer. Peaks (MiB, resident state included) come from roam's trace of each "
        "wrapped step: *roam order* = planned by roam without a budget, *eager order* = the "
        f"order PyTorch runs. Goal: exported (roam order) / budget plan <= {GOAL_RATIO}. "
        "Extra FLOPs in % of the step's: the plan's re-runs; the policy's (every re-run op "
        "of a wrapped call up to the last one the backward reads, as torch runs them); "
        "every block's, from its trace.",
        "",
        "| config | budget plan | exported, roam order | ratio | exported, eager order "
        "| every block, eager order | every block, roam order | unwrapped, eager order "
        "| drops expressed / all (MiB) | not expressible (MiB, drops) "
        "| extra FLOPs: plan / exported / every block |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {_mib(r['budget_plan_peak_bytes'])} | "
            f"{_mib(r['wrapped_planned_peak_bytes'])} | {r['ratio']:.3f} | "
            f"{_mib(r['wrapped_eager_peak_bytes'])} | {_mib(r['every_block_eager_peak_bytes'])}"
            f" | {_mib(r['every_block_planned_peak_bytes'])} | {_mib(r['eager_peak_bytes'])} | "
            f"{_mib(r['expressed_bytes'])} / {_mib(r['dropped_bytes'])} | "
            f"{_mib(r['unexpressed_bytes'])} ({r['unexpressed_drops']}) | "
            f"{_pct(r['plan_extra_flops'], r)} / {_pct(r['policy_recompute_flops'], r)} / "
            f"{_pct(r['every_block_extra_flops'], r)} |")
    lines += ["", "Step time (ms, median after the first step; interleaved):", "",
              "| config | unwrapped | exported | every block | exported / unwrapped "
              "| every block / unwrapped | exported losses = unwrapped | load before -> after |",
              "|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        t = r["timing"]
        e, x, b = (t[k]["median_s"] * 1e3 for k in ("eager", "exported", "every_block"))
        lines.append(f"| {r['config']} | {e:.1f} | {x:.1f} | {b:.1f} | {x / e:.3f} | "
                     f"{b / e:.3f} | {'yes' if r['exported_losses_equal'] else 'NO'} | "
                     f"{r['load_before'][0]} -> {r['load_after'][0]} |")
    if args.device == "cuda":
        lines += ["", "CUDA `max_memory_allocated` of a step above what was allocated before "
                  "it (MiB, the most over the steps; eager):", "",
                  "| config | unwrapped | exported | every block |", "|---|---:|---:|---:|"]
        for r in rows:
            t = r["timing"]
            lines.append(f"| {r['config']} | " + " | ".join(
                _mib(t[k]["max_step_peak_bytes"]) for k in ("eager", "exported",
                                                           "every_block")) + " |")
    if any("compiled" in r for r in rows):
        lines += ["", "Under `torch.compile` (ms, median; compile seconds of the first step):",
                  "", "| config | unwrapped | exported | every block | exported / unwrapped |",
                  "|---|---:|---:|---:|---:|"]
        for r in rows:
            c = r.get("compiled")
            if c:
                e, x, b = (c[k]["median_s"] * 1e3 for k in ("eager", "exported",
                                                            "every_block"))
                lines.append(f"| {r['config']} | {e:.1f} ({c['eager']['compile_seconds']} s) "
                             f"| {x:.1f} ({c['exported']['compile_seconds']} s) | {b:.1f} "
                             f"({c['every_block']['compile_seconds']} s) | {x / e:.3f} |")
    lines += ["", "Why drops were not expressible:", ""]
    for r in rows:
        lines.append(f"- {r['config']}: {r['summary']}")
        lines += [f"  - {why}" for why in r["unexpressed_reasons"]]
    lines += ["", args.note, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=None, help="run configs whose name contains this")
    ap.add_argument("--steps", type=int, default=6, help="interleaved steps (default 6)")
    ap.add_argument("--frac", type=float, default=0.5,
                    help="budget: this far from the lowest peak to the plain one (0.5)")
    ap.add_argument("--time-limit", type=float, default=5.0, help="planner seconds")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--note", default="Machine: shared with other work while this ran (see "
                    "the load averages).")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda":  # comparable losses: no atomics in the backward
        torch.use_deterministic_algorithms(True, warn_only=True)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    configs = CUDA_CONFIGS if args.device == "cuda" else CPU_CONFIGS
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "export_policy.json"
    # --only re-measures some configurations and keeps the others' last results
    old = {r["config"]: r for r in json.loads(path.read_text())["rows"]} \
        if args.only and path.exists() else {}
    rows = []
    for name, build in configs.items():
        if args.only and args.only not in name:
            if name in old:
                rows.append(old[name])
            continue
        print(f"export_bench: {name} ...", file=sys.stderr, flush=True)
        try:
            r = _measure(name, build, args)
        except ImportError as e:  # transformers missing
            print(f"export_bench: {name} skipped: {e}", file=sys.stderr)
            continue
        print(f"export_bench: {name}: ratio {r['ratio']}, {r['summary']}", file=sys.stderr,
              flush=True)
        rows.append(r)
        path.write_text(
            json.dumps({"started": started, "nproc": os.cpu_count(), "device": args.device,
                        "torch": torch.__version__, "rows": rows}, indent=1) + "\n")
        (out / "export_policy.md").write_text(_md(rows, args, started))
    print(f"wrote {out / 'export_policy.md'}", file=sys.stderr)
    ok = all(r["exported_losses_equal"] or args.device == "cuda" for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
