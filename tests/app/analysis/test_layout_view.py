"""The layout arrays and the per-step bytes."""

from __future__ import annotations

import numpy as np

from app.analysis import layout_view
from roam_core.model.samples import tiny_train_step
from roam_core.oracle.simulate import simulate


def test_step_bytes_balance() -> None:
    g = tiny_train_step()
    alloc, freed = layout_view.step_bytes(g, g.op_ids, 1)
    live = np.asarray(simulate(g, g.op_ids, alignment_bytes=1).live_bytes)
    # bytes live while step i runs = allocated so far - freed before step i
    assert list(np.cumsum(alloc) - np.concatenate([[0], np.cumsum(freed)[:-1]])) == list(live)
