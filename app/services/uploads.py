"""Uploaded files, streamed to disk: the browser posts a file's bytes to the app's upload
route, which writes them here under a random token; the callback that reads the file takes
them back by that token (once) and parses them.

No file is ever held in the page (no base64 data URL in a callback): the browser checks the
size before it sends anything (``assets/upload.js``), and the route stops reading at the cap.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import IO

from app.core.formatting import fmt_bytes
from app.core.state import cache_dir
from roam_core.base.errors import RoamError

__all__ = ["CHUNK_BYTES", "UploadError", "read_upload", "save_upload", "upload_dir"]

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
