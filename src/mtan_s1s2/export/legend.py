"""Class names beside a class map, for GDAL, QGIS and people.

rasterio cannot write GDAL category names, so they go into the files GDAL and QGIS read
next to a raster:

* ``<map>.tif.aux.xml``: GDAL's PAM sidecar with the band's ``CategoryNames`` (``gdalinfo``
  lists them, QGIS's "Paletted/Unique values" renderer labels the classes with them);
* ``<map>.qml``: a QGIS style (paletted renderer: value, colour, class name), loaded by
  QGIS as the layer's default style;
* ``legend.csv``: ``value, class, color``.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from mtan_s1s2.export.palette import class_colors, hex_color


def write_aux_xml(path: Path, class_names: Sequence[str], nodata: int) -> Path:
    """GDAL PAM sidecar ``<path>.aux.xml`` naming the classes of band 1 (index = value)."""
    names = list(class_names) + [""] * max(0, int(nodata) + 1 - len(class_names))
    if int(nodata) < len(names):
        names[int(nodata)] = "nodata"
    cats = "\n".join(f"      <Category>{escape(n)}</Category>" for n in names)
    xml = (
        '<PAMDataset>\n  <PAMRasterBand band="1">\n    <CategoryNames>\n'
        f"{cats}\n    </CategoryNames>\n  </PAMRasterBand>\n</PAMDataset>\n"
    )
    out = path.with_name(path.name + ".aux.xml")
    out.write_text(xml)
    return out


def write_qml(path: Path, class_names: Sequence[str], ignore_index: int | None) -> Path:
    """QGIS style ``<stem>.qml``: a paletted renderer with every class's colour and name."""
    colors = class_colors(class_names, ignore_index)
    entries = "\n".join(
        f'        <paletteEntry value="{i}" color="{hex_color(c)}" alpha="255" label={quoteattr(n)}/>'
        for i, (n, c) in enumerate(zip(class_names, colors, strict=True))
        if i != ignore_index
    )
    qml = (
        "<!DOCTYPE qgis PUBLIC 'http://mrcc.com/qgis.dtd' 'SYSTEM'>\n"
        '<qgis version="3.28" styleCategories="AllStyleCategories">\n  <pipe>\n'
        '    <rasterrenderer type="paletted" band="1" opacity="1" alphaBand="-1">\n'
        "      <rasterTransparency/>\n      <colorPalette>\n"
        f"{entries}\n      </colorPalette>\n    </rasterrenderer>\n  </pipe>\n</qgis>\n"
    )
    out = path.with_suffix(".qml")
    out.write_text(qml)
    return out


def write_legend_csv(path: Path, class_names: Sequence[str], ignore_index: int | None, nodata: int) -> Path:
    """``value, class, color`` of every predicted class, and the no-data value."""
    colors = class_colors(class_names, ignore_index)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["value", "class", "color"])
        for i, (n, c) in enumerate(zip(class_names, colors, strict=True)):
            if i != ignore_index:
                w.writerow([i, n, hex_color(c)])
        w.writerow([int(nodata), "nodata (no valid observation)", ""])
    return path


__all__ = ["write_aux_xml", "write_legend_csv", "write_qml"]
