"""A model of PyTorch's CUDA caching allocator replaying one order of a graph.

What it models (c10 ``CUDACachingAllocator`` with default settings)
-------------------------------------------------------------------
* Every request is rounded up to a multiple of 512 B (``kMinBlockSize``); 0-byte storages
  take no block (PyTorch never calls the allocator for them).
* Requests of at most 1 MiB (``kSmallSize``) are served from the *small pool*, whose segments
  are 2 MiB (``kSmallBuffer``); larger requests from the *large pool*, whose segments are
  20 MiB (``kLargeBuffer``) for requests under 10 MiB (``kMinLargeAlloc``) and the request
  rounded up to a multiple of 2 MiB (``kRoundLarge``) otherwise.
* A request takes the *best-fit* cached free block of its pool: the smallest block at least
  as large, lowest address on ties (the allocator's ``(size, address)`` ordered set).  Only
  when none fits is a new segment "cudaMalloc-ed".
* The block is split when the remainder is at least 512 B (small pool) or more than 1 MiB
  (large pool); the request keeps the low addresses and the remainder returns to the pool.
  An unsplit block is handed out whole, and ``allocated`` counts the whole block, exactly as
  ``torch.cuda.memory_allocated`` does.
* A freed block returns to its pool and merges with free neighbours of the same segment.
  Segments are never released (no ``empty_cache``), so ``reserved`` only grows.

Replaying an order: resident storages are allocated first, in graph order, before step 0.
At step ``i`` the storages created by ``order[i]`` are allocated (in the op's creation order),
the per-step figures are recorded, and then every storage whose lifetime (from
:func:`~roam_core.oracle.simulate.lifetimes`) ends after step ``i`` is freed.

Known differences from a real run
---------------------------------
* **One stream, no events.** Cross-stream use (``record_stream``) delays frees in reality.
* **No kernel workspaces or hidden temporaries.** cuBLAS/cuDNN workspaces, attention
  scratch, temporaries inside composite kernels and autograd bookkeeping are not in the graph;
  the real figures are higher by those.
* **Lifetimes are last-use lifetimes.** Eager PyTorch frees on reference-count drop: autograd
  keeps saved tensors until their backward node ran and ``.grad`` until ``zero_grad``, which
  the graph approximates by the last reading op.
* **All outputs of an op are allocated before anything is freed** after it; real kernels may
  interleave allocations and frees of their own temporaries.
* **Resident history is idealised.** Parameters, buffers, the batch and earlier optimizer state
  are allocated into empty pools in graph order; in a real process they were allocated during
  model construction and earlier steps, possibly into other segments with other free holes.
  The real first-step cache also holds blocks freed by earlier steps, which this model
  does not carry over (it models a step after ``empty_cache``).
* **Default configuration only.** ``expandable_segments``, ``max_split_size_mb``,
  ``roundup_power2_divisions``, ``garbage_collection_threshold`` and ``pinned`` settings are
  ignored; no out-of-memory path (the real allocator frees cached blocks and retries
  ``cudaMalloc`` when it fails, which would shrink ``reserved``).
* **Large requests.** A request of 10 MiB or more gets its own segment rounded up to 2 MiB,
  and the tail is split off only when it is over 1 MiB, as in c10; the CUDA driver's page
  granularity and the real cost of ``cudaMalloc`` are not modelled.
* **Addresses are synthetic**: segments are laid out one after another in the order they are
  created.  Blocks never merge across segments, so this does not change any figure.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from roam_core.base.checks import require_type
from roam_core.base.errors import ConfigError
from roam_core.model.graph import Graph, OpId, TensorId
from roam_core.oracle.simulate import lifetimes

__all__ = [
    "AllocatorConfig",
    "AllocatorResult",
    "Block",
    "Segment",
    "simulate_allocator",
]

_logger = logging.getLogger(__name__)

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class AllocatorConfig:
    """The caching allocator's constants (defaults of c10 ``AllocatorConfig.h``)."""

    min_block_bytes: int = 512
    small_size_bytes: int = 1 * MIB
    small_buffer_bytes: int = 2 * MIB
    min_large_alloc_bytes: int = 10 * MIB
    large_buffer_bytes: int = 20 * MIB
    round_large_bytes: int = 2 * MIB

    def round_request(self, size_bytes: int) -> int:
        """Request size after rounding (0 stays 0)."""
        if size_bytes <= 0:
            return 0
        m = self.min_block_bytes
        return -(-size_bytes // m) * m

    def segment_bytes(self, request_bytes: int) -> int:
        """Size of the segment cudaMalloc-ed for a rounded request that found no block."""
        if request_bytes <= self.small_size_bytes:
            return self.small_buffer_bytes
        if request_bytes < self.min_large_alloc_bytes:
            return self.large_buffer_bytes
        r = self.round_large_bytes
        return -(-request_bytes // r) * r


@dataclass(frozen=True, slots=True)
class Segment:
    """One cudaMalloc: ``size_bytes`` at ``address``, in the small or large pool."""

    index: int
    address: int
    size_bytes: int
    pool: str  # "small" or "large"
    created_step: int  # -1 when created for the resident storages


@dataclass(frozen=True, slots=True)
class Block:
    """Where one storage lived: ``[address, address + size_bytes)`` on ``[start_step, end_step)``.

    ``size_bytes`` is the block handed out (the rounded request, or more when the allocator did
    not split a cached block); ``requested_bytes`` is the rounded request.  Resident storages
    have ``resident=True`` and span ``[0, n_steps)``.
    """

    tensor_id: TensorId
    segment: int
    address: int
    size_bytes: int
    requested_bytes: int
    start_step: int
    end_step: int
    resident: bool = False


@dataclass(frozen=True, slots=True)
class AllocatorResult:
    """Outcome of replaying an order through the caching-allocator model.

    Parameters
    ----------
    peak_allocated_bytes : int
        Max of ``allocated_bytes_per_step`` (and of the resident allocation), like
        ``torch.cuda.max_memory_allocated``.
    peak_reserved_bytes : int
        Total segment bytes at the end (never released), like ``max_memory_reserved``.
    peak_requested_bytes : int
        Max of the rounded requested bytes; equals ``simulate(...).peak_bytes``.
    peak_step : int
        First step reaching ``peak_allocated_bytes`` (-1: the resident allocation or empty).
    allocated_bytes_per_step, reserved_bytes_per_step, requested_bytes_per_step : tuple of int
        Figures while each step runs (after its allocations, before its frees), resident
        storages included.
    resident_bytes : int
        Block bytes of the resident storages.
    blocks : tuple of Block
        One per storage with a non-zero size, resident ones first.
    segments : tuple of Segment
        Every segment, in creation order (addresses ascending).
    """

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_requested_bytes: int
    peak_step: int
    allocated_bytes_per_step: tuple[int, ...]
    reserved_bytes_per_step: tuple[int, ...]
    requested_bytes_per_step: tuple[int, ...]
    resident_bytes: int
    blocks: tuple[Block, ...]
    segments: tuple[Segment, ...]

    @property
    def fragmentation_bytes(self) -> int:
        """Reserved bytes never used at the allocated peak: ``peak_reserved - peak_allocated``."""
        return self.peak_reserved_bytes - self.peak_allocated_bytes


class _Blk:
    """A mutable block of a segment (internal; a doubly linked list per segment)."""

    __slots__ = ("address", "allocated", "next", "prev", "segment", "size", "small")

    def __init__(self, address: int, size: int, segment: int, small: bool) -> None:
        self.address = address
        self.size = size
        self.segment = segment
        self.small = small
        self.allocated = False
        self.prev: _Blk | None = None
        self.next: _Blk | None = None


class _Pool:
    """Free blocks of one pool ordered by ``(size, address)`` (the allocator's set)."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.blocks: dict[tuple[int, int], _Blk] = {}

    def insert(self, b: _Blk) -> None:
        key = (b.size, b.address)
        bisect.insort(self.keys, key)
        self.blocks[key] = b

    def remove(self, b: _Blk) -> None:
        key = (b.size, b.address)
        i = bisect.bisect_left(self.keys, key)
        assert i < len(self.keys)
        assert self.keys[i] == key
        del self.keys[i]
        del self.blocks[key]

    def best_fit(self, size: int) -> _Blk | None:
        i = bisect.bisect_left(self.keys, (size, -1))
        if i == len(self.keys):
            return None
        key = self.keys.pop(i)
        return self.blocks.pop(key)


class _Allocator:
    def __init__(self, config: AllocatorConfig) -> None:
        self.cfg = config
        self.small = _Pool()
        self.large = _Pool()
        self.segments: list[Segment] = []
        self.next_address = 0
        self.allocated = 0
        self.reserved = 0
        self.requested = 0

    def malloc(self, request: int, step: int) -> _Blk:
        cfg = self.cfg
        small = request <= cfg.small_size_bytes
        pool = self.small if small else self.large
        b = pool.best_fit(request)
        if b is None:
            seg_size = cfg.segment_bytes(request)
            seg = Segment(len(self.segments), self.next_address, seg_size,
                          "small" if small else "large", step)
            self.segments.append(seg)
            self.next_address += seg_size
            self.reserved += seg_size
            b = _Blk(seg.address, seg_size, seg.index, small)
        remaining = b.size - request
        split = remaining >= cfg.min_block_bytes if small else remaining > cfg.small_size_bytes
        if split:
            rest = _Blk(b.address + request, remaining, b.segment, small)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = request
            pool.insert(rest)
        b.allocated = True
        self.allocated += b.size
        self.requested += request
        return b

    def free(self, b: _Blk, request: int) -> None:
        pool = self.small if b.small else self.large
        b.allocated = False
        self.allocated -= b.size
        self.requested -= request
        p = b.prev
        if p is not None and not p.allocated:
            pool.remove(p)
            p.size += b.size
            p.next = b.next
            if b.next is not None:
                b.next.prev = p
            b = p
        nx = b.next
        if nx is not None and not nx.allocated:
            pool.remove(nx)
            b.size += nx.size
            b.next = nx.next
            if nx.next is not None:
                nx.next.prev = b
        pool.insert(b)


def simulate_allocator(
    graph: Graph,
    order: Sequence[OpId] | None = None,
    *,
    config: AllocatorConfig | None = None,
) -> AllocatorResult:
    """Replay ``order`` (program order when ``None``) through the caching-allocator model.

    Parameters
    ----------
    graph : Graph
        The graph.
    order : sequence of OpId, optional
        A permutation of the ops (validity is not checked; see ``check_order``).
    config : AllocatorConfig, optional
        Allocator constants; the c10 defaults when omitted.

    Returns
    -------
    AllocatorResult

    Raises
    ------
    GraphError
        If ``order`` is not a permutation of the graph's ops.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> r = simulate_allocator(diamond())
    >>> r.allocated_bytes_per_step, r.peak_reserved_bytes
    ((512, 1024, 1536, 1536), 2097152)
    >>> [(b.tensor_id, b.address) for b in r.blocks]
    [('a', 0), ('b', 512), ('c', 1024), ('d', 0)]
    """
    require_type(graph, Graph, "simulate_allocator: graph", ConfigError)
    cfg = config if config is not None else AllocatorConfig()
    if order is None:
        order = graph.op_ids
    lts = lifetimes(graph, order)
    n = len(order)
    alloc = _Allocator(cfg)
    out_blocks: list[Block] = []
    for tid in graph.resident_ids:
        req = cfg.round_request(graph.tensors[tid].size_bytes)
        if req:
            b = alloc.malloc(req, -1)
            out_blocks.append(Block(tid, b.segment, b.address, b.size, req, 0, n, True))
    resident = alloc.allocated
    peak_alloc, peak_step, peak_req = alloc.allocated, -1, alloc.requested
    frees_after: list[list[TensorId]] = [[] for _ in range(n)]
    for tid, lt in lts.items():
        if lt.end - 1 < n:
            frees_after[lt.end - 1].append(tid)
    live: dict[TensorId, tuple[_Blk, int]] = {}
    per_alloc: list[int] = []
    per_res: list[int] = []
    per_req: list[int] = []
    for step, op in enumerate(order):
        for tid in graph.storages_created(op):
            req = cfg.round_request(graph.tensors[tid].size_bytes)
            if req == 0:
                continue
            b = alloc.malloc(req, step)
            live[tid] = (b, req)
            lt = lts[tid]
            out_blocks.append(Block(tid, b.segment, b.address, b.size, req, lt.start, lt.end))
        per_alloc.append(alloc.allocated)
        per_res.append(alloc.reserved)
        per_req.append(alloc.requested)
        if alloc.allocated > peak_alloc:
            peak_alloc, peak_step = alloc.allocated, step
        peak_req = max(peak_req, alloc.requested)
        for tid in frees_after[step]:
            if tid in live:
                b, req = live.pop(tid)
                alloc.free(b, req)
    _logger.debug("allocator model: %d segments, peak allocated %d B, reserved %d B",
                  len(alloc.segments), peak_alloc, alloc.reserved)
    return AllocatorResult(
        peak_allocated_bytes=peak_alloc,
        peak_reserved_bytes=alloc.reserved,
        peak_requested_bytes=peak_req,
        peak_step=peak_step,
        allocated_bytes_per_step=tuple(per_alloc),
        reserved_bytes_per_step=tuple(per_res),
        requested_bytes_per_step=tuple(per_req),
        resident_bytes=resident,
        blocks=tuple(out_blocks),
        segments=tuple(alloc.segments),
    )
