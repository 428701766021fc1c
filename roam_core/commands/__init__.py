"""One module per ``roam`` sub-command; each exposes ``register(subparsers)``.

Modules here must import quickly: heavy imports (torch, ortools, dash) go inside the
handler function.  Shared argument types live in :mod:`~roam_core.commands.arg_types`.
"""

from roam_core.commands.arg_types import (
    budget_arg,
    non_negative_float,
    positive_float,
    positive_int,
    size_bytes,
)

__all__ = ["budget_arg", "non_negative_float", "positive_float", "positive_int", "size_bytes"]
