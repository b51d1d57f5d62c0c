"""``data=geotiff``: scenes of GeoTIFFs read with rasterio.

* :mod:`~mtan_s1s2.data.geotiff.reader`: date-major stacks, per-date files, masks, label bands.
* :mod:`~mtan_s1s2.data.geotiff.scenes`: how a scene folder's GeoTIFFs are opened (:class:`GeoTiffFolder`).
* :mod:`~mtan_s1s2.data.geotiff.datamodule`: :class:`GeoTiffDataModule`.
* :mod:`~mtan_s1s2.data.geotiff.writer`: write a scene as GeoTIFFs (either layout).
"""

from mtan_s1s2.data.geotiff.datamodule import GeoTiffDataModule

__all__ = ["GeoTiffDataModule"]
