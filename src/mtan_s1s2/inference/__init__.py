"""Scene-wide prediction: tiled, memory bounded, to georeferenced maps.

* :mod:`~mtan_s1s2.inference.scene`: :func:`predict_scene` reads a scene tile by tile,
  runs the per-pixel model and writes COG maps (:mod:`mtan_s1s2.export`).
* :mod:`~mtan_s1s2.inference.sweep`: the summary of a multirun over scenes
  (``python predict.py -m ... scene=a,b,c``).
"""
