"""Pixel and parcel time-series tables (``data=table``), CSV or Parquet, wide or long.

* :mod:`~mtan_s1s2.data.table.columns`: band columns from patterns such as ``{band}-ts{t}``.
* :mod:`~mtan_s1s2.data.table.dates`: dates from a column, a list, or a start and step.
* :mod:`~mtan_s1s2.data.table.reader`: read, check and convert to physical units.
* :mod:`~mtan_s1s2.data.table.dataset`: pixels as ``(T, C, 1, 1)`` samples.
* :mod:`~mtan_s1s2.data.table.datamodule`: labels, honest splits, loaders.
"""

from mtan_s1s2.data.table.datamodule import TableDataModule

__all__ = ["TableDataModule"]
