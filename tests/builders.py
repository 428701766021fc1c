"""Hand-built graphs and plans shared by several test modules (no test module imports another)."""

from __future__ import annotations

import os
from pathlib import Path

from roam_core.layout.arena_layout import greedy_arena
from roam_core.model.graph import (
    Alias,
    ControlEdge,
    EdgeReason,
    Graph,
    Op,
    OpId,
    Phase,
    Tensor,
    TensorId,
    TensorKind,
)
from roam_core.model.plan import Plan
from roam_core.oracle.simulate import simulate

K = TensorKind
FW, LO, BW, OPT = Phase.FORWARD, Phase.LOSS, Phase.BACKWARD, Phase.OPTIMIZER


def _t(tid: str, size: int, kind: TensorKind, p: str | None) -> Tensor:
    return Tensor(TensorId(tid), size, "float32", (max(size // 4, 1),), kind,
                  OpId(p) if p else None)


def two_param_step(optimizer: str = "adam", act_bytes: int = 8192) -> Graph:
    """A 2-layer MLP step with a single-tensor Adam (state created in the step) or SGD+momentum.

    Program order is torch's: all state creation first, then the per-parameter updates.
    """
    ops = [
        Op(OpId("mm1"), "mm", FW, ("x", "w1"), ("h1",)),
        Op(OpId("relu"), "relu", FW, ("h1",), ("h2",)),
        Op(OpId("mm2"), "mm", FW, ("h2", "w2"), ("out",)),
        Op(OpId("loss"), "sum", LO, ("out",), ("loss",)),
        Op(OpId("ones"), "ones_like", BW, ("loss",), ("g_out",)),
        Op(OpId("gw2"), "mm", BW, ("h2", "g_out"), ("grad_w2",)),
        Op(OpId("gh2"), "mm", BW, ("g_out", "w2"), ("g_h2",)),
        Op(OpId("relu_bw"), "threshold_backward", BW, ("g_h2", "h2"), ("g_h1",)),
        Op(OpId("gw1"), "mm", BW, ("x", "g_h1"), ("grad_w1",)),
    ]
    tensors = [
        _t("x", 1024, K.INPUT, None), _t("w1", 4096, K.PARAMETER, None),
        _t("w2", 2048, K.PARAMETER, None), _t("h1", act_bytes, K.ACTIVATION, "mm1"),
        _t("h2", act_bytes, K.ACTIVATION, "relu"), _t("out", 512, K.ACTIVATION, "mm2"),
        _t("loss", 4, K.OUTPUT, "loss"), _t("g_out", 512, K.TEMPORARY, "ones"),
        _t("grad_w2", 2048, K.GRADIENT, "gw2"), _t("g_h2", act_bytes, K.TEMPORARY, "gh2"),
        _t("g_h1", act_bytes, K.TEMPORARY, "relu_bw"), _t("grad_w1", 4096, K.GRADIENT, "gw1"),
    ]
    aliases: list[Alias] = []
    edges: list[ControlEdge] = []
    outputs = [TensorId("loss")]
    readers = {"w1": ["mm1"], "w2": ["mm2", "gh2"]}
    if optimizer == "adam":
        for i, size in ((1, 4096), (2, 2048)):
            w, g = f"w{i}", f"grad_w{i}"
            ops += [Op(OpId(f"za{i}"), "zeros_like", OPT, (w,), (f"ea{i}",)),
                    Op(OpId(f"zs{i}"), "zeros_like", OPT, (w,), (f"es{i}",))]
            tensors += [_t(f"ea{i}", size, K.OPTIMIZER_STATE, f"za{i}"),
                        _t(f"es{i}", size, K.OPTIMIZER_STATE, f"zs{i}")]
            outputs += [TensorId(f"ea{i}"), TensorId(f"es{i}")]
            readers[w] += [f"za{i}", f"zs{i}"]
        for i in (1, 2):
            w, g = f"w{i}", f"grad_w{i}"
            size = 4096 if i == 1 else 2048
            ops += [
                Op(OpId(f"lerp{i}"), "lerp_", OPT, (f"ea{i}", g), (f"ea{i}_1",),
                   (TensorId(f"ea{i}"),)),
                Op(OpId(f"mul{i}"), "mul_", OPT, (f"es{i}",), (f"es{i}_1",),
                   (TensorId(f"es{i}"),)),
                Op(OpId(f"acm{i}"), "addcmul_", OPT, (f"es{i}_1", g), (f"es{i}_2",),
                   (TensorId(f"es{i}"),)),
                Op(OpId(f"sqrt{i}"), "sqrt", OPT, (f"es{i}_2",), (f"sq{i}",)),
                Op(OpId(f"div{i}"), "div", OPT, (f"sq{i}",), (f"den{i}",)),
                Op(OpId(f"upd{i}"), "addcdiv_", OPT, (w, f"ea{i}_1", f"den{i}"), (f"{w}_1",),
                   (TensorId(w),)),
            ]
            tensors += [_t(f"sq{i}", size, K.TEMPORARY, f"sqrt{i}"),
                        _t(f"den{i}", size, K.TEMPORARY, f"div{i}")]
            aliases += [Alias(f"ea{i}_1", TensorId(f"ea{i}"), OpId(f"lerp{i}")),
                        Alias(f"es{i}_1", TensorId(f"es{i}"), OpId(f"mul{i}")),
                        Alias(f"es{i}_2", TensorId(f"es{i}"), OpId(f"acm{i}")),
                        Alias(f"{w}_1", TensorId(w), OpId(f"upd{i}"))]
            edges += [ControlEdge(OpId(r), OpId(f"upd{i}"), EdgeReason.MUTATION)
                      for r in readers[w]]
    else:  # SGD with momentum, first step: buf = clone(grad); w -= lr * buf
        for i, size in ((1, 4096), (2, 2048)):
            w, g = f"w{i}", f"grad_w{i}"
            ops += [Op(OpId(f"clone{i}"), "clone", OPT, (g,), (f"buf{i}",)),
                    Op(OpId(f"upd{i}"), "add_", OPT, (w, f"buf{i}"), (f"{w}_1",),
                       (TensorId(w),))]
            tensors += [_t(f"buf{i}", size, K.OPTIMIZER_STATE, f"clone{i}")]
            outputs += [TensorId(f"buf{i}")]
            aliases += [Alias(f"{w}_1", TensorId(w), OpId(f"upd{i}"))]
            edges += [ControlEdge(OpId(r), OpId(f"upd{i}"), EdgeReason.MUTATION)
                      for r in readers[w]]
    return Graph.build(ops, tensors, aliases, edges, outputs, name=f"two_param_{optimizer}")


def eager_greedy_plan(g: Graph) -> Plan:
    """A valid plan of ``g``: program order, greedy arena layout."""
    lay = greedy_arena(g, g.op_ids)
    prof = simulate(g)
    return Plan(g.fingerprint(), g.name, "eager", g.op_ids, dict(lay.offsets), 512,
                lay.arena_bytes, prof.peak_bytes, prof.resident_bytes, prof.peak_bytes,
                prof.peak_bytes, prof.live_bytes)


def random_train_graph(seed: int, n_layers: int = 6, *, skip_prob: float = 0.3,
                       param_prob: float = 0.5, view_prob: float = 0.2) -> Graph:
    """A random training step: a forward chain with skips, a loss, a mirrored backward.

    Layer ``i`` computes ``h_i`` from ``h_{i-1}`` (sometimes also ``h_{i-2}``, and a weight
    ``w_i``, which makes it costly); its backward reads the layer's inputs (the kept
    activations) and ``h_i`` itself for some layers; weights get a gradient op and an
    in-place SGD update (``MUTATION`` edges after every reader of the weight).  Some layers
    read their input through a forward view (``v_i``), whose backward reads the view.
    Sizes are multiples of 512 bytes; FLOPs are random (weighted layers cost more).
    """
    import random

    rnd = random.Random(seed)
    ops: list[Op] = []
    tensors = [_t("x", 512 * rnd.randint(1, 4), K.INPUT, None)]
    aliases: list[Alias] = []
    edges: list[ControlEdge] = []
    layer_inputs: list[list[str]] = []
    reads_out: list[bool] = []
    has_w: list[bool] = []
    h = ["x"]
    for i in range(1, n_layers + 1):
        ins = [h[-1]]
        if i >= 2 and rnd.random() < skip_prob:
            ins.append(h[-2])
        if rnd.random() < view_prob:
            aliases.append(Alias(f"v{i}", TensorId(_storage(ins[0], aliases)), OpId(f"view{i}")))
            ops.append(Op(OpId(f"view{i}"), "aten.view.default", FW, (ins[0],), (f"v{i}",),
                          flops=0, bytes_read=0, bytes_written=0))
            ins[0] = f"v{i}"
        w = rnd.random() < param_prob
        if w:
            tensors.append(_t(f"w{i}", 512 * rnd.randint(1, 3), K.PARAMETER, None))
            ins.append(f"w{i}")
        size = 512 * rnd.randint(1, 8)
        flops = rnd.randint(2000, 9000) if w else rnd.randint(0, 300)
        tensors.append(_t(f"h{i}", size, K.ACTIVATION, f"f{i}"))
        ops.append(Op(OpId(f"f{i}"), "aten.mm.default" if w else "aten.relu.default", FW,
                      tuple(ins), (f"h{i}",), flops=flops, bytes_read=size, bytes_written=size))
        layer_inputs.append(ins)
        reads_out.append(rnd.random() < 0.4)
        has_w.append(w)
        h.append(f"h{i}")
    tensors.append(_t("loss", 512, K.OUTPUT, "loss"))
    ops.append(Op(OpId("loss"), "aten.sum.default", LO, (h[-1],), ("loss",), flops=10,
                  bytes_read=512, bytes_written=512))
    tensors.append(_t("g_top", 512 * rnd.randint(1, 8), K.TEMPORARY, "g_top"))
    ops.append(Op(OpId("g_top"), "aten.ones_like.default", BW, ("loss",), ("g_top",),
                  flops=0, bytes_read=512, bytes_written=512))
    grad = "g_top"
    for i in range(n_layers, 0, -1):
        ins = layer_inputs[i - 1]
        reads = [grad, *(v for v in ins if not v.startswith("w"))]
        if reads_out[i - 1]:
            reads.append(f"h{i}")
        if has_w[i - 1]:
            reads.append(f"w{i}")
            tensors.append(_t(f"gw{i}", 512, K.GRADIENT, f"bw{i}"))
            ops.append(Op(OpId(f"bw{i}"), "aten.mm.default", BW,
                          (grad, *(v for v in ins if not v.startswith("w"))), (f"gw{i}",),
                          flops=rnd.randint(2000, 9000), bytes_read=1024, bytes_written=512))
        g_new = f"g{i - 1}"
        tensors.append(_t(g_new, 512 * rnd.randint(1, 8), K.TEMPORARY, f"b{i}"))
        ops.append(Op(OpId(f"b{i}"), "aten.mm.default" if has_w[i - 1] else "aten.mul.Tensor",
                      BW, tuple(dict.fromkeys(reads)), (g_new,), flops=rnd.randint(0, 5000),
                      bytes_read=1024, bytes_written=1024))
        grad = g_new
        if has_w[i - 1]:
            ops.append(Op(OpId(f"upd{i}"), "aten.sub_.Tensor", OPT, (f"w{i}", f"gw{i}"),
                          (), (TensorId(f"w{i}"),), flops=0, bytes_read=1024,
                          bytes_written=512))
            for r in (f"f{i}", f"b{i}"):
                edges.append(ControlEdge(OpId(r), OpId(f"upd{i}"), EdgeReason.MUTATION))
    return Graph.build(ops, tensors, aliases, edges, outputs=[TensorId("loss")],
                       name=f"random-train-{seed}")


def _storage(v: str, aliases: list[Alias]) -> str:
    for a in aliases:
        if a.id == v:
            return a.storage
    return v


def tied_branches() -> Graph:
    """Two branches that tie at 512 B rounding (program order runs the worse one first).

    Exact bytes: branch 1 first peaks at 10 + 600 + 500 = 1110 (running c2), branch 2 first
    at 500 + 1000 + 10 = 1510 (its 500-byte output stays live across branch 1).
    """
    f = Phase.FORWARD

    def t(tid: str, size: int, producer: str) -> Tensor:
        return Tensor(TensorId(tid), size, "float32", (max(1, size // 4),),
                      TensorKind.ACTIVATION, OpId(producer))

    return Graph.build(
        [Op(OpId("a"), "src", f, (), ("s",)),
         Op(OpId("b2"), "big", f, ("s",), ("big2",)),
         Op(OpId("c2"), "small", f, ("big2",), ("small2",)),
         Op(OpId("b1"), "big", f, ("s",), ("big1",)),
         Op(OpId("c1"), "small", f, ("big1",), ("small1",)),
         Op(OpId("d"), "join", f, ("small1", "small2"), ("out",))],
        [t("s", 8, "a"), t("big2", 600, "b2"), t("small2", 500, "c2"),
         t("big1", 1000, "b1"), t("small1", 10, "c1"), t("out", 8, "d")],
        outputs=[TensorId("out")], name="tied_branches")


def random_valid_order(graph: Graph, seed: int) -> list[str]:
    """A uniformly drawn ready op at every step (a random valid order, seeded)."""
    import random

    rnd = random.Random(seed)
    preds = {op: set(graph.predecessors(op)) for op in graph.op_ids}
    done: list[str] = []
    left = set(graph.op_ids)
    while left:
        pick = rnd.choice(sorted(op for op in left if preds[op] <= set(done)))
        done.append(pick)
        left.discard(pick)
    return done


#: The repository root (tests/ lies directly below it).
REPO = Path(__file__).resolve().parents[1]


def _shared_roots() -> list[Path]:
    """Where the shared data folder may be: ``$ROAM_SHARED_DIR``, ``<repo>/../shared`` and,
    in a git worktree, ``<main checkout>/../shared``."""
    roots = [Path(os.environ["ROAM_SHARED_DIR"])] if os.environ.get("ROAM_SHARED_DIR") else []
    roots += [REPO / "shared", REPO.parent / "shared"]
    dot_git = REPO / ".git"
    if dot_git.is_file():  # a worktree: "gitdir: <main>/.git/worktrees/<name>"
        text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            main = Path(text.partition(":")[2].strip()).resolve().parents[2]
            roots.append(main.parent / "shared")
    return roots


def shared_data_dir(relative: str) -> Path | None:
    """``<shared>/<relative>`` for the first shared root that has it, else ``None``."""
    for root in _shared_roots():
        if (root / relative).is_dir():
            return root / relative
    return None


def wide_branches(k: int, parts: int = 2, seed: int = 0) -> Graph:
    """``parts`` fan-outs in a row, each ``k`` two-op branches of random sizes joined again.

    With ``node_limit = 2k + 2`` each fan-out is one sub-task whose CP-SAT proof takes long
    (k = 45: ~16 s per sub-task on one core), so a cancel lands in running solves.
    """
    import random

    rnd = random.Random(seed)
    f = Phase.FORWARD
    ops: list[Op] = []
    tensors: list[Tensor] = []

    def t(tid: str, size: int) -> None:
        tensors.append(Tensor(TensorId(tid), size, "float32", (max(1, size // 4),),
                              K.ACTIVATION, OpId(tid)))

    prev: str | None = None
    for part in range(parts):
        src = f"s{part}"
        ops.append(Op(OpId(src), "src", f, (prev,) if prev else (), (src,)))
        t(src, 512)
        ends = []
        for b in range(k):
            a, c = f"a{part}_{b}", f"c{part}_{b}"
            ops += [Op(OpId(a), "big", f, (src,), (a,)), Op(OpId(c), "small", f, (a,), (c,))]
            t(a, 512 * rnd.randint(1, 40))
            t(c, 512 * rnd.randint(1, 40))
            ends.append(c)
        prev = f"j{part}"
        ops.append(Op(OpId(prev), "join", f, tuple(ends), (prev,)))
        t(prev, 512)
    assert prev is not None
    return Graph.build(ops, tensors, outputs=[TensorId(prev)], name=f"wide_branches_{k}x{parts}")
