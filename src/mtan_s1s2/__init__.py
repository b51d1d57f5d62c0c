"""mtan-s1s2: multi-time attention classifiers of Sentinel-1/Sentinel-2 satellite image time series.

Irregular, unaligned S2 and S1 acquisitions are attended onto shared reference times
(mTAN, Shukla & Marlin, ICLR 2021), fused and classified per pixel; every MLP block switches
backend by config (``mlp=linear|conv|channels_last|auto``). The design is in
``docs/model.md``; the entry points are ``train.py``, ``eval.py``, ``predict.py`` and
``python -m mtan_s1s2.bench``.
"""
