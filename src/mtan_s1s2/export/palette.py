"""One colour per class, and the GDAL colour table of a class map.

Classes get the colours of a qualitative palette (Paul Tol's "muted" and "light" schemes,
colour-blind safe) in index order; class 0 (``unlabelled``, never predicted) is grey, and
the no-data value is transparent.
"""

from __future__ import annotations

from collections.abc import Sequence

RGB = tuple[int, int, int]

QUALITATIVE: tuple[RGB, ...] = (
    (51, 34, 136), (136, 204, 238), (68, 170, 153), (17, 119, 51), (153, 153, 51), (221, 204, 119),
    (204, 102, 119), (136, 34, 85), (170, 68, 153), (238, 136, 102), (255, 170, 187), (153, 221, 255),
    (187, 204, 51), (170, 170, 0), (119, 170, 221), (238, 221, 136), (68, 187, 153), (221, 221, 221),
)  # fmt: skip
"""Paul Tol's muted, then light, qualitative colours."""

UNLABELLED_RGB: RGB = (160, 160, 160)


def class_colors(class_names: Sequence[str], ignore_index: int | None = 0) -> list[RGB]:
    """``(r, g, b)`` of every class, index = class."""
    out: list[RGB] = []
    k = 0
    for i in range(len(class_names)):
        if i == ignore_index:
            out.append(UNLABELLED_RGB)
            continue
        out.append(QUALITATIVE[k % len(QUALITATIVE)])
        k += 1
    return out


def colormap(class_names: Sequence[str], ignore_index: int | None, nodata: int) -> dict[int, tuple[int, int, int, int]]:
    """GDAL colour table (``rasterio``'s ``write_colormap``): class -> RGBA, no-data transparent."""
    table = {i: (*rgb, 255) for i, rgb in enumerate(class_colors(class_names, ignore_index))}
    table[int(nodata)] = (0, 0, 0, 0)
    return table


def hex_color(rgb: RGB) -> str:
    """``#rrggbb``."""
    return "#{:02x}{:02x}{:02x}".format(*rgb)


__all__ = ["QUALITATIVE", "class_colors", "colormap", "hex_color"]
