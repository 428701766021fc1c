"""Uploaded files, streamed to disk: the browser posts a file's bytes to the app's upload
route, which writes them here under a random token; the callback that reads the file takes
them back by that token (once) and parses them.

No file is ever held in the page (no base64 data URL in a callback): the browser checks the
size before it sends anything (``assets/upload.js``), and the route stops reading at the cap.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import uuid
from pathlib import Path
from typing import IO

from app.core.formatting import fmt_bytes
from app.core.state import cache_dir
from roam_core.base.errors import GraphError, RoamError

__all__ = ["CHUNK_BYTES", "UploadError", "decode_upload", "read_upload", "save_upload",
           "upload_dir"]

#: Bytes read from the request per chunk.
CHUNK_BYTES = 1 << 20
_TOKEN = re.compile(r"^[0-9a-f]{32}$")


class UploadError(RoamError):
    """An upload that cannot be read: over the limit, empty, or gone."""


def upload_dir() -> Path:
    """Where uploads wait to be read (inside the app's cache directory)."""
    d = cache_dir() / "uploads"
    d.mkdir(parents=True, exist_ok=True)
    return d


def save_upload(stream: IO[bytes], max_bytes: int, name: str = "file") -> str:
    """Copy ``stream`` to disk, refusing more than ``max_bytes``; returns its token.

    Raises
    ------
    UploadError
        Over the limit (nothing is kept) or empty.

    Examples
    --------
    >>> import io
    >>> token = save_upload(io.BytesIO(b"abc"), 10)
    >>> read_upload(token)
    b'abc'
    >>> save_upload(io.BytesIO(b"x" * 11), 10, "big.json")
    Traceback (most recent call last):
    ...
    app.services.uploads.UploadError: big.json is larger than the upload limit (10 B)
    """
    token = uuid.uuid4().hex
    path = upload_dir() / token
    part = path.with_suffix(".part")
    size = 0
    try:
        with part.open("wb") as out:
            while chunk := stream.read(CHUNK_BYTES):
                size += len(chunk)
                if size > max_bytes:
                    raise UploadError(f"{name} is larger than the upload limit "
                                      f"({fmt_bytes(max_bytes)})")
                out.write(chunk)
        if size == 0:
            raise UploadError(f"{name} arrived empty; drop it again")
        part.rename(path)
    finally:
        part.unlink(missing_ok=True)
    return token


def read_upload(token: str | None) -> bytes:
    """The bytes saved under ``token``, removed from disk (an upload is read once).

    Raises
    ------
    UploadError
        An unknown or already read token.
    """
    if not token or not _TOKEN.match(str(token)):
        raise UploadError("the upload is incomplete or damaged; drop the file again")
    path = upload_dir() / str(token)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UploadError("the upload is no longer on the server; drop the file again") \
            from None
    os.unlink(path)
    return data


def decode_upload(contents: str, max_bytes: int) -> bytes:
    """Bytes of a small ``dcc.Upload`` data URL (a Hugging Face ``config.json``), refusing
    files over ``max_bytes``; graph files stream through :func:`save_upload` instead.

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
