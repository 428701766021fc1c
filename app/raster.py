"""NumPy rasteriser for layout rectangles (the level-of-detail overview image).

One 2-D difference array per tensor kind counts how many rectangles cover each pixel; a
pixel takes the colour of the last kind that covers it.  Cost is O(rectangles + pixels x
kinds) with no Python loop over rectangles.
"""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

__all__ = ["png_data_uri", "rasterize"]


def rasterize(
    x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray, kind: np.ndarray,
    colors: np.ndarray, window: tuple[float, float, float, float], width: int, height: int,
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
    xa, xb, ya, yb = window
    sx = width / max(xb - xa, 1e-12)
    sy = height / max(yb - ya, 1e-12)
    px0 = np.clip(np.floor((x0 - xa) * sx), 0, width).astype(np.int64)
    px1 = np.clip(np.ceil((x1 - xa) * sx), 0, width).astype(np.int64)
    py0 = np.clip(np.floor((y0 - ya) * sy), 0, height).astype(np.int64)
    py1 = np.clip(np.ceil((y1 - ya) * sy), 0, height).astype(np.int64)
    # at least one pixel wherever a rectangle is inside the window
    px1 = np.maximum(px1, np.minimum(px0 + 1, width))
    py1 = np.maximum(py1, np.minimum(py0 + 1, height))
    keep = (px1 > px0) & (py1 > py0)
    img = np.zeros((height, width, 4), np.uint8)
    for k in np.unique(kind[keep]):
        m = keep & (kind == k)
        diff = np.zeros((height + 1, width + 1), np.int32)
        np.add.at(diff, (py0[m], px0[m]), 1)
        np.add.at(diff, (py0[m], px1[m]), -1)
        np.add.at(diff, (py1[m], px0[m]), -1)
        np.add.at(diff, (py1[m], px1[m]), 1)
        cover = diff.cumsum(0).cumsum(1)[:height, :width] > 0
        img[cover] = colors[int(k)]
    return img


def png_data_uri(img: np.ndarray) -> str:
    """A ``data:image/png;base64,...`` URI of an RGBA image whose row 0 is the bottom."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(img[::-1])).save(buf, "PNG", optimize=False)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
