"""A PNG quick-look of a class map with its legend (matplotlib).

The map is read from the COG at a reduced size (at most ``max_px`` on its longer side, from
the overviews: nearest neighbour), so a 10980 x 10980 tile costs no more than a patch. No-data
pixels are white; the legend lists every predicted class with its colour and share of the
valid pixels.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import rasterio
from rasterio.enums import Resampling
from rasterio.errors import NotGeoreferencedWarning

from mtan_s1s2.export.cog import NODATA
from mtan_s1s2.export.palette import class_colors


def write_quicklook(
    class_map: str | Path,
    path: str | Path,
    class_names: Sequence[str],
    ignore_index: int | None = 0,
    title: str = "",
    max_px: int = 1024,
) -> Path:
    """Draw ``class_map`` (a GeoTIFF written by :class:`~mtan_s1s2.export.cog.MapWriter`) to a PNG.

    Args:
        class_map: The class map.
        path: The PNG to write.
        class_names: Class names, index = value.
        ignore_index: The unlabelled class (left out of the legend).
        title: Figure title (scene name, CRS).
        max_px: Longer side of the drawn map, pixels.

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with rasterio.open(class_map) as src:
            scale = max(1.0, max(src.height, src.width) / max_px)
            shape = (max(1, round(src.height / scale)), max(1, round(src.width / scale)))
            data = src.read(1, out_shape=shape, resampling=Resampling.nearest)
            crs = src.crs
    colors = [(*np.asarray(c) / 255.0, 1.0) for c in class_colors(class_names, ignore_index)]
    k = len(class_names)
    rgba = np.ones((*data.shape, 4))
    valid = data != NODATA
    rgba[valid] = np.asarray(colors)[np.clip(data[valid], 0, k - 1)]
    counts = np.bincount(data[valid].ravel(), minlength=k)[:k]
    total = max(int(valid.sum()), 1)
    fig, ax = plt.subplots(figsize=(8, 6.5))
    ax.imshow(rgba, interpolation="nearest", cmap=ListedColormap(colors))
    ax.set_xticks([])
    ax.set_yticks([])
    where = f"{crs.to_string()}" if crs is not None else "not georeferenced"
    ax.set_title(f"{title} ({where})" if title else where, fontsize=10)
    handles = [
        Patch(facecolor=colors[i], edgecolor="black", label=f"{class_names[i]} ({100 * counts[i] / total:.1f} %)")
        for i in range(k)
        if i != ignore_index
    ]
    if (~valid).any():
        handles.append(Patch(facecolor="white", edgecolor="black", label="no valid observation"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


__all__ = ["write_quicklook"]
