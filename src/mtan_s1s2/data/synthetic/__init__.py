"""Synthetic S1/S2 SITS (``data=synthetic``): the generator, its dataset and datamodule.

* :mod:`~mtan_s1s2.data.synthetic.generator`: parcels, phenology, S2 reflectance, S1
  backscatter, clouds and no-data of one patch, deterministic by its key; the presets.
* :mod:`~mtan_s1s2.data.synthetic.dataset`: :class:`SyntheticSITSDataset`, patches
  generated on the fly.
* :mod:`~mtan_s1s2.data.synthetic.datamodule`: :class:`SyntheticSITSDataModule`.
"""

from mtan_s1s2.data.synthetic.datamodule import SyntheticSITSDataModule
from mtan_s1s2.data.synthetic.dataset import SyntheticSITSDataset
from mtan_s1s2.data.synthetic.generator import GENERATOR_KEYS, PRESETS

__all__ = ["GENERATOR_KEYS", "PRESETS", "SyntheticSITSDataModule", "SyntheticSITSDataset"]
