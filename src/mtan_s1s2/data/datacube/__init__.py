"""``data=datacube``: scenes of xarray datacubes (NetCDF, Zarr).

* :mod:`~mtan_s1s2.data.datacube.reader`: datacube variables, their dims, CRS, grid and CF
  encoding; the per-modality series and label layers.
* :mod:`~mtan_s1s2.data.datacube.scenes`: one scene folder -> a :class:`~mtan_s1s2.data.scene.scene.Scene`.
* :mod:`~mtan_s1s2.data.datacube.datamodule`: :class:`DatacubeDataModule`.
"""

from mtan_s1s2.data.datacube.datamodule import DatacubeDataModule

__all__ = ["DatacubeDataModule"]
