"""What a ``dcc.Upload`` delivers: a base64 data URL, size-capped before it is decoded."""

from __future__ import annotations

import base64
import binascii

from app.core.formatting import fmt_bytes
from roam_core.base.errors import GraphError

__all__ = ["decode_upload"]


def decode_upload(contents: str, max_bytes: int) -> bytes:
    """Bytes of a ``dcc.Upload`` data URL, refusing files over ``max_bytes``.

    Raises
    ------
    GraphError
        An empty or damaged upload, or one over the limit.
    """
    head, _, b64 = (contents or "").partition(",")
    if not head.startswith("data:") or not b64:
        raise GraphError("the file arrived empty or damaged in the upload; drop it again")
    if len(b64) * 3 // 4 > max_bytes:
        raise GraphError(f"file is larger than the upload limit ({fmt_bytes(max_bytes)})")
    try:
        return base64.b64decode(b64, validate=False)
    except (binascii.Error, ValueError) as e:
        raise GraphError(f"upload is not valid base64: {e}") from e
