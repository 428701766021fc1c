"""NumPy rasteriser for layout rectangles (the level-of-detail overview image).

Rectangles are painted largest first, so a small storage stays visible (at least one pixel)
even when a big neighbour shares its pixel.  The cost is one NumPy slice assignment per
rectangle: about 20 ms for GPT2-XL's 6.6k storages, 0.1 s for 50k.
"""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

__all__ = ["paint_index", "png_data_uri", "rasterize"]


def rasterize(
    x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray, kind: np.ndarray,
    colors: np.ndarray, window: tuple[float, float, float, float], width: int, height: int,
    outline: np.ndarray | None = None,
) -> np.ndarray:
    """Paint rectangles ``[x0, x1) x [y0, y1)`` into an RGBA image of the ``window``.

    Parameters
    ----------
    x0, x1, y0, y1 : ndarray
        Rectangle corners in data units.
    kind : ndarray of int
        Colour index of each rectangle (into ``colors``).
    colors : ndarray, shape (k, 4), uint8
        RGBA colour per kind.
    window : (xa, xb, ya, yb)
        The data window mapped to the image.
    width, height : int
        Image size in pixels.
    outline : ndarray, shape (4,), uint8, optional
        RGBA of a one-pixel border drawn round every rectangle at least 4 pixels wide and
        high (as the vector view's white edges), so neighbours of one kind stay apart.

    Returns
    -------
    ndarray, shape (height, width, 4), uint8
        Row 0 is the *bottom* of the window (flip before saving as PNG).

    Examples
    --------
    >>> c = np.array([[255, 0, 0, 255]], np.uint8)
    >>> img = rasterize(np.array([0]), np.array([5]), np.array([0]), np.array([5]),
    ...                 np.array([0]), c, (0, 10, 0, 10), 10, 10)
    >>> int(img[..., 3].astype(bool).sum())
    25
    """
    img = np.zeros((height, width, 4), np.uint8)
    for a, b, c, d, i in _boxes(x0, x1, y0, y1, window, width, height):
        if outline is not None and b - a >= 4 and d - c >= 4:
            img[a:b, c:d] = outline
            img[a + 1:b - 1, c + 1:d - 1] = colors[kind[i]]
        else:
            img[a:b, c:d] = colors[kind[i]]
    return img


def paint_index(
    x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray,
    window: tuple[float, float, float, float], width: int, height: int,
) -> np.ndarray:
    """Index of the rectangle shown in each cell (``-1``: none), smallest on top.

    Examples
    --------
    >>> paint_index(np.array([0, 2]), np.array([4, 3]), np.array([0, 0]), np.array([4, 1]),
    ...             (0, 4, 0, 4), 4, 1).tolist()
    [[0, 0, 1, 0]]
    """
    out = np.full((height, width), -1, np.int32)
    for a, b, c, d, i in _boxes(x0, x1, y0, y1, window, width, height):
        out[a:b, c:d] = i
    return out


def _boxes(x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray,
           window: tuple[float, float, float, float], width: int, height: int
           ) -> list[list[int]]:
    """Pixel boxes ``[row0, row1, col0, col1, index]``, largest rectangle first."""
    xa, xb, ya, yb = window
    sx = width / max(xb - xa, 1e-12)
    sy = height / max(yb - ya, 1e-12)
    px0 = np.clip(np.floor((x0 - xa) * sx), 0, width).astype(np.int64)
    px1 = np.clip(np.ceil((x1 - xa) * sx), 0, width).astype(np.int64)
    py0 = np.clip(np.floor((y0 - ya) * sy), 0, height).astype(np.int64)
    py1 = np.clip(np.ceil((y1 - ya) * sy), 0, height).astype(np.int64)
    # at least one pixel wherever a rectangle is inside the window
    inside = (x1 > xa) & (x0 < xb) & (y1 > ya) & (y0 < yb)
    px1 = np.maximum(px1, np.minimum(px0 + 1, width))
    py1 = np.maximum(py1, np.minimum(py0 + 1, height))
    keep = np.nonzero(inside & (px1 > px0) & (py1 > py0))[0]
    area = (np.asarray(x1, float) - x0) * (np.asarray(y1, float) - y0)
    keep = keep[np.argsort(-area[keep], kind="stable")]
    boxes: list[list[int]] = np.c_[py0, py1, px0, px1, np.arange(len(px0))][keep].tolist()
    return boxes


def png_data_uri(img: np.ndarray) -> str:
    """A ``data:image/png;base64,...`` URI of an RGBA image whose row 0 is the bottom."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(img[::-1])).save(buf, "PNG", optimize=False)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
