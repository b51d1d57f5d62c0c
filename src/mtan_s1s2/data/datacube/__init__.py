"""``data=datacube``: scenes of xarray datacubes (NetCDF, Zarr).

* :mod:`~mtan_s1s2.data.datacube.reader`: datacube variables, their dims, CRS, grid and CF
  encoding; the per-modality series and label layers.
* :mod:`~mtan_s1s2.data.datacube.scenes`: how a scene folder's datacubes are opened (:class:`DatacubeFolder`).
* :mod:`~mtan_s1s2.data.datacube.datamodule`: :class:`DatacubeDataModule`.
"""

from mtan_s1s2.data.datacube.datamodule import DatacubeDataModule

__all__ = ["DatacubeDataModule"]
