"""Reference classifiers trained in the same harness as the mTAN model.

They get the same samples, split, normalisation, metrics and output files.

* :mod:`~mtan_s1s2.baselines.features`: fixed-length per-pixel features from SITS batches
  (values at a date grid; ``series`` layout with gaps filled, for Rocket models).
* :mod:`~mtan_s1s2.baselines.base`: :class:`~mtan_s1s2.baselines.base.FeatureBaseline`,
  what they share (fit, probabilities, the ``<backend>.joblib`` model file).
* :mod:`~mtan_s1s2.baselines.random_forest`: ``python train.py model=random_forest`` (scikit-learn).
* :mod:`~mtan_s1s2.baselines.lightgbm`: ``model=lightgbm`` (LightGBM, early-stopped on validation).
* :mod:`~mtan_s1s2.baselines.rocket`: ``model=minirocket``, ``model=multirocket_hydra`` (aeon).
* :mod:`~mtan_s1s2.baselines.harness`: fit a baseline on a datamodule and write the run's
  ``summary.json``, metrics and per-class report like a training run.
* :mod:`~mtan_s1s2.baselines.module`: a fitted baseline behind a network's interface, so
  ``eval.py`` / ``predict.py`` map scenes, patches and tables with it.
"""
