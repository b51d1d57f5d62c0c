"""Raster scenes: rasters of one area on one grid, their honest splits and training windows.

* :mod:`~mtan_s1s2.data.scene.grid`: :class:`~mtan_s1s2.data.scene.grid.Grid` (CRS,
  transform, shape), the common grid of a scene's rasters, aligned reads, tiles.
* :mod:`~mtan_s1s2.data.scene.scene`: :class:`~mtan_s1s2.data.scene.scene.Scene` (the
  modality series, label and parcel layers of one scene) and the reader interfaces
  (:class:`~mtan_s1s2.data.scene.scene.ModalitySeries`,
  :class:`~mtan_s1s2.data.scene.scene.RasterLayer`) that the datacube and GeoTIFF readers
  implement.
* :mod:`~mtan_s1s2.data.scene.folders`: scene folders -> scenes: the steps the datacube and
  GeoTIFF readers share (:class:`~mtan_s1s2.data.scene.folders.FolderReader`: what differs).
* :mod:`~mtan_s1s2.data.scene.groups`: pixels -> groups (blocks, parcels, scenes) -> splits.
* :mod:`~mtan_s1s2.data.scene.windows`: the training windows of each split.
* :mod:`~mtan_s1s2.data.scene.datamodule`:
  :class:`~mtan_s1s2.data.scene.datamodule.SceneDataModule`, the base of ``data=datacube``
  and ``data=geotiff``.
"""
