"""Reference classifiers trained in the same harness as the mTAN model.

They get the same samples, split, normalisation, metrics and output files.

* :mod:`~mtan_s1s2.baselines.features`: fixed-length per-pixel features from SITS batches.
* :mod:`~mtan_s1s2.baselines.random_forest`: :class:`RandomForestBaseline` (scikit-learn),
  ``python train.py model=random_forest``.
* :mod:`~mtan_s1s2.baselines.harness`: fit a baseline on a datamodule and write the run's
  ``summary.json``, metrics and per-class report like a training run.
"""
