"""The mtan-style S1/S2 classifier, its layers, losses and the ``mlp=auto`` timing.

* :mod:`~mtan_s1s2.models.layers`: MLP backends and their registry, tensor layout, time
  embedding, multi-time attention.
* :mod:`~mtan_s1s2.models.mtan`: :class:`MTANClassifier`.
* :mod:`~mtan_s1s2.models.losses`: masked cross-entropy, class weights.
* :mod:`~mtan_s1s2.models.backend_selection`: time every backend on a real batch, pick the
  fastest (used by the ``mlp=auto`` callback).
"""
