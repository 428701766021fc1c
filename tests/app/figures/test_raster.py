"""The NumPy rasteriser of the layout overview."""

from __future__ import annotations

import numpy as np

from app.figures.raster import paint_index, rasterize


def test_rasterize_paints_kinds_and_window() -> None:
    colors = np.array([[255, 0, 0, 255], [0, 0, 255, 255]], np.uint8)
    x0, x1 = np.array([0, 5]), np.array([5, 10])
    y0, y1 = np.array([0, 5]), np.array([5, 10])
    img = rasterize(x0, x1, y0, y1, np.array([0, 1]), colors, (0, 10, 0, 10), 10, 10)
    assert (img[:5, :5] == colors[0]).all()
    assert (img[5:, 5:] == colors[1]).all()
    assert (img[:5, 5:, 3] == 0).all()
    # a rectangle outside the window paints nothing; a tiny one still gets one pixel
    img2 = rasterize(np.array([20, 3]), np.array([30, 3.01]), np.array([0, 2]),
                     np.array([5, 2.01]), np.array([0, 0]), colors, (0, 10, 0, 10), 10, 10)
    assert int(img2[..., 3].astype(bool).sum()) == 1


def test_paint_index_puts_small_storages_on_top() -> None:
    idx = paint_index(np.array([0, 4]), np.array([10, 5]), np.array([0, 4]),
                      np.array([10, 5]), (0, 10, 0, 10), 10, 10)
    assert idx[4, 4] == 1
    assert (idx == 0).sum() == 99


def test_outline_keeps_neighbours_of_one_kind_apart() -> None:
    colors = np.array([[255, 0, 0, 255]], np.uint8)
    white = np.array([255, 255, 255, 255], np.uint8)
    img = rasterize(np.array([0, 5, 0]), np.array([5, 10, 1]), np.array([0, 0, 8]),
                    np.array([5, 5, 9]), np.array([0, 0, 0]), colors, (0, 10, 0, 10), 10, 10,
                    outline=white)
    assert (img[0, :5] == white).all()
    assert (img[0, 5:] == white).all()
    assert (img[1:4, 1:4] == colors[0]).all()
    assert (img[1:4, 6:9] == colors[0]).all()
    assert (img[8, 0] == colors[0]).all()  # too small for a border: all colour
