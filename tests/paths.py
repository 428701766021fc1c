"""Where the tests find the repository, its committed graphs and their own data files."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA_DIR", "REPO", "SAMPLE_DIR"]

#: The repository root.
REPO = Path(__file__).resolve().parents[1]
#: The committed sample graphs (``sample_graphs/``).
SAMPLE_DIR = REPO / "sample_graphs"
#: Files the tests read: golden traces, old-format graphs, plan fingerprints.
DATA_DIR = REPO / "tests" / "data"
