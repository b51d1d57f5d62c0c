"""Hydra sweeps: read the runs a multirun left and write its report.

* :mod:`~mtan_s1s2.sweep.jobs`: read what the jobs of a sweep left on disk.
* :mod:`~mtan_s1s2.sweep.aggregate`: the rows of the summary (seeds and folds pooled,
  speed-ups, paired differences with the reference model).
* :mod:`~mtan_s1s2.sweep.render`: the rows as ``summary.csv``, ``jobs.csv``, ``summary.md``
  and a console table.
* :mod:`~mtan_s1s2.sweep.plot`: ``epoch_times.png``.
* :mod:`~mtan_s1s2.sweep.summarize`: ``write_summary`` and the CLI
  ``python -m mtan_s1s2.sweep.summarize SWEEP_DIR``.
* :mod:`~mtan_s1s2.sweep.callback`: the Hydra callback run around every multirun.
"""
