"""Prediction to maps: scenes tiled and memory bounded, patches through Lightning.

* :mod:`~mtan_s1s2.inference.scene`: :func:`predict_scene` reads a scene tile by tile,
  runs the per-pixel model and writes COG maps (:mod:`mtan_s1s2.export`).
* :mod:`~mtan_s1s2.inference.patches`: :class:`PatchMapWriter` writes the class maps of
  patch sources (``.npy``, GeoTIFF) during ``trainer.predict``.
* :mod:`~mtan_s1s2.inference.sweep`: the summary of a multirun over scenes
  (``python predict.py -m ... scene=a,b,c``).
"""
