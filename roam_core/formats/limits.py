"""Size limits on the files roam reads: graphs, plans, DSA problems and snapshots.

Every loader refuses an input over a limit with a one-line error naming the limit and the
environment variable that raises it, before the input costs more than a small multiple of
the limit.  The defaults accept the largest graphs roam plans (GPT-2 360 layers) with room
to spare; change them per call (``load_graph(path, limits=...)``) or per process with the
environment variables below (read when :meth:`FileLimits.from_env` is called, i.e. on every
load that is not given limits).

=====================  ==================================  ============================
limit                  environment variable                default
=====================  ==================================  ============================
``max_file_bytes``     ``ROAM_MAX_FILE_BYTES``             1 GiB (as stored on disk)
``max_json_bytes``     ``ROAM_MAX_JSON_BYTES``             2 GiB (after gunzip)
``max_ops``            ``ROAM_MAX_OPS``                    4,000,000
``max_storages``       ``ROAM_MAX_STORAGES``               8,000,000
``max_storage_bytes``  ``ROAM_MAX_STORAGE_BYTES``          2**50 (1 PiB) per storage
``max_total_bytes``    ``ROAM_MAX_TOTAL_BYTES``            2**56 (64 PiB) all storages
``max_id_chars``       ``ROAM_MAX_ID_CHARS``               4096 per id or name
=====================  ==================================  ============================

Integers in files are also refused from :data:`MAX_INT` (2**62) up, whatever the limits:
sums of such numbers still fit the 64-bit integers of NumPy and of the simulator.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace

from roam_core.base.checks import at_least
from roam_core.base.errors import ConfigError

__all__ = ["MAX_INT", "FileLimits"]

#: Every integer a file holds must be below this (sizes, offsets, FLOPs, steps).
MAX_INT = 2**62

_ENV = {
    "max_file_bytes": "ROAM_MAX_FILE_BYTES",
    "max_json_bytes": "ROAM_MAX_JSON_BYTES",
    "max_ops": "ROAM_MAX_OPS",
    "max_storages": "ROAM_MAX_STORAGES",
    "max_storage_bytes": "ROAM_MAX_STORAGE_BYTES",
    "max_total_bytes": "ROAM_MAX_TOTAL_BYTES",
    "max_id_chars": "ROAM_MAX_ID_CHARS",
}


@dataclass(frozen=True, slots=True)
class FileLimits:
    """Limits on one loaded file (see the module docstring for the defaults).

    Parameters
    ----------
    max_file_bytes : int
        Bytes of the file as stored (compressed or not).
    max_json_bytes : int
        Bytes of its text after gunzip.
    max_ops, max_storages : int
        Ops and storages of a graph.
    max_storage_bytes : int
        ``size_bytes`` of one storage.
    max_total_bytes : int
        Sum of ``size_bytes`` over a graph's storages.
    max_id_chars : int
        Characters of one id or name.
    """

    max_file_bytes: int = 1 << 30
    max_json_bytes: int = 2 << 30
    max_ops: int = 4_000_000
    max_storages: int = 8_000_000
    max_storage_bytes: int = 1 << 50
    max_total_bytes: int = 1 << 56
    max_id_chars: int = 4096

    def __post_init__(self) -> None:
        for f in fields(self):
            at_least(f.name, getattr(self, f.name), 1)
            if getattr(self, f.name) > MAX_INT:
                raise ConfigError(f"{f.name} must be below 2**62")

    @classmethod
    def from_env(cls) -> FileLimits:
        """The defaults, with every ``ROAM_MAX_*`` variable that is set applied.

        Raises
        ------
        ConfigError
            A variable that is not a positive integer (named).
        """
        out = cls()
        for name, var in _ENV.items():
            text = os.environ.get(var)
            if text is None or not text.strip():
                continue
            try:
                value = int(text.strip())
            except ValueError:
                raise ConfigError(f"{var}={text!r} is not an integer") from None
            try:
                out = replace(out, **{name: value})
            except ConfigError as e:
                raise ConfigError(f"{var}: {e}") from None
        return out

    @staticmethod
    def env_name(limit: str) -> str:
        """The environment variable of a limit (``"max_ops"`` -> ``"ROAM_MAX_OPS"``)."""
        return _ENV[limit]
