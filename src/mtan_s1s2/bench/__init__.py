"""Benchmarks of the MLP backends: ``python -m mtan_s1s2.bench`` (``configs/bench.yaml``).

* :mod:`~mtan_s1s2.bench.timing`: precision contexts, ``torch.compile`` with fallback,
  ``torch.utils.benchmark`` timing with warm-up and synchronisation.
* :mod:`~mtan_s1s2.bench.layers`: the workloads (1x1 projection, the model's MLP blocks,
  a whole training step).
* :mod:`~mtan_s1s2.bench.report`: hardware stamp, ratios, table, CSV/JSON.
* :mod:`~mtan_s1s2.bench.epochs`: training throughput per backend in fresh processes.
* :mod:`~mtan_s1s2.bench.__main__`: the Hydra entry point and ``run_benchmark(cfg)``.
"""
