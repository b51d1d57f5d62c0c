"""SITS data: the batch contract, the base datamodule, normalisation, and one subpackage per source.

* :mod:`~mtan_s1s2.data.batch`: the sample and batch contract, modality names, collation.
* :mod:`~mtan_s1s2.data.datamodule`: :class:`SITSDataModule`, the base of every source.
* :mod:`~mtan_s1s2.data.normalization`: per-channel statistics (check, compute, apply, cache).
* :mod:`~mtan_s1s2.data.synthetic`: the synthetic S1/S2 generator (``data=synthetic``).
* :mod:`~mtan_s1s2.data.pastis`: the PASTIS-R file layout (``data=pastis``).
"""
