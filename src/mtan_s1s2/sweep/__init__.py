"""Hydra sweeps: read the runs a multirun left and write its report.

* :mod:`~mtan_s1s2.sweep.jobs`: read what the jobs of a sweep left on disk.
* :mod:`~mtan_s1s2.sweep.table`: the rows of the summary (seeds pooled, speed-ups), as CSV,
  Markdown and a console table.
* :mod:`~mtan_s1s2.sweep.plot`: ``epoch_times.png``.
* :mod:`~mtan_s1s2.sweep.summarize`: ``write_summary`` and the CLI
  ``python -m mtan_s1s2.sweep.summarize SWEEP_DIR``.
* :mod:`~mtan_s1s2.sweep.callback`: the Hydra callback run around every multirun.
"""
