"""Georeferenced outputs of prediction: Cloud-Optimised GeoTIFF maps, legends, PNG quick-looks.

* :mod:`~mtan_s1s2.export.palette`: one colour per class, as a GDAL colour table.
* :mod:`~mtan_s1s2.export.cog`: :class:`MapWriter` writes a class map (uint8, colour table,
  class names), optional per-class probabilities and a confidence band, tile by tile, as
  COGs with the CRS and transform of the input grid.
* :mod:`~mtan_s1s2.export.legend`: the class names beside the maps (GDAL ``.aux.xml``
  categories, a QGIS ``.qml`` style, ``legend.csv``).
* :mod:`~mtan_s1s2.export.quicklook`: a PNG of a class map with its legend.
"""
