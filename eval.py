"""Test metrics of a trained checkpoint: ``python eval.py ckpt_path=... [data=...]``.

A thin shim over :func:`mtan_s1s2.cli.eval.main` (configs in ``configs/``).
"""

from mtan_s1s2.cli.eval import main

if __name__ == "__main__":
    main()
