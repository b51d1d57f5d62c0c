"""Lightning callbacks: epoch timing, ``summary.json``, ``mlp=auto``, exact resume, the test report.

* :mod:`~mtan_s1s2.callbacks.timing`: :class:`EpochTimer`, honest per-epoch timings.
* :mod:`~mtan_s1s2.callbacks.run_summary`: :class:`RunSummary`, the run's ``summary.json``.
* :mod:`~mtan_s1s2.callbacks.auto_backend`: :class:`AutoBackend`, the fastest MLP backend.
* :mod:`~mtan_s1s2.callbacks.resume`: :class:`ExactResume`, random generators and the epoch's
  training metrics in every checkpoint, restored by a resumed fit.
* :mod:`~mtan_s1s2.callbacks.classification_report`: :class:`ClassificationReport`, per-class CSV and the
  confusion matrix.
"""
