"""Source lines while tracing: the user-code frame that made every traced op.

Used by :func:`roam_core.trace.trace_fx`.  :class:`SourceRecorder` is a dispatch mode entered
inside the traced step (beside :mod:`roam_core.trace.guards`): for every aten op it walks the
Python stack (``sys._getframe``, no traceback objects) to the innermost frame outside torch
and outside roam's own tracing and runtime code, and tags the FX nodes the op created with
``node.meta["roam_source"]`` = ``"path:line in function"``.  The zoo's model files are user
code.  Nodes are tagged lazily, as :class:`~roam_core.trace.modules.ModuleTracker` tags
modules: the nodes appended since the last op are tagged after each op.

Backward ops have no user frame of their own (the autograd engine runs them): they take the
source of the forward op whose autograd node they run, matched by autograd sequence number
(:meth:`SourceRecorder.source_of_seq`; the module tracker tags every backward node with the
sequence number of its autograd node).  A user-written ``autograd.Function.backward`` keeps
its own frame.  Optimizer ops run inside ``torch.optim``: they get no source (``""``).

Paths are written relative to the current folder when the file is under it, else relative to
the ``sys.path`` entry holding it (``transformers/models/gpt2/modeling_gpt2.py``), else as the
file's name: a graph file never holds an absolute path of the machine that traced it.
"""

from __future__ import annotations

import os
import sys
from types import CodeType
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["MAX_SOURCE_CHARS", "META_KEY", "SourceRecorder", "node_sources", "relative_path"]

#: ``node.meta`` key holding the ``"path:line in function"`` of a traced FX node.
META_KEY = "roam_source"
#: Longest source string kept (longer ones keep their end: the file name and line).
MAX_SOURCE_CHARS = 240

_ROAM = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Folders whose frames are never the user's: torch itself, roam's tracer and runtime.
_SKIP_DIRS = tuple(os.path.join(d, "") for d in (
    os.path.dirname(os.path.abspath(torch.__file__)),
    os.path.join(_ROAM, "trace"), os.path.join(_ROAM, "runtime")))


def relative_path(filename: str) -> str:
    """``filename`` as written in a graph: relative to the current folder or ``sys.path``."""
    path = os.path.abspath(filename)
    cwd = os.path.join(os.getcwd(), "")
    if path.startswith(cwd):
        return path[len(cwd):]
    roots = sorted((os.path.join(os.path.abspath(p), "") for p in sys.path if p),
                   key=len, reverse=True)
    for root in roots:
        if path.startswith(root):
            return path[len(root):]
    return os.path.basename(path)


class SourceRecorder(TorchDispatchMode):
    """Dispatch mode tagging every traced FX node with its user-code frame."""

    def __init__(self, stop: CodeType) -> None:
        super().__init__()
        self.stop = stop  # the traced step's code: the walk never goes above it
        #: record sources (the tracer turns it off for the backward and the optimizer)
        self.enabled = True
        self._files: dict[str, str | None] = {}  # code filename -> written path, None: skip
        self._graph: Any = None
        self._last: Any = None
        get_seq = getattr(torch.autograd, "_get_sequence_nr", None)
        self._get_seq = get_seq if callable(get_seq) else None
        #: autograd sequence number -> source of the first forward op dispatched with it
        self.seq_source: dict[int, str] = {}

    def _written(self, filename: str) -> str | None:
        if filename not in self._files:
            skip = filename.startswith("<") or os.path.abspath(filename).startswith(_SKIP_DIRS)
            self._files[filename] = None if skip else relative_path(filename)
        return self._files[filename]

    def user_frame(self) -> str:
        """The innermost user frame running now, ``"path:line in function"`` (``""``: none)."""
        frame: Any = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code is self.stop:
                return ""
            path = self._written(code.co_filename)
            if path is not None:
                text = f"{path}:{frame.f_lineno} in {code.co_name}"
                return text[-MAX_SOURCE_CHARS:]
            frame = frame.f_back
        return ""

    def source_of_seq(self, seq: int) -> str:
        """Source of the forward op whose autograd node has sequence number ``seq``."""
        return self.seq_source.get(seq, "")

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        source = self.user_frame() if self.enabled else ""
        if source and self._get_seq is not None:
            # below autograd: the op's autograd node (if any) took number seq - 1
            self.seq_source.setdefault(int(self._get_seq()) - 1, source)
        out = func(*args, **(kwargs or {}))
        self._tag(source)
        return out

    def _tag(self, source: str) -> None:
        mode = get_proxy_mode()
        if mode is None:
            return
        graph = mode.tracer.graph
        if graph is not self._graph:
            self._graph, self._last = graph, None
        node = next(iter(graph.nodes), None) if self._last is None else self._last.next
        while node is not None and node.op != "root":
            if source:
                node.meta.setdefault(META_KEY, source)
            self._last = node
            node = node.next


def node_sources(gm: Any, recorder: SourceRecorder | None, seq_key: str) -> dict[str, str]:
    """FX node name -> source line; backward nodes without one take their forward op's.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        The traced step.
    recorder : SourceRecorder or None
        The recorder that ran while tracing (``None``: no sources).
    seq_key : str
        ``node.meta`` key of the autograd sequence number of a backward node.
    """
    if recorder is None:
        return {}
    out: dict[str, str] = {}
    for n in gm.graph.nodes:
        src = str(n.meta.get(META_KEY, ""))
        if not src and seq_key in n.meta:
            src = recorder.source_of_seq(int(n.meta[seq_key]))
        if src:
            out[n.name] = src
    return out
