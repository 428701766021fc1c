"""Where the app's data folders are: inside the installed package, else the source checkout."""

from __future__ import annotations

from pathlib import Path

__all__ = ["ASSETS", "SAMPLE_DIR", "data_dir"]


def data_dir(name: str) -> Path:
    """The app's data folder ``name`` (``assets``, ``sample_graphs``): inside the installed
    package (a wheel carries copies under ``app/``), else the source checkout's top level."""
    here = Path(__file__).resolve().parents[1]  # app/
    packaged = here / name
    return packaged if packaged.is_dir() else here.parent / name


#: CSS and JS that Dash serves (offline: no CDN).
ASSETS = data_dir("assets")
#: The committed sample graphs offered by the Graph card.
SAMPLE_DIR = data_dir("sample_graphs")
