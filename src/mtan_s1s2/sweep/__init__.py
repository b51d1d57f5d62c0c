"""Hydra sweeps: per-job failure records, and the multirun summary table and plot.

* :mod:`~mtan_s1s2.sweep.job`: job side (failed ``summary.json``, NaN-loss check, DDP
  re-launch of one job).
* :mod:`~mtan_s1s2.sweep.jobs`: read what the jobs of a sweep left on disk.
* :mod:`~mtan_s1s2.sweep.summarize`: ``summary.csv`` / ``summary.md`` and the CLI
  ``python -m mtan_s1s2.sweep.summarize SWEEP_DIR``.
* :mod:`~mtan_s1s2.sweep.plot`: ``epoch_times.png``.
* :mod:`~mtan_s1s2.sweep.callback`: the Hydra callback run around every multirun.
* :mod:`~mtan_s1s2.sweep.plugins`: clear errors for missing optional Hydra plugins.
"""
