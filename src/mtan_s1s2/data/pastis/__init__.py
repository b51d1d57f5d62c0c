"""PASTIS-R-format S1/S2 time series (``data=pastis``): layout, dataset, datamodule, writer.

* :mod:`~mtan_s1s2.data.pastis.layout`: paths, ``metadata.geojson``, dates, file checks.
* :mod:`~mtan_s1s2.data.pastis.dataset`: :class:`PASTISDataset` (raw patches, memory-mapped)
  and the PASTIS nomenclature.
* :mod:`~mtan_s1s2.data.pastis.datamodule`: :class:`PASTISDataModule` (folds, crops, cached
  normalisation statistics).
* :mod:`~mtan_s1s2.data.pastis.writer`: synthetic patches written in this layout.
* ``python -m mtan_s1s2.data.pastis --root ROOT``: check a folder, print its statistics.
"""

from mtan_s1s2.data.pastis.datamodule import PASTISDataModule
from mtan_s1s2.data.pastis.dataset import PASTIS_CLASS_NAMES, PASTISDataset

__all__ = ["PASTIS_CLASS_NAMES", "PASTISDataModule", "PASTISDataset"]
