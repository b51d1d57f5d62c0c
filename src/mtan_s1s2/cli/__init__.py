"""Entry points (``train.py``, ``eval.py``, ``predict.py``) and what runs around a job.

* :mod:`~mtan_s1s2.cli.config`: where the configs live, resolvers, the common start of a run.
* :mod:`~mtan_s1s2.cli.train`, :mod:`~mtan_s1s2.cli.eval`, :mod:`~mtan_s1s2.cli.predict`.
* :mod:`~mtan_s1s2.cli.runners`: the model of a run behind one interface (fit, test,
  finish), Lightning models and baselines alike.
* :mod:`~mtan_s1s2.cli.validate`: the config check; :func:`~mtan_s1s2.cli.validate.exit_config_error`.
* :mod:`~mtan_s1s2.cli.failures`: a failed job's ``summary.json``, the NaN-loss check.
* :mod:`~mtan_s1s2.cli.ddp`: Lightning DDP inside a Hydra multirun.
* :mod:`~mtan_s1s2.cli.plugins`: clear errors for missing optional Hydra plugins.
"""
